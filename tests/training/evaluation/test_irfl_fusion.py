"""IRFL rows beyond one CLIP in `lenses evaluate`: BLIP-2 zero-shot (seed 004 Table 1) and seed 004's
weighted ensemble and supervised MLP (its Tables 2-3), with tiny random models built here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from training.baselines.clip_fusion import weighted_ensemble
from training.baselines.hf_zero_shot import hf_zero_shot_scores, load_hf_zero_shot
from training.baselines.lora_clip.metrics import figurative_metrics
from training.baselines.open_clip import encode_open_clip, load_open_clip
from training.evaluation.config import EvalConfig
from training.evaluation.external.artemis_irfl import external_benchmarks
from training.evaluation.external.irfl import LORA_CLIP, ZERO_SHOT
from training.evaluation.external.irfl_fusion import ENSEMBLE, MLP
from training.evaluation.inputs import open_clip_model
from training.evaluation.tables.reports import render_markdown
from training.external.irfl import read_irfl

TINY_ARCH = Path(__file__).resolve().parents[3] / "training" / "configs" / "eval-tiny-openclip.json"


@pytest.fixture(scope="module")
def irfl(tmp_path_factory):
    """The synthetic IRFL CSV with its last two train rows relabelled `valid`: 4 train, 2 valid, 2 test."""
    from training.dryrun.irfl import write_synthetic_irfl

    root = tmp_path_factory.mktemp("irfl-fusion")
    csv, images = write_synthetic_irfl(root)
    df = pd.read_csv(csv)
    df.loc[df.index[4:6], "split"] = "valid"
    df.to_csv(csv, index=False)
    return csv, images


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    import open_clip

    open_clip.add_model_config(TINY_ARCH)
    root = tmp_path_factory.mktemp("fusion-ckpt")
    out = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        torch.save(open_clip.create_model(TINY_ARCH.stem).state_dict(), root / f"m{seed}.pt")
        out.append(
            {"name": f"m{seed}", "model_config_path": str(TINY_ARCH), "pretrained": str(root / f"m{seed}.pt")}
        )
    return out


def _cfg(irfl, members=(), blip2_dir=None) -> EvalConfig:
    csv, images = irfl
    rows = {s: [{"csv": str(csv), "images_dir": str(images), "split": s}] for s in ("train", "valid", "test")}
    zero_shot = [{"row": "BLIP-2", "family": "blip2", "path": str(blip2_dir)}] if blip2_dir else []
    fusion = {"members": list(members), "train": rows["train"], "valid": rows["valid"],
              "mlp": {"hidden": [16, 8], "max_epochs": 5, "patience": 2, "batch_size": 4}}  # fmt: skip
    return EvalConfig.model_validate(
        {"baselines": {"open_clip": {"enabled": True, "model_config_path": str(TINY_ARCH)},
                       "zero_shot": zero_shot, "irfl_fusion": fusion},
         "external": {"irfl": rows["test"]}}
    )  # fmt: skip


def _cosines(member: dict, task) -> np.ndarray:
    bundle = load_open_clip("x", pretrained=member["pretrained"], model_config=member["model_config_path"])
    img, txt = encode_open_clip(*bundle, task.image_paths, task.phrases)
    return (txt @ img.T).numpy()  # [P, I]


def test_blip2_ensemble_and_mlp_rows_on_irfl(irfl, members, tmp_path):
    from training.dryrun.zero_shot import materialize_tiny_blip2

    csv, images = irfl
    test = read_irfl(csv, images, split="test")
    blip2_dir = materialize_tiny_blip2(tmp_path / "blip2", [*pd.read_csv(csv)["phrase"], "a photo"])
    cfg = _cfg(irfl, members, blip2_dir)
    flat, table = external_benchmarks(cfg, open_clip_model(cfg))
    names = list(table["systems"])
    assert names[:4] == [ZERO_SHOT, "BLIP-2 (zero-shot)", ENSEMBLE, MLP] and names[4] == LORA_CLIP
    blip2 = hf_zero_shot_scores(load_hf_zero_shot("blip2", str(blip2_dir)), test.image_paths, test.phrases).T
    assert table["systems"]["BLIP-2 (zero-shot)"] == pytest.approx(
        figurative_metrics(test, blip2), nan_ok=True
    )

    fusion = table["fusion"]
    assert fusion["members"] == ["m0", "m1"] and len(fusion["grid"]) == 11  # 0.0, 0.1, ..., 1.0 for m0
    best = max(g["valid_accuracy"] for g in fusion["grid"])
    assert fusion["valid_accuracy"] == best
    assert next(g["weights"] for g in fusion["grid"] if g["valid_accuracy"] == best) == fusion["weights"]
    sims = np.stack([_cosines(m, test) for m in members])
    want = figurative_metrics(test, weighted_ensemble(sims, fusion["weights"]))
    assert table["systems"][ENSEMBLE] == pytest.approx(want, nan_ok=True)

    assert fusion["mlp"]["n_train_rows"] == 4 and 1 <= fusion["mlp"]["epochs_run"] <= 5
    assert np.isfinite(table["systems"][MLP]["accuracy"])
    report = render_markdown({"irfl": table, "external": flat})
    assert sum(line.startswith(f"| {name} |") for line in report.splitlines() for name in names[:4]) == 4
    w = " | ".join(f"{x:.1f}" for x in fusion["weights"])
    assert "## Seed 004 Table 2" in report and f"| {w} | {best:.1f} |" in report


def test_fusion_rows_say_what_to_configure(irfl):
    cfg = _cfg(irfl)
    _, table = external_benchmarks(cfg, open_clip_model(cfg))
    assert "members" in table["systems"][ENSEMBLE]["unavailable"]
    assert "members" in table["systems"][MLP]["unavailable"]
    assert table["fusion"] == {}
    report = render_markdown({"irfl": table})
    assert f"| {ENSEMBLE} | unavailable" in report and "Seed 004 Table 2" not in report


def test_fixed_weights_need_one_per_member(irfl, members):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="2 members"):
        EvalConfig.model_validate({"baselines": {"irfl_fusion": {"members": members, "weights": [1.0]}}})
