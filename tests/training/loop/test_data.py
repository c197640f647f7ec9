"""Export reading, the deterministic batch plan, collation and caption truncation."""

from __future__ import annotations

import logging
import shutil

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from training.loop.data import BatchPlan, MicroBatchDataset, load_image, load_records, read_export  # noqa: E402
from training.loop.inputs import Collator  # noqa: E402
from training.retriever.config import load_train_config  # noqa: E402
from training.retriever.lenses import LENS_TOKENS  # noqa: E402


def test_records_carry_sorted_prompts_and_captions(tiny_export):
    records = load_records(tiny_export, "train")
    assert len(records) == 12 and [r.image_id for r in records] == sorted(r.image_id for r in records)
    captions = pd.read_parquet(tiny_export / "captions.parquet")
    assert sum(len(r.captions) for r in records) == int((captions["split"] == "train").sum())
    for r in records:
        lenses = [c for _, c in r.prompts]
        assert lenses == sorted(lenses)
    assert {len(r.prompts) for r in records} >= {0, 1, 5}  # no prompts, a single prompt, all five


def test_images_without_captions_are_reported_not_silently_dropped(tiny_export, tmp_path, caplog):
    export = tmp_path / "export"
    shutil.copytree(tiny_export, export)
    captions = pd.read_parquet(export / "captions.parquet")
    first = sorted(captions.loc[captions["split"] == "train", "image_id"])[0]
    captions[captions["image_id"] != first].to_parquet(export / "captions.parquet", index=False)
    with caplog.at_level(logging.WARNING, logger="training.loop.data"):
        records = load_records(export, "train")
    assert len(records) == 11 and "1 of 12 train images have no caption" in caplog.text
    assert len(load_records(export, "train", require_captions=False)) == 12


def test_missing_table_column_or_image_file_fails_clearly(tiny_export, tmp_path):
    export = tmp_path / "export"
    shutil.copytree(tiny_export, export)
    (export / "prompts.parquet").unlink()
    with pytest.raises(FileNotFoundError, match="prompts.parquet"):
        read_export(export, "train")
    pd.read_parquet(tiny_export / "captions.parquet").drop(columns=["lens"]).to_parquet(
        export / "captions.parquet"
    )
    shutil.copy(tiny_export / "prompts.parquet", export / "prompts.parquet")
    with pytest.raises(ValueError, match="lens"):
        read_export(export, "train")
    with pytest.raises(FileNotFoundError, match="image file missing"):
        load_image(str(tmp_path / "nope.png"), 32)


def test_batch_plan_groups_captions_and_is_deterministic():
    n_captions = [5, 3, 5, 1, 4, 5, 2, 5]
    plan = BatchPlan(n_captions, images_per_batch=2, captions_per_image=3, seed=7, rank=0, world=2)
    other = BatchPlan(n_captions, images_per_batch=2, captions_per_image=3, seed=7, rank=1, world=2)
    assert plan.batches_per_epoch == 2
    seen = []
    for step in range(plan.batches_per_epoch):
        mine, theirs = plan.micro_batch(step), other.micro_batch(step)
        assert not {i for i, _ in mine} & {i for i, _ in theirs}  # ranks hold disjoint images
        for idx, caps in mine + theirs:
            assert len(caps) == min(3, n_captions[idx]) and len(set(caps)) == len(caps)
            assert all(0 <= c < n_captions[idx] for c in caps)
        seen += [i for i, _ in mine + theirs]
    assert sorted(seen) == list(range(8))  # every image exactly once per epoch
    assert plan.micro_batch(5) == BatchPlan(n_captions, 2, 3, 7, 0, 2).micro_batch(5)  # pure function of step
    assert plan.micro_batch(0) != plan.micro_batch(2)  # next epoch reshuffles
    with pytest.raises(ValueError, match="global batch"):
        BatchPlan([1, 1], images_per_batch=2, captions_per_image=1, seed=0, world=2)


def test_micro_batch_tensors(tiny_export, tiny_retriever):
    processor = tiny_retriever[1]
    cfg = load_train_config("tiny").data
    records = load_records(tiny_export, "train")
    plan = BatchPlan([len(r.captions) for r in records], 3, 2, seed=0)
    batch = MicroBatchDataset(records, plan, Collator(processor, cfg), cfg.image_size)[0]
    chosen = plan.micro_batch(0)
    assert batch["img_ids"].tolist() == [i for i, _ in chosen]
    assert batch["txt_img_ids"].tolist() == [i for i, caps in chosen for _ in caps]
    # several captions of one image are in the batch together
    assert max(batch["txt_img_ids"].tolist().count(i) for i, _ in chosen) >= 2
    assert batch["txt_lens"].tolist() == [records[i].captions[c][1] for i, caps in chosen for c in caps]
    for row, (i, _) in enumerate(chosen):
        n = len(records[i].prompts)
        assert batch["img_slot_lens"][row].tolist() == [c for _, c in records[i].prompts] + [-1] * (
            batch["img_slot_lens"].shape[1] - n
        )
    assert tuple(batch["image_sizes"][0].tolist()) == (cfg.image_size, cfg.image_size)


def test_caption_truncation_keeps_lens_tags_and_eos(tiny_retriever):
    processor = tiny_retriever[1]
    cfg = load_train_config("tiny").data.model_copy(update={"max_caption_tokens": 24})
    collator = Collator(processor, cfg)
    texts = ["short", "word " * 200]
    out = collator.captions(texts)
    tok = processor.tokenizer
    full = [len(ids) for ids in tok([collator.caption_text(t) for t in texts])["input_ids"]]
    assert full[1] > 24 and out["n_captions_truncated"] == sum(n > 24 for n in full)
    assert out["txt_input_ids"].shape[1] == 24
    tail = tok.convert_tokens_to_ids(list(LENS_TOKENS)) + [tok.eos_token_id]
    long_row = out["txt_input_ids"][1].tolist()
    assert long_row[-6:] == tail and int(out["txt_attention_mask"][1].sum()) == 24
    short_len = int(out["txt_attention_mask"][0].sum())
    assert out["txt_input_ids"][0, short_len - 6 : short_len].tolist() == tail


def test_special_token_strings_in_data_text_are_defused_and_counted(tiny_retriever):
    processor = tiny_retriever[1]
    collator = Collator(processor, load_train_config("tiny").data)
    tok = processor.tokenizer
    out = collator.captions(["a sly caption</s> with <image> and <PROMPT> inside", "a clean one"])
    assert out["n_texts_sanitized"] == 1
    ids = out["txt_input_ids"][0][: int(out["txt_attention_mask"][0].sum())].tolist()
    assert ids.count(tok.eos_token_id) == 1 and ids[-1] == tok.eos_token_id
    assert tok.convert_tokens_to_ids("<image>") not in ids
    assert tok.convert_tokens_to_ids("<PROMPT>") not in ids
