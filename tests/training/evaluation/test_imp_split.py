"""IMP difficulty split end to end: tiny random-weight open_clip checkpoints (saved locally, never
downloaded), a calibration table, `lenses imp-split`, and the per-difficulty metrics of `lenses evaluate`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from training.evaluation.config import EvalConfig, ImpCalibrationSection
from training.evaluation.imp.metrics import calibrate_threshold, imp_metrics, vote_difficulty
from training.evaluation.imp.split import calibration_scores, read_calibration, write_imp_split

TINY_ARCH = Path(__file__).resolve().parents[3] / "training" / "configs" / "eval-tiny-openclip.json"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Three tiny open_clip models with different random weights, as local checkpoint files."""
    import open_clip

    open_clip.add_model_config(TINY_ARCH)
    root = tmp_path_factory.mktemp("imp-ckpt")
    paths = []
    for seed in range(3):
        torch.manual_seed(seed)
        model = open_clip.create_model(TINY_ARCH.stem)
        paths.append(root / f"tiny-{seed}.pt")
        torch.save(model.state_dict(), paths[-1])
    return paths


def _calibration(export_dir: str, path: Path, labelled: bool) -> Path:
    """Train-split images with their first caption; labelled tables add a shifted negative per image."""
    images = pd.read_parquet(Path(export_dir) / "images.parquet")
    captions = pd.read_parquet(Path(export_dir) / "captions.parquet")
    images = images[images["split"].astype(str) == "train"].sort_values("image_id")
    first = captions.sort_values("text_id").groupby("image_id", observed=True)["text"].first()
    texts = [first[i] for i in images["image_id"]]
    rows = pd.DataFrame({"image": list(images["path"]), "text": texts})
    if labelled:
        neg = pd.DataFrame({"image": list(images["path"]), "text": texts[1:] + texts[:1], "label": 0})
        rows = pd.concat([rows.assign(label=1), neg], ignore_index=True)
    rows.to_csv(path, index=False)
    return path


def _model(name, ckpt, role="voter", threshold=None):
    return {"name": name, "model_config_path": str(TINY_ARCH), "pretrained": str(ckpt), "role": role,
            "threshold": threshold}  # fmt: skip


def _config(tiny_export, tmp_path, models, calibration=None, **imp) -> EvalConfig:
    section = {"models": models, **imp}
    if calibration is not None:
        section["calibration"] = {"table": str(calibration), "batch_size": 5}
    return EvalConfig.model_validate(
        {"export_dir": str(tiny_export), "split": "train", "out_dir": str(tmp_path / "out"), "imp": section}
    )


@pytest.mark.parametrize(
    ("thresholds", "breaker", "want"),
    [
        ((-1.0, -1.0, -1.0, -1.0), None, "easy"),  # every voter accepts
        ((-1.0, -1.0, 1.1, 1.1), -1.0, "medium"),  # 2-2, the tie-breaker accepts
        ((-1.0, -1.0, 1.1, 1.1), 1.1, "hard"),  # 2-2, the tie-breaker rejects
        ((-1.0, 1.1, 1.1, 1.1), -1.0, "hard"),  # a majority rejects
    ],
)
def test_fixed_thresholds_give_the_known_vote(tiny_export, tmp_path, checkpoints, thresholds, breaker, want):
    models = [_model(f"v{i}", checkpoints[i % 3], threshold=t) for i, t in enumerate(thresholds)]
    if breaker is not None:
        models.append(_model("g", checkpoints[2], "tie_breaker", breaker))
    paths = write_imp_split(_config(tiny_export, tmp_path, models))
    table = pd.read_parquet(paths["difficulty"])
    n_train_captions = len(pd.read_parquet(Path(tiny_export) / "captions.parquet").query("split == 'train'"))
    assert len(table) == n_train_captions and set(table["difficulty"].astype(str)) == {want}
    summary = json.loads(paths["thresholds"].read_text())
    assert summary["counts"][want] == n_train_captions and summary["models"]["v0"]["source"] == "fixed"


def test_calibrated_split_is_consistent_with_its_scores(tiny_export, tmp_path, checkpoints):
    from training.baselines.open_clip import encode_open_clip, load_open_clip

    cal = _calibration(tiny_export, tmp_path / "cal.csv", labelled=True)
    models = [_model(f"m{i}", c) for i, c in enumerate(checkpoints)]
    paths = write_imp_split(_config(tiny_export, tmp_path, models, cal))
    summary = json.loads(paths["thresholds"].read_text())
    table = pd.read_parquet(paths["difficulty"])
    # The threshold is the F1 argmax on the calibration pairs, recomputed here independently.
    img_paths, texts, labels = read_calibration(ImpCalibrationSection(table=str(cal)))
    bundle = load_open_clip("x", pretrained=str(checkpoints[1]), model_config=str(TINY_ARCH))
    img, txt = encode_open_clip(*bundle, img_paths, texts)
    want = calibrate_threshold((img * txt).sum(-1).numpy(), labels)
    got = summary["models"]["m1"]
    assert got["threshold"] == pytest.approx(want.threshold, abs=1e-6) and got["n_negative"] == 12
    # Votes and difficulty follow from the stored scores and thresholds.
    accept = np.stack([table[f"score/m{i}"] >= summary["models"][f"m{i}"]["threshold"] for i in range(3)], 1)
    assert (accept == table[[f"accept/m{i}" for i in range(3)]].to_numpy()).all()
    codes = vote_difficulty(accept)
    assert (pd.Categorical(table["difficulty"]).codes == codes).all()
    assert sum(summary["counts"].values()) == len(table)


