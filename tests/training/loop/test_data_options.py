"""Training-data options: the image token limit, prompt density, lens restriction, data fraction."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from training.loop.data import BatchPlan, MicroBatchDataset, load_image, load_records  # noqa: E402
from training.loop.inputs import Collator  # noqa: E402
from training.loop.prompts import select_prompts  # noqa: E402
from training.retriever.config import load_train_config  # noqa: E402
from training.retriever.lenses import lens_index  # noqa: E402

PROMPTS = [(f"prompt number {i} about lens {lens} " * 3, lens) for lens in range(5) for i in range(3)]


def _collator(processor, **data):
    return Collator(processor, load_train_config("tiny").data.model_copy(update=data))


def _lengths(batch) -> list[int]:
    return batch["img_attention_mask"].sum(dim=1).tolist()


def test_image_inputs_over_the_token_limit_are_truncated_at_a_prompt_boundary(tiny_retriever, caplog):
    processor = tiny_retriever[1]
    pil = load_image_from_skimage()
    free = _collator(processor, max_image_tokens=100_000, max_prompts_per_image=64)
    full = free.images([pil, pil], [PROMPTS, PROMPTS[:2]])
    bare = free.images([pil], [[]])
    long_len, short_len = _lengths(full)
    limit = (int(_lengths(bare)[0]) + long_len) // 2  # room for the image and some prompts
    assert short_len <= limit < long_len
    capped = _collator(processor, max_image_tokens=limit, max_prompts_per_image=64)
    with caplog.at_level(logging.WARNING, logger="training.loop.inputs"):
        out = capped.images([pil, pil], [PROMPTS, PROMPTS[:2]])
    lengths = _lengths(out)
    assert max(lengths) <= limit and "over max_image_tokens" in caplog.text
    kept = int((out["img_slot_lens"][0] >= 0).sum())
    assert 0 < kept < len(PROMPTS)
    assert out["n_images_too_long"] == 1 and out["n_prompts_over_token_limit"] == len(PROMPTS) - kept
    # the kept prompts are the leading ones, and the row is exactly that prefix's input
    assert out["img_slot_lens"][0, :kept].tolist() == [c for _, c in PROMPTS[:kept]]
    ref = free.images([pil], [PROMPTS[:kept]])
    assert lengths[0] == _lengths(ref)[0]
    # one more prompt would not have fitted: the cut is the longest prefix that fits
    assert _lengths(free.images([pil], [PROMPTS[: kept + 1]]))[0] > limit
    tok = processor.tokenizer
    row = out["img_input_ids"][0][out["img_attention_mask"][0].bool()].tolist()
    assert row[-1] == tok.eos_token_id
    assert row.count(tok.convert_tokens_to_ids("<PROMPT>")) == kept
    assert out["img_slot_lens"][1].tolist()[:2] == [c for _, c in PROMPTS[:2]]  # short row untouched


def test_an_image_alone_over_the_limit_is_an_error(tiny_retriever):
    processor = tiny_retriever[1]
    pil = load_image_from_skimage()
    bare = _lengths(_collator(processor).images([pil], [[]]))[0]
    with pytest.raises(ValueError, match="max_image_tokens"):
        _collator(processor, max_image_tokens=int(bare) - 1).images([pil], [PROMPTS[:1]])


def test_prompt_density_selects_all_top1_or_no_prompts(tiny_export, tiny_retriever):
    processor = tiny_retriever[1]
    # the synthetic export has one prompt per lens at most; mix in several prompts per lens
    rich = max(load_records(tiny_export, "train"), key=lambda r: len(r.prompts))
    prompts = sorted(rich.prompts + PROMPTS[1::2], key=lambda p: p[1])
    assert len(prompts) > len({c for _, c in prompts})
    top1 = select_prompts(prompts, "top1")
    first: dict[int, str] = {}
    for text, lens in prompts:
        first.setdefault(lens, text)
    assert top1 == [(first[c], c) for c in sorted(first)]
    pil = load_image(rich.path, 32)
    for density, expected in (("all", prompts), ("top1", top1), ("none", top1)):
        cfg = {"prompt_density": density, "max_prompts_per_image": 64, "max_image_tokens": 100_000}
        out = _collator(processor, **cfg).images([pil], [prompts])
        slots = [c for c in out["img_slot_lens"][0].tolist() if c >= 0]
        assert slots == [c for _, c in expected]
    with pytest.raises(ValueError, match="unknown prompt density"):
        select_prompts(prompts, "some")


def test_token_only_density_keeps_one_lens_token_slot_per_lens_and_no_prompt_text(tiny_retriever):
    """z = 0 (supp. Table 5, "relying solely on learned lens tokens"): every lens of the image
    keeps a slot, whose query is the learned lens token; no prompt text reaches the model."""
    retriever, processor, ids = tiny_retriever
    pil = load_image_from_skimage()
    token_only = _collator(
        processor, prompt_density="none", max_prompts_per_image=64, max_image_tokens=100_000
    )
    batch = token_only.images([pil], [PROMPTS])
    assert batch["img_slot_lens"][0].tolist() == [0, 1, 2, 3, 4]
    row = batch["img_input_ids"][0][batch["img_attention_mask"][0].bool()].tolist()
    at_prompt = [i for i, t in enumerate(row) if t == ids.prompt]
    assert [row[i - 1] for i in at_prompt] == list(ids.lens)  # <LITERAL><PROMPT> ... <EMOTIONAL><PROMPT>
    text = processor.tokenizer.decode(row)
    assert "prompt number" not in text
    bare = token_only.images([pil], [[]])  # an image without prompts has no lens either: no slot
    assert bare["img_slot_lens"].shape[1] == 0
    # The encoder reads one slot per lens, so a caption meets a same-lens slot and Eq. 4 does
    # not fall back to the global cosine (the old z = 0 input had no slot at all).
    with torch.no_grad():
        emb = retriever.encode_images(
            batch["img_input_ids"], batch["img_attention_mask"], batch["pixel_values"],
            batch["image_sizes"], batch["img_slot_lens"],
        )  # fmt: skip
    assert emb.slots.shape[1] == 5 and bool(torch.isfinite(emb.slots).all())
    assert torch.equal(emb.slot_lens, batch["img_slot_lens"])


def test_lens_restricted_records_keep_only_that_lens(tiny_export, caplog):
    captions = pd.read_parquet(tiny_export / "captions.parquet")
    train = captions[captions["split"] == "train"]
    with caplog.at_level(logging.WARNING, logger="training.loop.data"):
        records = load_records(tiny_export, "train", lenses=["Emotional"])
    emo = lens_index("Emotional")
    assert records and all(c == emo for r in records for _, c in r.captions + r.prompts)
    assert sum(len(r.captions) for r in records) == int((train["lens"] == "Emotional").sum())
    with_emotional = train.loc[train["lens"] == "Emotional", "image_id"].nunique()
    assert len(records) == with_emotional
    if with_emotional < train["image_id"].nunique():
        assert "of lenses ['Emotional']" in caplog.text
    both = load_records(tiny_export, "train", lenses=["Literal", "Emotional"])
    assert {c for r in both for _, c in r.captions} == {lens_index("Literal"), emo}


def test_lens_restricted_batches_hold_only_that_lens(tiny_export, tiny_retriever):
    cfg = load_train_config("tiny", {"data": {"lenses": ["Literal"]}}).data
    records = load_records(tiny_export, "train", lenses=cfg.lenses)
    plan = BatchPlan([len(r.captions) for r in records], min(3, len(records)), 2, seed=0)
    batch = MicroBatchDataset(records, plan, Collator(tiny_retriever[1], cfg), cfg.image_size)[0]
    assert set(batch["txt_lens"].tolist()) == {lens_index("Literal")}
    assert set(batch["img_slot_lens"].flatten().tolist()) <= {lens_index("Literal"), -1}
    with pytest.raises(ValueError, match="unknown lens"):
        load_train_config("tiny", {"data": {"lenses": ["Sarcastic"]}})


def test_data_fraction_is_a_fixed_subset(tiny_export):
    every = load_records(tiny_export, "train")
    half = load_records(tiny_export, "train", fraction=0.5)
    assert len(half) == len(every) // 2
    ids = [r.image_id for r in half]
    assert ids == sorted(ids) and set(ids) < {r.image_id for r in every}
    assert ids == [r.image_id for r in load_records(tiny_export, "train", fraction=0.5)]
    assert len(load_records(tiny_export, "train", fraction=0.01)) == 1


def load_image_from_skimage():
    from PIL import Image
    from skimage import data

    return Image.fromarray(data.astronaut()).resize((32, 32))
