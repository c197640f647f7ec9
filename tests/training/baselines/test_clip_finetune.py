"""Supp. Table 9's CLIP fine-tuned on Lenses: a tiny random-weight open_clip trained on the synthetic export."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("open_clip")

from training.baselines.clip_finetune import clip_finetune_scores, train_clip_finetune  # noqa: E402
from training.evaluation.config import ClipFinetuneSection  # noqa: E402
from training.evaluation.inputs import split_labels  # noqa: E402

TINY_JSON = Path(__file__).resolve().parents[3] / "training" / "configs" / "eval-tiny-openclip.json"


def _section(**kw) -> ClipFinetuneSection:
    # A large lr so 12 tiny steps move the loss; the paper's recipe is the default (5e-5).
    base = {"enabled": True, "model_config_path": str(TINY_JSON), "steps": 12, "images_per_batch": 6,
            "lr": 2e-3, "min_lr": 1e-4, "batch_size": 8}  # fmt: skip
    return ClipFinetuneSection(**{**base, **kw})


@pytest.mark.slow
def test_fine_tuning_lowers_the_loss_and_saved_weights_reproduce_the_scores(tiny_export, tmp_path):
    section = _section()
    labels = split_labels(str(tiny_export), "test")
    scores, info = clip_finetune_scores(
        section, str(tiny_export), tmp_path / "ft", labels.image_paths, labels.captions
    )
    history = json.loads((tmp_path / "ft" / "history.json").read_text())
    losses = history["losses"]
    assert len(losses) == 12 and info["trained_here"] and history["n_images"] == 12
    # the first pass (2 batches of 6 images) against the last pass: training moved the loss down
    assert np.mean(losses[-2:]) < np.mean(losses[:2])
    assert scores.shape == (len(labels.image_paths), len(labels.captions))
    # reading the saved weights back gives the same scores without training
    again, info2 = clip_finetune_scores(
        _section(checkpoint=info["checkpoint"]), str(tiny_export), tmp_path / "unused",
        labels.image_paths, labels.captions,
    )  # fmt: skip
    assert not info2["trained_here"] and not (tmp_path / "unused").exists()
    np.testing.assert_allclose(again, scores, rtol=1e-5, atol=1e-6)
    # and they differ from the untrained base model's (the weights were fine-tuned, not ignored)
    from training.baselines.clip_finetune import load_base
    from training.baselines.global_only import global_scores
    from training.baselines.open_clip import encode_open_clip

    base = global_scores(*encode_open_clip(*load_base(section), labels.image_paths, labels.captions))
    assert not np.allclose(base, scores, atol=1e-4)


def test_bad_inputs(tiny_export, tmp_path):
    with pytest.raises(FileNotFoundError, match="fine-tuned CLIP weights not found"):
        clip_finetune_scores(
            _section(checkpoint=str(tmp_path / "nope.pt")), str(tiny_export), tmp_path, [], []
        )
    empty = _without_train_captions(tiny_export, tmp_path / "empty")
    with pytest.raises(ValueError, match="no usable images in split 'train'"):
        train_clip_finetune(_section(steps=1), str(empty), tmp_path / "out")


def _without_train_captions(src: Path, out: Path) -> Path:
    import pandas as pd

    out.mkdir()
    for name in ("images", "captions", "prompts"):
        df = pd.read_parquet(src / f"{name}.parquet")
        if name == "captions":
            df = df[df["split"].astype(str) != "train"]
        df.to_parquet(out / f"{name}.parquet", index=False)
    return out
