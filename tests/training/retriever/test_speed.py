"""Speed levers (training.retriever.speed, speed.* config): same loss and trainable gradients on
and off on the tiny model, and each lever does what it claims (no tower recompute, no fp32 LoRA
input, fewer padded tokens, layers left out of checkpointing, compiled layers)."""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")

from training.loop.data import load_image, load_records  # noqa: E402
from training.loop.inputs import Collator  # noqa: E402
from training.retriever.build import build_retriever  # noqa: E402
from training.retriever.config import load_train_config  # noqa: E402


def _config(tiny_base, speed: dict | None = None, precision: str = "fp32", dropout: float = 0.0):
    return load_train_config(
        "tiny",
        {
            "model": {"source": "local", "path": str(tiny_base)},
            "lora": {"dropout": dropout},
            "run": {"precision": precision},
            "speed": speed or {},
        },
    )


def _retriever(cfg, tiny_base, checkpointing: bool):
    """A retriever whose LoRA B matrices are non-zero (at init they are 0, so A gets no gradient)."""
    torch.manual_seed(0)
    retriever, processor, _ = build_retriever(
        cfg, tiny_base, torch.device("cpu"), checkpointing=checkpointing
    )
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in retriever.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.05)
    return retriever.train(), processor


@pytest.fixture(scope="module")
def batch(tiny_retriever, tiny_export):
    """5 images with different prompt counts (so different lengths) and 2 captions each."""
    _, processor, _ = tiny_retriever
    records = load_records(tiny_export, "train")[:5]
    collator = Collator(processor, load_train_config("tiny").data)
    items = [
        (i, load_image(r.path, 32), r.prompts[: 1 + i % 4], r.captions[:2]) for i, r in enumerate(records)
    ]
    out = collator.train_batch(items)
    lengths = out["img_attention_mask"].sum(dim=1)
    assert len(set(lengths.tolist())) > 2  # the chunking test needs padding to remove
    return out


def _loss_and_grads(retriever, batch) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    torch.manual_seed(2)  # the same dropout draws for both runs
    out = retriever(batch)
    out["total"].backward()
    grads = {n: p.grad.clone() for n, p in retriever.named_parameters() if p.requires_grad}
    assert all(g.abs().sum() > 0 for n, g in grads.items() if "lora_A" in n)  # a real comparison
    return {k: float(v) for k, v in out.items()}, grads


def _assert_same(a, b, rel: float) -> None:
    """Losses within `rel` (relative), each gradient within `rel` of its norm; rel=0: bit-equal."""
    (loss_a, grads_a), (loss_b, grads_b) = a, b
    assert loss_a.keys() == loss_b.keys()
    for key in loss_a:
        assert loss_a[key] == pytest.approx(loss_b[key], rel=rel, abs=0 if rel == 0 else 1e-7), key
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        error = float((grads_a[name] - grads_b[name]).norm() / grads_b[name].norm().clamp(min=1e-30))
        assert error <= rel, f"{name}: relative gradient error {error:.2e} > {rel:.0e}"


def _count_mlp_calls(retriever, layer_kind: str) -> Counter:
    """Calls of each layer's MLP; a checkpointed layer's recompute calls it again in backward.

    Pre-hooks: the recompute stops as soon as the last saved tensor is back, inside the MLP."""
    calls: Counter = Counter()
    for name, module in retriever.named_modules():
        if name.endswith(".mlp") and type(module).__name__.startswith(layer_kind):
            module.register_forward_pre_hook(lambda m, a, n=name: calls.update([n]))
    return calls


def test_vision_no_grad_same_loss_and_grads_and_the_tower_is_not_recomputed(tiny_base, batch):
    runs = {}
    for on in (False, True):
        cfg = _config(tiny_base, {"vision_no_grad": on}, dropout=0.1)  # the recipe's LoRA dropout
        retriever, _ = _retriever(cfg, tiny_base, checkpointing=True)
        calls = _count_mlp_calls(retriever, "CLIP")
        runs[on] = _loss_and_grads(retriever, batch)
        # off: peft's input-grad hook drags the frozen tower into autograd: forward + recompute
        # (of the layers whose output is used: the features are read before the last layer)
        assert max(calls.values()) == (1 if on else 2)
    _assert_same(runs[True], runs[False], 0)  # the same arithmetic: bit-equal


def test_vision_no_grad_refuses_a_tower_that_trains(tiny_base):
    cfg = _config(tiny_base, {"vision_no_grad": True})
    cfg.lora.target_regex = r".*vision_tower.*\.(q_proj|v_proj)"
    with pytest.raises(ValueError, match="frozen vision tower"):
        build_retriever(cfg, tiny_base, torch.device("cpu"))


