"""IMP Table 2 (mean AUPRC with error bars over models) and Table 11 (CLIPscore per difficulty)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from training.evaluation.imp.aggregates import (
    auprc_over_models,
    clip_score,
    clipscore_by_difficulty,
    clipscore_table,
    imp_aggregates_markdown,
)


def test_clip_score_clips_negative_cosines_and_scales():
    np.testing.assert_allclose(clip_score([-0.2, 0.0, 0.3]), [0.0, 0.0, 0.3])
    np.testing.assert_allclose(clip_score([-0.2, 0.3], weight=2.5), [0.0, 0.75])  # Hessel et al.'s w


def test_clipscore_by_difficulty_is_mean_and_std_per_group():
    cos = [0.3, 0.26, 0.2, 0.24, -0.1, 0.9]
    diff = ["easy", "easy", "medium", "hard", "hard", "unlabelled"]
    got = clipscore_by_difficulty(cos, diff)
    assert got["easy"] == pytest.approx({"mean": 0.28, "std": 0.02, "n": 2})
    assert got["medium"] == pytest.approx({"mean": 0.2, "std": 0.0, "n": 1})
    assert got["hard"] == pytest.approx({"mean": 0.12, "std": 0.12, "n": 2})  # -0.1 counts as 0
    full = np.array([0.3, 0.26, 0.2, 0.24, 0.0])  # the unlabelled pair is left out of Full IMP
    assert got["full"] == pytest.approx({"mean": full.mean(), "std": full.std(), "n": 5})
    with pytest.raises(ValueError, match="difficulty labels"):
        clipscore_by_difficulty(cos, diff[:-1])


def test_clipscore_table_has_one_column_per_voter_over_the_split():
    table = pd.DataFrame(
        {
            "text_id": ["a", "b", "c", "d"],
            "difficulty": ["easy", "hard", "easy", "hard"],
            "score/ViT-B-32": [0.3, 0.2, 0.1, 0.9],
            "score/RN50": [0.5, 0.1, 0.5, 0.1],
            "votes": [2, 0, 2, 0],
        }
    )
    got = clipscore_table(table, caption_ids=["a", "b"])  # c, d are outside the evaluated split
    assert sorted(got) == ["RN50", "ViT-B-32"]
    assert got["ViT-B-32"]["easy"]["mean"] == pytest.approx(0.3)
    assert got["ViT-B-32"]["hard"]["mean"] == pytest.approx(0.2)
    assert got["RN50"]["full"]["n"] == 2
    with pytest.raises(ValueError, match="score/<model>"):
        clipscore_table(table.drop(columns=["score/ViT-B-32", "score/RN50"]))


def test_table2_is_the_mean_and_sample_std_over_models():
    imp = {
        "CLIP-B/32": {"easy/AUPRC": 0.9, "hard/AUPRC": 0.6, "all/AUPRC": 0.8},
        "CLIP-L/14": {"easy/AUPRC": 1.0, "hard/AUPRC": 0.8, "all/AUPRC": 0.9},
        "Lenses (lens model)": {"easy/AUPRC": 0.1, "hard/AUPRC": 0.1},  # not a zero-shot model
    }
    got = auprc_over_models(imp, ["CLIP-B/32", "CLIP-L/14", "not run"])
    assert got["models"] == ["CLIP-B/32", "CLIP-L/14"]
    assert got["easy"] == pytest.approx({"mean": 0.95, "std": np.std([0.9, 1.0], ddof=1), "n": 2})
    assert got["hard"]["std"] == pytest.approx(np.sqrt(0.02))
    assert got["medium"]["n"] == 0 and np.isnan(got["medium"]["mean"])  # no medium AUPRC reported
    md = "\n".join(imp_aggregates_markdown({"imp_table2": got}))
    assert "| Easy | 0.950 ± 0.071 | 2 |" in md and "| Medium | - | 0 |" in md


def test_run_evaluation_reports_tables_2_and_11(tiny_export, tmp_path):
    from tests.training.evaluation.test_evaluate import write_fake_encodings
    from training.evaluation.config import EvalConfig
    from training.evaluation.run import run_evaluation

    write_fake_encodings(tiny_export, "valid", tmp_path / "enc")
    oc_json = str(Path(__file__).resolve().parents[3] / "training" / "configs" / "eval-tiny-openclip.json")
    voters = [{"name": f"v{t}", "model_config_path": oc_json, "threshold": t} for t in (-1.0, 1.1)]
    from training.dryrun.dual_encoders import materialize_tiny_dual_encoder
    from training.evaluation.inputs import split_labels

    flava = materialize_tiny_dual_encoder(
        "flava", tmp_path / "flava", split_labels(str(tiny_export), "valid").captions
    )
    zero_shot = [{"row": "CLIP", "family": "open_clip", "model_config_path": oc_json},
                 {"row": "FLAVA", "family": "flava", "path": str(flava)}]  # fmt: skip
    cfg = EvalConfig.model_validate(
        {"export_dir": str(tiny_export), "split": "valid", "encodings_dir": str(tmp_path / "enc"),
         "out_dir": str(tmp_path / "o"), "baselines": {"text_only": False, "zero_shot": zero_shot},
         "imp": {"models": [*voters, {**voters[0], "name": "g", "role": "tie_breaker"}], "negatives": "shifted",
                 "table2_models": "zero_shot"}}
    )  # fmt: skip
    run_evaluation(cfg)
    data = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert data["imp_table2"]["models"] == ["CLIP", "FLAVA"]  # an IMP transformers row like the CLIP rows
    assert data["imp_table2"]["source"] == "the zero-shot models (baselines.zero_shot)"
    both = [data["imp"][m]["medium/AUPRC"] for m in ("CLIP", "FLAVA")]
    assert data["imp_table2"]["medium"]["mean"] == pytest.approx(np.mean(both))
    table = pd.read_parquet(tmp_path / "o" / "imp" / "difficulty.parquet")
    assert sorted(data["imp_table11"]) == ["g", "v-1.0", "v1.1"]
    cos = np.clip(table["score/v1.1"].to_numpy(), 0, None)
    assert data["imp_table11"]["v1.1"]["full"]["mean"] == pytest.approx(cos.mean(), rel=1e-5)
    report = (tmp_path / "o" / "report.md").read_text()
    assert "## IMP Table 2" in report and "## IMP Table 11" in report
    imp_tables = report.split("(IMP Table 4)", 1)[1]
    assert imp_tables.count("| FLAVA |") == 2  # IMP Tables 4 and 5


def test_a_difficulty_table_without_cosines_leaves_table_11_unavailable(tmp_path):
    from training.evaluation.imp.aggregates import add_imp_aggregates

    path = tmp_path / "difficulty.parquet"
    pd.DataFrame({"text_id": ["a"], "difficulty": ["easy"]}).to_parquet(path)
    results: dict = {}
    add_imp_aggregates(results, None, str(path), ["a"])
    assert "no score/<model> columns" in results["imp_table11"]["unavailable"]
    assert "unavailable: " in "\n".join(imp_aggregates_markdown(results))


def _tiny_clip(path: Path, seed: int) -> tuple[str, str]:
    """(architecture JSON, weights file) of a tiny random open_clip, so that each load is the same."""
    import torch

    from training.baselines.open_clip import load_open_clip

    arch = str(Path(__file__).resolve().parents[3] / "training" / "configs" / "eval-tiny-openclip.json")
    torch.manual_seed(seed)
    torch.save(load_open_clip("tiny", model_config=arch)[0].state_dict(), path)
    return arch, str(path)


def test_table2_defaults_to_the_imp_split_models(tiny_export, tmp_path):
    """IMP Table 2 averages the split's voters and tie-breaker (not the run's zero-shot rows); each
    model's AUPRC is the test's own: its cosine of every caption with its image (positives) against
    the shifted negatives, the image with the first caption of the next captioned image."""
    from tests.training.evaluation.test_evaluate import write_fake_encodings
    from training.baselines.open_clip import encode_open_clip, load_open_clip
    from training.evaluation.config import EvalConfig
    from training.evaluation.imp.metrics import DIFFICULTIES, auprc
    from training.evaluation.inputs import split_labels
    from training.evaluation.run import run_evaluation

    from ..baselines.test_imagebind import tiny_vit_h14

    labels = write_fake_encodings(tiny_export, "train", tmp_path / "enc")
    weights = [_tiny_clip(tmp_path / f"m{i}.pt", i) for i in range(3)]
    models = [{"name": f"m{i}", "model_config_path": a, "pretrained": w, "threshold": t}
              for i, ((a, w), t) in enumerate(zip(weights, (-1.0, 0.0, 1.1), strict=True))]  # fmt: skip
    models[2]["role"] = "tie_breaker"
    ib_arch, ib_weights = tiny_vit_h14(tmp_path)  # ImageBind = OpenCLIP ViT-H-14, a row of IMP Tables 3-5
    cfg = EvalConfig.model_validate(
        {"export_dir": str(tiny_export), "split": "train", "encodings_dir": str(tmp_path / "enc"),
         "out_dir": str(tmp_path / "o"), "routing": False, "metrics": {"protocols": ["lens_gallery"]},
         "baselines": {"text_only": False, "similarity_ablations": False,
                       "zero_shot": [{"row": "CLIP", "family": "open_clip", "model_config_path": weights[0][0]},
                                     {"row": "ImageBind", "family": "imagebind", "model_config_path": ib_arch,
                                      "path": ib_weights}]},
         "imp": {"models": models, "negatives": "shifted"}}
    )  # fmt: skip
    run_evaluation(cfg)
    data = json.loads((tmp_path / "o" / "metrics.json").read_text())
    t2 = data["imp_table2"]
    assert t2["models"] == ["m0", "m1", "m2"] and t2["source"] == "the IMP split's models (imp.models)"
    labels = split_labels(str(tiny_export), "train")
    diff = pd.read_parquet(tmp_path / "o" / "imp" / "difficulty.parquet").set_index("text_id")["difficulty"]
    diff = diff.loc[labels.caption_ids].astype(str).to_numpy()
    ci = np.asarray(labels.caption_image)
    images = sorted(set(ci.tolist()))
    first = {i: int(np.flatnonzero(ci == i)[0]) for i in images}
    shifted = [first[images[(k + 1) % len(images)]] for k in range(len(images))]
    want: dict[str, list[float]] = {g: [] for g in (*DIFFICULTIES, "all")}
    for (arch, w), name in zip(weights, ("m0", "m1", "m2"), strict=True):
        img, txt = encode_open_clip(*load_open_clip("tiny", model_config=arch, pretrained=w),
                                    labels.image_paths, labels.captions)  # fmt: skip
        sim = (img @ txt.T).numpy()
        pos, neg = sim[ci, np.arange(len(ci))], sim[images, shifted]
        assert t2["per_model"][name]["n_negatives_shifted"] == len(images)
        for g in want:
            mine = diff != "" if g == "all" else diff == g
            if not mine.any():
                continue
            got = auprc(np.r_[pos[mine], neg], np.r_[np.ones(mine.sum()), np.zeros(len(neg))])
            assert t2["per_model"][name][f"{g}/AUPRC"] == pytest.approx(got, abs=1e-6), (name, g)
            want[g].append(got)
    for g, values in want.items():
        if values:
            assert t2[g]["mean"] == pytest.approx(np.mean(values), abs=1e-6)
            assert t2[g]["n"] == 3
    report = (tmp_path / "o" / "report.md").read_text()
    assert "ImageBind" in data["imp"] and "ImageBind" not in t2["models"]  # a zero-shot row, not an IMP voter
    assert report.split("(IMP Table 5)", 1)[1].split("\n## ")[0].count("| ImageBind |") == 1
    assert (
        "## IMP Table 2: mean AUPRC ± sample std over the IMP split's models (imp.models) (m0, m1, m2)"
        in report
    )


def test_table2_over_the_split_is_unavailable_without_its_models(tmp_path):
    from training.evaluation.config import EvalConfig
    from training.evaluation.imp.split_models import imp_table2

    cfg = EvalConfig.model_validate({"imp": {"difficulty_table": str(tmp_path / "d.parquet")}})
    got = imp_table2(cfg, {}, None, np.zeros(0), None)
    assert "imp.models is empty" in got["unavailable"]
    assert "unavailable: imp.table2_models is split" in "\n".join(
        imp_aggregates_markdown({"imp_table2": got})
    )
