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
         "imp": {"models": [*voters, {**voters[0], "name": "g", "role": "tie_breaker"}], "negatives": "shifted"}}
    )  # fmt: skip
    run_evaluation(cfg)
    data = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert data["imp_table2"]["models"] == ["CLIP", "FLAVA"]  # an IMP transformers row like the CLIP rows
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
    add_imp_aggregates(results, [], str(path), ["a"])
    assert "no score/<model> columns" in results["imp_table11"]["unavailable"]
    assert "unavailable: " in "\n".join(imp_aggregates_markdown(results))