def test_lora_no_input_cast_same_under_bf16_autocast_and_adapters_see_bf16(tiny_base, batch):
    runs = {}
    for on in (False, True):
        cfg = _config(tiny_base, {"lora_no_input_cast": on}, precision="bf16")
        retriever, _ = _retriever(cfg, tiny_base, checkpointing=False)
        seen = set()
        for name, module in retriever.named_modules():
            if name.endswith("lora_A.default"):
                module.register_forward_pre_hook(lambda m, a, seen=seen: seen.add(a[0].dtype))
        runs[on] = _loss_and_grads(retriever, batch)
        assert seen == ({torch.bfloat16} if on else {torch.float32})
    # autocast rounds the fp32 copy back to the same bf16 values: bit-equal
    _assert_same(runs[True], runs[False], 0)


def test_checkpoint_skip_last_same_with_dropout_and_skips_the_recompute(tiny_base, batch):
    runs = {}
    for skip in (0, 1):
        cfg = _config(tiny_base, {"checkpoint_skip_last": skip}, dropout=0.1)
        retriever, _ = _retriever(cfg, tiny_base, checkpointing=True)
        calls = _count_mlp_calls(retriever, "Mistral")
        runs[skip] = _loss_and_grads(retriever, batch)
        last = max(calls)  # "...layers.1.mlp": two forwards (images, captions), recomputed unless skipped
        assert calls[last] == (2 if skip else 4)
        assert all(n == 4 for name, n in calls.items() if name != last)
    # the recompute replays the RNG state, so dropout draws agree and the values are bit-equal
    _assert_same(runs[1], runs[0], 0)


def test_checkpoint_skip_last_refuses_more_layers_than_the_model_has(tiny_base):
    with pytest.raises(ValueError, match="has 2 layers"):
        build_retriever(_config(tiny_base, {"checkpoint_skip_last": 3}), tiny_base, torch.device("cpu"))


@pytest.mark.parametrize("chunks", [2, 3])
def test_length_chunks_same_loss_and_grads_with_fewer_padded_tokens(tiny_base, batch, chunks):
    runs, tokens = {}, {}
    for n in (1, chunks):
        retriever, _ = _retriever(_config(tiny_base, {"length_chunks": n}), tiny_base, checkpointing=False)
        tokens[n] = 0
        for name, module in retriever.named_modules():
            if name.endswith("language_model.embed_tokens"):  # every encoder forward passes here
                module.register_forward_pre_hook(
                    lambda m, a, n=n: tokens.update({n: tokens[n] + a[0].numel()})
                )
        runs[n] = _loss_and_grads(retriever, batch)
    assert tokens[chunks] < tokens[1]  # padding left out
    # different matrix shapes sum in a different order: equal to float32 rounding
    _assert_same(runs[chunks], runs[1], 1e-5)


def test_all_levers_together_match_the_baseline_with_checkpointing(tiny_base, batch):
    on = {"vision_no_grad": True, "lora_no_input_cast": True, "checkpoint_skip_last": 1, "length_chunks": 2}
    base, _ = _retriever(_config(tiny_base), tiny_base, checkpointing=True)
    fast, _ = _retriever(_config(tiny_base, on), tiny_base, checkpointing=True)
    _assert_same(_loss_and_grads(fast, batch), _loss_and_grads(base, batch), 1e-5)


def test_compile_layers_is_wired_and_keeps_loss_and_grads(tiny_base, batch):
    # aot_eager traces forward and backward graphs like inductor but skips code generation,
    # which on this CPU would take minutes; the GPU benchmark runs inductor.
    cfg = _config(tiny_base, {"compile_layers": True, "compile_backend": "aot_eager"})
    fast, _ = _retriever(cfg, tiny_base, checkpointing=True)
    layers = fast._backbone().language_model.layers
    assert all(layer._compiled_call_impl is not None for layer in layers)
    base, _ = _retriever(_config(tiny_base), tiny_base, checkpointing=True)
    _assert_same(_loss_and_grads(fast, batch), _loss_and_grads(base, batch), 1e-5)


def test_the_recipe_turns_on_only_the_levers_shown_bit_equal():
    speed = load_train_config("h200x8").speed
    assert speed.vision_no_grad and load_train_config("h200x8").run.gradient_checkpointing
    assert not speed.lora_no_input_cast and speed.length_chunks == 1 and not speed.compile_layers