def test_in_batch_negatives_without_labels(tiny_export, tmp_path):
    img = torch.nn.functional.normalize(torch.randn(12, 4), dim=-1)
    scores, truth = calibration_scores(img, img, None, batch=5)  # batches of 5, 5, 2
    assert len(scores) == 25 + 25 + 4 and truth.sum() == 12
    assert np.allclose(scores[truth], 1.0, atol=1e-5)  # diagonal: each pair with itself
    cal = _calibration(tiny_export, tmp_path / "cal.csv", labelled=False)
    paths, texts, labels = read_calibration(ImpCalibrationSection(table=str(cal)))
    assert labels is None and len(paths) == len(texts) == 12 and Path(paths[0]).is_file()


def test_config_errors_are_clear():
    with pytest.raises(ValueError, match="at least one voter"):
        EvalConfig.model_validate({"imp": {"models": []}})
    with pytest.raises(ValueError, match="calibration table"):
        EvalConfig.model_validate({"imp": {"models": [{"name": "a"}]}})
    with pytest.raises(ValueError, match="at most one tie_breaker"):
        EvalConfig.model_validate(
            {
                "imp": {
                    "models": [
                        {"name": n, "role": r, "threshold": 0.2}
                        for n, r in (("a", "voter"), ("b", "tie_breaker"), ("c", "tie_breaker"))
                    ]
                }
            }  # fmt: skip
        )


def test_imp_split_command_then_evaluate_adds_per_difficulty_tables(tiny_export, tmp_path, checkpoints):
    import yaml

    from lenses_app.cli import main
    from tests.training.evaluation.test_evaluate import write_fake_encodings
    from training.evaluation.inputs import read_encodings
    from training.evaluation.scoring.similarity import score_lens_slots

    labels = write_fake_encodings(tiny_export, "train", tmp_path / "enc")
    cal = _calibration(tiny_export, tmp_path / "cal.csv", labelled=False)
    models = [_model(f"m{i}", c) for i, c in enumerate(checkpoints)]
    cfg = {"export_dir": str(tiny_export), "split": "train", "encodings_dir": str(tmp_path / "enc"),
           "baselines": {"text_only": False, "similarity_ablations": False}, "routing": False,
           "metrics": {"protocols": ["lens_gallery"]},
           "imp": {"models": models, "calibration": {"table": str(cal), "batch_size": 4}}}  # fmt: skip
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["imp-split", "--config", str(path), "--out", str(tmp_path / "split")]) == 0
    table = tmp_path / "split" / "imp" / "difficulty.parquet"
    cfg["imp"]["difficulty_table"] = str(table)
    path.write_text(yaml.safe_dump(cfg))
    assert main(["evaluate", "--config", str(path), "--out", str(tmp_path / "eval")]) == 0
    data = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    got = data["imp"]["Lenses (lens-masked + global)"]
    enc = read_encodings(tmp_path / "enc", labels)
    sim = score_lens_slots(enc.img_slots, enc.img_slot_lens, enc.img_global, enc.txt_slots, enc.txt_global)
    codes = pd.Categorical(pd.read_parquet(table)["difficulty"]).codes  # same text_id order as the split
    want = imp_metrics(sim, enc.caption_image, codes)
    for key in ("easy/i2t/R@5", "medium/t2i/medR", "hard/AUPRC", "all/AUPRC", "hard/n_pairs"):
        assert (got[key] is None and np.isnan(want[key])) or got[key] == pytest.approx(want[key]), key
    assert data["meta"]["imp_split"]["n_unlabelled"] == 0
    report = (tmp_path / "eval" / "report.md").read_text()
    assert "IMP Table 4" in report and "IMP Table 5" in report
    assert main(["imp-split", "--config", str(tmp_path / "missing.yaml")]) == 2
    # Without a table, `lenses evaluate` computes the split into its own out_dir first.
    del cfg["imp"]["difficulty_table"]
    path.write_text(yaml.safe_dump(cfg))
    assert main(["evaluate", "--config", str(path), "--out", str(tmp_path / "eval2")]) == 0
    again = json.loads((tmp_path / "eval2" / "metrics.json").read_text())
    assert again["meta"]["imp_split"]["table"] == str(tmp_path / "eval2" / "imp" / "difficulty.parquet")
    assert again["imp"]["Lenses (lens-masked + global)"]["hard/n_pairs"] == got["hard/n_pairs"]
