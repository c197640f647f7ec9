"""Seed 004's IRFL table in `lenses evaluate`: zero-shot open_clip and a trained LoRA-CLIP adapter."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.baselines.lora_clip.inference import text_image_scores
from training.baselines.lora_clip.metrics import figurative_metrics
from training.baselines.lora_clip.model import load_lora_clip
from training.baselines.lora_clip.train import train_lora_clip
from training.evaluation.config import EvalConfig
from training.evaluation.external.artemis_irfl import external_benchmarks as _external
from training.evaluation.external.irfl import LORA_CLIP, UNAVAILABLE, ZERO_SHOT, merge_tasks
from training.evaluation.inputs import open_clip_model, open_clip_scores
from training.evaluation.tables.reports import render_markdown
from training.external.irfl import read_irfl


def _eval_cfg(csv, images, adapter_dir=None, arch=None):
    return EvalConfig.model_validate(
        {
            "baselines": {
                "open_clip": {"enabled": True, "model_config_path": arch},
                "lora_clip": {"adapter_dir": adapter_dir},
            },
            "external": {"irfl": [{"csv": str(csv), "images_dir": str(images), "split": "test"}]},
        }
    )


def test_irfl_table_with_lora_clip(tiny_lora_cfg, irfl_folder):
    torch.set_num_threads(1)
    csv, images = irfl_folder
    result = train_lora_clip(tiny_lora_cfg)
    cfg = _eval_cfg(csv, images, str(result.adapter_dir), "eval-tiny-openclip.json")
    bundle = open_clip_model(cfg)
    flat, table = _external(cfg, bundle)
    test = read_irfl(csv, images, split="test")
    assert table["n_rows"] == len(test.phrases) == 2 and table["types"] == ["idiom", "simile"]
    want_zero_shot = figurative_metrics(test, open_clip_scores(bundle, cfg, test.image_paths, test.phrases).T)
    assert table["systems"][ZERO_SHOT] == pytest.approx(want_zero_shot, nan_ok=True)
    assert flat["IRFL irfl (zero-shot open_clip)"]["margin"] == pytest.approx(want_zero_shot["margin"])
    model, preprocess, tokenizer = load_lora_clip(result.adapter_dir)
    want_lora = figurative_metrics(
        test, text_image_scores(model, preprocess, tokenizer, test.image_paths, test.phrases)
    )
    assert table["systems"][LORA_CLIP] == pytest.approx(want_lora, nan_ok=True)
    assert all("unavailable" in table["systems"][name] for name in UNAVAILABLE)
    report = render_markdown({"irfl": table, "external": flat})
    assert "seed 004 Table 3 layout" in report
    lines = [line for line in report.splitlines() if line.startswith(f"| {LORA_CLIP}")]
    assert len(lines) == 1 and f"{want_lora['accuracy']:.1f}" in lines[0]
    assert report.count("| unavailable |") >= len(UNAVAILABLE)


def test_lora_row_unavailable_without_adapter(irfl_folder):
    csv, images = irfl_folder
    cfg = _eval_cfg(csv, images, None, "eval-tiny-openclip.json")
    _, table = _external(cfg, open_clip_model(cfg))
    assert "adapter_dir not set" in table["systems"][LORA_CLIP]["unavailable"]
    assert list(table["systems"])[0] == ZERO_SHOT and list(table["systems"])[-1] == "Human (IRFL)"


def test_merge_tasks_keeps_rows_and_images_apart(irfl_folder):
    csv, images = irfl_folder
    train, test = read_irfl(csv, images, split="train"), read_irfl(csv, images, split="test")
    merged = merge_tasks([train, test])
    assert merged.phrases == train.phrases + test.phrases
    n = len(train.image_paths)
    assert np.array_equal(merged.candidates[-1], test.candidates[-1] + n)
    assert [merged.image_paths[i] for i in merged.candidates[-1]] == [
        test.image_paths[i] for i in test.candidates[-1]
    ]
    sim = np.random.default_rng(0).normal(size=(len(merged.phrases), len(merged.image_paths)))
    pooled = figurative_metrics(merged, sim)
    parts = [
        figurative_metrics(train, sim[: len(train.phrases), :n]),
        figurative_metrics(test, sim[len(train.phrases) :, n:]),
    ]
    rows = [len(train.phrases), len(test.phrases)]
    assert pooled["accuracy"] == pytest.approx(np.average([p["accuracy"] for p in parts], weights=rows))
