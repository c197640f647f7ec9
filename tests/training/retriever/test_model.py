"""Model wrapper on the tiny LLaVA-Next: tokens, LoRA placement, slot/global extraction, losses."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from training.loop.data import load_image, load_records  # noqa: E402
from training.loop.inputs import Collator  # noqa: E402
from training.retriever.lenses import LENS_TOKENS, NEW_TOKENS, PROMPT_TOKEN  # noqa: E402
from training.retriever.model import add_lens_tokens, last_token_states, token_states  # noqa: E402


def test_new_tokens_start_at_eos_plus_scaled_noise_and_are_mirrored(tiny_base):
    from transformers import AutoProcessor, LlavaNextForConditionalGeneration

    processor = AutoProcessor.from_pretrained(str(tiny_base))
    model = LlavaNextForConditionalGeneration.from_pretrained(str(tiny_base))
    n_before = len(processor.tokenizer)
    ids = add_lens_tokens(processor.tokenizer, model, sigma=0.1, seed=3)
    assert (
        len(processor.tokenizer) == n_before + len(NEW_TOKENS) == model.get_input_embeddings().weight.shape[0]
    )
    emb = model.get_input_embeddings().weight.detach()
    noise = emb[ids.new] - emb[ids.eos]
    d = emb.shape[1]
    assert noise.abs().max() > 0 and noise.std().item() == pytest.approx(0.1 / math.sqrt(d), rel=0.35)
    assert torch.equal(model.get_output_embeddings().weight.detach()[ids.new], emb[ids.new])
    # every added token is a single, unsplittable id
    for tok in NEW_TOKENS:
        assert len(processor.tokenizer(tok, add_special_tokens=False)["input_ids"]) == 1


def test_lora_only_in_language_model_vision_frozen_projector_trainable(tiny_retriever):
    retriever = tiny_retriever[0]
    names = {n: p.requires_grad for n, p in retriever.named_parameters()}
    assert any("language_model" in n and "lora_A" in n for n in names)
    assert not any("vision_tower" in n and "lora" in n for n in names)
    assert not any(t for n, t in names.items() if "vision_tower" in n)
    assert all(t for n, t in names.items() if "multi_modal_projector.modules_to_save" in n)
    assert not any(t for n, t in names.items() if "lm_head" in n)
    assert [n for n, t in names.items() if t and "embed_tokens" in n] == [
        "net.base_model.model.model.language_model.embed_tokens.token_adapter.trainable_tokens_delta.default"
    ]


@pytest.fixture(scope="module")
def batch(tiny_retriever, tiny_export):
    from training.retriever.config import load_train_config

    _, processor, _ = tiny_retriever
    records = load_records(tiny_export, "train")[:3]
    collator = Collator(processor, load_train_config("tiny").data)
    items = [(i, load_image(r.path, 32), r.prompts, r.captions[:2]) for i, r in enumerate(records)]
    return collator.train_batch(items), records


def test_slots_sit_at_prompt_tokens_after_image_expansion(tiny_retriever, batch):
    retriever, processor, ids = tiny_retriever
    b, records = batch
    input_ids = b["img_input_ids"]
    image_token = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    # the processor expanded <image> into one token per image feature (many, not one)
    assert int((input_ids[0] == image_token).sum()) > 10
    with torch.no_grad():
        emb = retriever.encode_images(
            input_ids, b["img_attention_mask"], b["pixel_values"], b["image_sizes"], b["img_slot_lens"]
        )
        hidden = retriever._hidden(
            input_ids=input_ids,
            attention_mask=b["img_attention_mask"],
            pixel_values=b["pixel_values"],
            image_sizes=b["image_sizes"],
        )
    for row, rec in enumerate(records):
        positions = (input_ids[row] == ids.prompt).nonzero().flatten()
        assert len(positions) == len(rec.prompts)
        assert b["img_slot_lens"][row, : len(rec.prompts)].tolist() == [c for _, c in rec.prompts]
        for k, pos in enumerate(positions):
            torch.testing.assert_close(emb.slots[row, k], hidden[row, pos].float())
        last = int(b["img_attention_mask"][row].sum()) - 1
        assert int(input_ids[row, last]) == ids.eos  # global = the appended EOS
        torch.testing.assert_close(emb.global_[row], hidden[row, last].float())


def test_global_and_slots_do_not_depend_on_padding(tiny_retriever, tiny_export):
    from training.retriever.config import load_train_config

    retriever, processor, _ = tiny_retriever
    collator = Collator(processor, load_train_config("tiny").data)
    texts = ["A cup of coffee.", "A much longer caption about a rocket standing on its launch pad at dawn."]
    with torch.no_grad():
        both = collator.captions(texts)
        assert (
            int(both["txt_attention_mask"][0].sum()) < both["txt_attention_mask"].shape[1]
        )  # row 0 is padded
        together = retriever.encode_captions(both["txt_input_ids"], both["txt_attention_mask"])
        alone = collator.captions(texts[:1])
        single = retriever.encode_captions(alone["txt_input_ids"], alone["txt_attention_mask"])
    torch.testing.assert_close(together.global_[0], single.global_[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(together.slots[0], single.slots[0], atol=1e-5, rtol=1e-4)
    assert together.slot_lens.tolist() == [[0, 1, 2, 3, 4]] * 2  # inference: all five lenses active


def test_caption_training_slots_activate_only_the_label(tiny_retriever, batch):
    retriever = tiny_retriever[0]
    b, _ = batch
    with torch.no_grad():
        emb = retriever.encode_captions(b["txt_input_ids"], b["txt_attention_mask"], b["txt_lens"])
    for row, label in enumerate(b["txt_lens"].tolist()):
        assert emb.slot_lens[row].tolist() == [label if j == label else -1 for j in range(5)]


def test_one_backbone_pass_per_batch_and_named_losses_with_gradients(tiny_retriever, batch):
    retriever = tiny_retriever[0]
    b, _ = batch
    calls = []
    handle = retriever._backbone().register_forward_hook(lambda *a: calls.append(1))
    try:
        out = retriever(b)
    finally:
        handle.remove()
    assert len(calls) == 2  # one pass for all images (all their prompts), one for all captions
    assert set(out) == {"total", "ret", "i2t", "t2i", "slot", "div", "fallback_rate"}
    out["total"].backward()
    grads = {n: p.grad for n, p in retriever.named_parameters() if p.requires_grad}
    for key in ("lora_B", "multi_modal_projector", "trainable_tokens_delta"):
        assert any(g is not None and g.abs().sum() > 0 for n, g in grads.items() if key in n), key
        assert all(g is None or torch.isfinite(g).all() for g in grads.values())
    retriever.zero_grad(set_to_none=True)


def test_token_helpers_on_hand_made_tensors():
    hidden = torch.arange(2 * 5 * 2, dtype=torch.float32).reshape(2, 5, 2)
    ids = torch.tensor([[7, 9, 7, 9, 0], [9, 1, 1, 0, 0]])
    states, counts = token_states(hidden, ids, 9, 2)
    assert counts.tolist() == [2, 1]
    torch.testing.assert_close(states[0], hidden[0, [1, 3]])
    torch.testing.assert_close(states[1], torch.stack([hidden[1, 0], torch.zeros(2)]))
    right = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    torch.testing.assert_close(last_token_states(hidden, right), torch.stack([hidden[0, 2], hidden[1, 4]]))
    torch.testing.assert_close(last_token_states(hidden, left), torch.stack([hidden[0, 4], hidden[1, 4]]))
    with pytest.raises(ValueError):
        last_token_states(hidden, torch.zeros(2, 5, dtype=torch.long))


def test_input_strings_follow_equations_1_and_2(tiny_retriever):
    from training.retriever.config import load_train_config

    processor = tiny_retriever[1]
    data = load_train_config("tiny").data
    lens = Collator(processor, data)
    eos = processor.tokenizer.eos_token
    assert (
        lens.image_text(["p one", "p two"])
        == f"<instruct>{data.image_task} <image> p one{PROMPT_TOKEN} p two{PROMPT_TOKEN}{eos}"
    )
    assert lens.caption_text("a cat") == f"<instruct>{data.caption_task} a cat {''.join(LENS_TOKENS)}{eos}"
    base = Collator(processor, data, lens_mode=False)
    assert base.image_text(["ignored"]) == f"<instruct>{data.image_task} <image>{eos}"
    assert base.caption_text("a cat") == f"<instruct>{data.caption_task} a cat{eos}"


def test_padded_vocabulary_is_not_resized(tiny_base):
    from transformers import AutoProcessor, LlavaNextForConditionalGeneration

    processor = AutoProcessor.from_pretrained(str(tiny_base))
    model = LlavaNextForConditionalGeneration.from_pretrained(str(tiny_base))
    model.resize_token_embeddings(len(processor.tokenizer) + 64, mean_resizing=False)  # like BGE-VL's padding
    rows = model.get_input_embeddings().weight.shape[0]
    ids = add_lens_tokens(processor.tokenizer, model, sigma=0.1, seed=0)
    emb = model.get_input_embeddings().weight.detach()
    assert emb.shape[0] == rows and max(ids.new) < rows
    cos = torch.nn.functional.cosine_similarity(emb[ids.new], emb[ids.eos][None], dim=1)
    assert cos.min() > 0.5  # initialised around EOS, not left at the resize's random rows
