"""Backbone scaling, generator swap and CLIP fine-tuned on Lenses through `lenses evaluate`.

The lens model and the global-only baseline are trained once (2 steps of the training loop) on
the synthetic export, as the papers train once on the InternVL3.5-38B build. The "other
generators'" exports are the same images with texts the simulator wrote as those models
(training/dryrun/generator_variant.py), standing in for second builds, which take ~1 min each.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from training.evaluation.types import MAIN_SYSTEM

from .test_paper_tables import _cells, _line, _train

TINY_JSON = Path(__file__).resolve().parents[3] / "training" / "configs" / "eval-tiny-openclip.json"
FINE_TUNED = "Global-only fine-tuned"


# The synthetic test split has 2 images: R@K too coarse to tell the generators' rows apart.
SPLIT = "train"
TRAINED_ON = "InternVL3.5-38B"  # the build the lens model was trained on: its rows are main Table 2's


def _section(report: str, title: str) -> str:
    return report.split(f"## {title}")[1].split("\n## ")[0]


def _harness_results() -> dict:
    """Main evaluation of a random split with a fine-tuned baseline, and both harnesses listing the
    build it was trained on (the main evaluation's numbers) after another build (other numbers)."""
    from training.baselines.global_only import global_scores
    from training.evaluation.config import EvalConfig
    from training.evaluation.evaluate import evaluate_encoded
    from training.evaluation.systems.swap import _per_system

    from .test_evaluate import random_split

    def run(seed: int) -> dict:
        enc = random_split(seed=seed)
        return evaluate_encoded(
            enc, EvalConfig(), {FINE_TUNED: global_scores(enc.img_global, enc.txt_global)}
        )

    results, other = run(0), run(7)
    rows = {"Other": _per_system(other["systems"]), TRAINED_ON: _per_system(results["systems"])}
    harness = {"order": list(rows), "rows": rows, "coverage": {}, "unavailable": {}}
    results["backbone_scaling"] = {**harness, "part": "prompts"}
    results["generator_swap"] = {**harness, "part": "captions"}
    return results


def test_harness_rows_of_the_trained_build_repeat_main_table2():
    """Supp. Tables 6-7 and main Table 6 read the lens model as Table 2 does (`lens_slot`): the
    paper's InternVL3.5-38B rows repeat Table 2's Lenses and fine-tuned BGE-VL-MLLM rows."""
    from training.evaluation.tables.paper_tables import paper_tables_markdown

    results = _harness_results()
    report = "\n\n".join(paper_tables_markdown(results))
    slot, gallery = (results["systems"][p][MAIN_SYSTEM] for p in ("lens_slot", "lens_gallery"))
    per_lens = [f"{k}/{d}/R@{r}" for k in ("literal", "emotional") for d in ("i2t", "t2i") for r in (1, 5)]
    assert any(slot[k] != gallery[k] for k in per_lens)  # the protocols differ on this split

    table2 = _section(report, "Main Table 2")
    t6 = _section(report, "Supp. Table 6").split(f"*{TRAINED_ON} (captions)*")[1]
    for label in ("| Lenses |", "| BGE-VL-MLLM |"):
        want = _cells([x for x in table2.splitlines() if x.startswith(label)][-1])[1:-1]  # fine-tuned row
        assert _cells(_line(t6, label))[1:-1] == want, label
    t7 = _cells(_line(_section(report, "Supp. Table 7"), f"| {TRAINED_ON} |"))
    cols = [f"{k}/{d}/R@{r}" for k in ("literal", "figurative", "abstract", "background", "emotional")
            for d in ("i2t", "t2i") for r in (1, 5)]  # fmt: skip
    assert t7[1:-1] == [f"{slot[c]:.1f}" for c in cols]
    t6_main = _cells(_line(_section(report, "Main Table 6"), f"| {TRAINED_ON} |"))
    assert t6_main[1:-1] == [f"{slot[f'macro/{d}/R@{k}']:.2f}" for d in ("i2t", "t2i") for k in (1, 5, 10)]
    assert "`lens_slot`" in report.split("## Main Table 6")[1].splitlines()[0]


def _n_split(export: Path, table: str) -> int:
    df = pd.read_parquet(export / f"{table}.parquet")
    return int((df["split"].astype(str) == SPLIT).sum())


def _eval_config(tiny_export, main_ckpt, global_ckpt, v4b, qwen) -> dict:
    return {
        "export_dir": str(tiny_export),
        "split": SPLIT,
        "checkpoint": main_ckpt,
        "baselines": {
            "global_only_checkpoint": global_ckpt,
            "open_clip": {"enabled": True, "model_config_path": str(TINY_JSON), "row": "CLIP"},
            "clip_finetune": {
                "enabled": True,
                "model_config_path": str(TINY_JSON),
                "steps": 3,
                "images_per_batch": 6,
                "lr": 2e-3,
            },
        },  # fmt: skip
        "backbone_scaling": [{"row": "InternVL3.5-4B", "export_dir": str(v4b)}, {"row": "InternVL3.5-38B"}],
        "generator_swap": [{"row": "Qwen3VL-30B-A3B", "export_dir": str(qwen)}, {"row": "InternVL3.5-38B"}],
    }


@pytest.mark.slow
def test_harness_tables_through_lenses_evaluate(tiny_config, tiny_export, tmp_path):
    import yaml

    from lenses_app.cli import main
    from training.dryrun.generator_variant import write_generator_variant

    main_ckpt = _train(tiny_config, tmp_path / "main")
    glob_cfg = tiny_config.model_copy(deep=True)
    glob_cfg.loss.mode = "global"
    global_ckpt = _train(glob_cfg, tmp_path / "global")
    v4b = write_generator_variant(tiny_export, tmp_path / "v4b", "OpenGVLab/InternVL3_5-4B", ["prompts"])
    qwen = write_generator_variant(
        tiny_export, tmp_path / "qwen", "Qwen/Qwen3-VL-30B-A3B-Instruct", ["captions"]
    )
    (tmp_path / "eval.yaml").write_text(
        yaml.safe_dump(_eval_config(tiny_export, main_ckpt, global_ckpt, v4b, qwen))
    )
    out = tmp_path / "eval-out"
    assert main(["evaluate", "--config", str(tmp_path / "eval.yaml"), "--out", str(out)]) == 0
    data = json.loads((out / "metrics.json").read_text())
    report = (out / "report.md").read_text()
    print(report.split("# Every metric")[0].split("## Main Table 6")[1])  # the tables, for the record

    # Backbone scaling: the 38B row is the main evaluation, on main Table 2's protocol (`lens_slot`);
    # the 4B row uses all of the 4B prompts.
    scaling = data["backbone_scaling"]
    assert scaling["rows"][TRAINED_ON][MAIN_SYSTEM]["lens_slot"] == data["systems"]["lens_slot"][MAIN_SYSTEM]
    table2_lenses = _cells(_line(_section(report, "Main Table 2"), "| Lenses |"))
    t6_38b = _section(report, "Supp. Table 6").split(f"*{TRAINED_ON} (captions)*")[1]
    assert _cells(_line(t6_38b, "| Lenses |"))[1:-1] == table2_lenses[1:-1]
    cov = scaling["coverage"]["InternVL3.5-4B"]
    assert (
        cov["n_swapped_texts"] == _n_split(v4b, "prompts") and cov["n_base_images_without_swapped_texts"] == 0
    )
    four_b = scaling["rows"]["InternVL3.5-4B"][MAIN_SYSTEM]["lens_slot"]
    assert four_b != data["systems"]["lens_slot"][MAIN_SYSTEM]  # other prompts, other numbers
    row = _cells(_line(report.split("## Main Table 6")[1], "| InternVL3.5-4B |"))
    assert row[1:7] == [f"{four_b[f'macro/{d}/R@{k}']:.2f}" for d in ("i2t", "t2i") for k in (1, 5, 10)]
    bge = _cells(_line(report.split("## Supp. Table 7")[1], "| BGE-VL-MLLM (fine-tuned, no prompts) |"))
    assert bge[1] == f"{data['systems']['lens_gallery'][FINE_TUNED]['literal/i2t/R@1']:.1f}"

    # Generator swap: both frozen models on the Qwen captions; the global row checked independently.
    swap = data["generator_swap"]
    assert swap["coverage"]["Qwen3VL-30B-A3B"]["n_swapped_texts"] == _n_split(qwen, "captions")
    assert swap["unavailable"] == {}
    _assert_global_row_is_the_global_model_on_swapped_captions(swap, global_ckpt, tiny_export, qwen)
    block = report.split("## Supp. Table 6")[1].split("*Qwen3VL-30B-A3B (captions)*")[1]
    lens_row = _cells(_line(block, "| Lenses |"))
    qwen_main = swap["rows"]["Qwen3VL-30B-A3B"][MAIN_SYSTEM]["lens_slot"]
    assert lens_row[1] == f"{qwen_main['literal/i2t/R@1']:.2f}"
    assert lens_row[-3] == f"{qwen_main['all/t2i/R@1']:.2f}"
    assert qwen_main != swap["rows"][TRAINED_ON][MAIN_SYSTEM]["lens_slot"]

    # Supp. Table 9: CLIP fine-tuned here (3 steps), zero-shot tiny open_clip, the two fine-tuned BGE rows.
    assert data["meta"]["clip_finetune"]["trained_here"] and data["meta"]["clip_finetune"]["steps"] == 3
    t9 = report.split("## Supp. Table 9")[1]
    ft_clip = data["systems"]["lens_gallery"]["CLIP (fine-tuned on Lenses)"]
    assert [line for line in t9.splitlines() if line.startswith("| CLIP |")][1].startswith(
        f"| CLIP | {ft_clip['all/i2t/R@1']:.2f} |"
    )
    assert "not run" not in t9


def _assert_global_row_is_the_global_model_on_swapped_captions(swap, global_ckpt, base, qwen) -> None:
    from training.evaluation.inputs import split_labels
    from training.evaluation.metrics.retrieval import retrieval_metrics
    from training.evaluation.systems.paper import fine_tuned_scores

    labels, other = split_labels(str(base), SPLIT), split_labels(str(qwen), SPLIT)
    assert set(other.image_ids) == set(labels.image_ids)  # same images, so every Qwen caption is used
    sim = fine_tuned_scores(global_ckpt, other)  # scored on the Qwen export's own labels: same pairs
    expected = retrieval_metrics(sim, other.caption_image, other.caption_lens, protocol="lens_gallery")
    got = swap["rows"]["Qwen3VL-30B-A3B"][FINE_TUNED]["lens_gallery"]
    for key in ("all/i2t/R@1", "all/t2i/R@1", "literal/t2i/R@5", "RSUM"):
        assert got[key] == pytest.approx(expected[key]), key