def test_bit_equal_levers_train_the_same_through_the_loop(tiny_config, tmp_path):
    """The real loop (loader, collator, AdamW) in bf16 with checkpointing and LoRA dropout 0.1:
    the levers that the recipe may turn on without a GPU check leave every step's numbers as they were."""
    from training.loop.train import train

    histories = {}
    for on in (False, True):
        cfg = tiny_config.model_copy(deep=True)
        cfg.run.out_dir = str(tmp_path / f"run-{on}")
        cfg.run.precision, cfg.run.gradient_checkpointing, cfg.lora.dropout = "bf16", True, 0.1
        cfg.optim.max_steps = 2
        if on:
            cfg.speed.vision_no_grad, cfg.speed.checkpoint_skip_last = True, 1
        histories[on] = [{k: v for k, v in row.items() if k != "sec"} for row in train(cfg).history]
    assert histories[True] == histories[False]


def test_single_row_sub_batches_reach_attention_without_a_mask(tiny_base, batch, monkeypatch):
    """length_chunks = rows: no padding, so transformers passes SDPA no mask and is_causal, the
    form its flash kernel takes (a padded batch needs an explicit mask)."""
    import torch.nn.functional as F

    calls = []
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, *args, **kwargs):
        calls.append((q.shape[-2], attn_mask is None, kwargs.get("is_causal")))
        return sdpa(q, k, v, attn_mask, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    rows = batch["img_input_ids"].shape[0]
    for chunks, masked in ((1, True), (rows, False)):
        retriever, _ = _retriever(
            _config(tiny_base, {"length_chunks": chunks}), tiny_base, checkpointing=False
        )
        calls.clear()
        with torch.no_grad():
            retriever.encode_images(
                batch["img_input_ids"], batch["img_attention_mask"], batch["pixel_values"],
                batch["image_sizes"], batch["img_slot_lens"],
            )  # fmt: skip
        shortest = int(batch["img_attention_mask"].sum(dim=1).min())  # CLIP's tile sequences are shorter
        decoder = {(no_mask, causal) for length, no_mask, causal in calls if length >= shortest}
        assert decoder == ({(False, False)} if masked else {(True, True)})


def test_assemble_retriever_takes_a_randomly_built_base_with_levers(tiny_base, batch):
    """The path of the GPU benchmark (and a rehearsal): config only, random weights, no weight file."""
    import copy

    from transformers import AutoConfig, AutoProcessor, LlavaNextForConditionalGeneration

    from training.retriever.build import assemble_retriever

    cfg = _config(tiny_base, {"vision_no_grad": True, "length_chunks": 2})
    processor = AutoProcessor.from_pretrained(str(tiny_base))  # assemble_retriever adds the lens tokens
    model = LlavaNextForConditionalGeneration._from_config(
        copy.deepcopy(AutoConfig.from_pretrained(tiny_base))
    )
    retriever, _, ids = assemble_retriever(cfg, model, processor, torch.device("cpu"), checkpointing=True)
    assert retriever.length_chunks == 2 and ids.prompt == processor.tokenizer.convert_tokens_to_ids(
        "<PROMPT>"
    )
    out = retriever.train()(batch)
    out["total"].backward()
    assert torch.isfinite(out["total"]) and not any(
        p.grad is not None for n, p in retriever.named_parameters() if "vision_tower" in n
    )


def test_length_chunks_keep_global_mode_and_unlabelled_captions(tiny_base, batch):
    """Global-only baseline (no slots) and inference captions (all five lenses active)."""
    outs = {}
    for n in (1, 3):
        cfg = _config(tiny_base, {"length_chunks": n})
        cfg.loss.mode = "global"
        retriever, _ = _retriever(cfg, tiny_base, checkpointing=False)
        outs[n] = _loss_and_grads(retriever, batch)[0]
        lens_cfg = _config(tiny_base, {"length_chunks": n})
        with torch.no_grad():
            emb = _retriever(lens_cfg, tiny_base, checkpointing=False)[0].encode_captions(
                batch["txt_input_ids"], batch["txt_attention_mask"]
            )
        outs[n]["slots"], outs[n]["slot_lens"] = emb.slots, emb.slot_lens
    assert outs[3]["total"] == pytest.approx(outs[1]["total"], rel=1e-5)
    torch.testing.assert_close(outs[3]["slots"], outs[1]["slots"], rtol=1e-5, atol=1e-6)
    assert torch.equal(outs[3]["slot_lens"], outs[1]["slot_lens"]) and bool((outs[1]["slot_lens"] >= 0).all())
