"""The evaluation harnesses of main Table 6 and supp. Tables 6, 7 and 9: their results (for
`run.run_evaluation`) and their tables (for `paper_tables.paper_tables_markdown`), each table
marked "not run" with what to configure when the run did not produce it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from training.baselines.clip_finetune import ROW as CLIP_FINETUNED
from training.baselines.clip_finetune import clip_finetune_system
from training.evaluation.config import EvalConfig
from training.evaluation.systems.backbone_scaling import (
    backbone_scaling_results,
    gallery_protocol,
    main_table6,
    supp_table7,
    table_row,
)
from training.evaluation.systems.generator_swap import generator_swap_results, supp_table6
from training.evaluation.systems.swap import FINE_TUNED, MAIN, SwapModels
from training.evaluation.tables.markdown import table
from training.evaluation.types import SplitLabels


def harness_systems(
    cfg: EvalConfig, labels: SplitLabels, texts: list[str] | None = None
) -> tuple[dict[str, np.ndarray], dict]:
    """Score matrices the harnesses add to the main evaluation (the fine-tuned CLIP of supp. Table 9)
    and their entries for the results' meta. texts: the texts to score (default the captions)."""
    return clip_finetune_system(cfg, labels, texts)


def add_harness_results(
    results: dict[str, Any], cfg: EvalConfig, labels: SplitLabels, source: dict, evaluate: Callable
) -> None:
    """Adds `backbone_scaling` and `generator_swap` when the config lists builds for them."""
    models = SwapModels(cfg, source)  # loads nothing until a swapped split needs it
    if cfg.backbone_scaling:
        results["backbone_scaling"] = backbone_scaling_results(cfg, labels, results, source, evaluate, models)
    if cfg.generator_swap:
        results["generator_swap"] = generator_swap_results(cfg, labels, results, source, evaluate, models)


def harness_tables(results: dict) -> list[str]:
    return [main_table6(results), supp_table6(results), supp_table7(results), supp_table9(results)]


def supp_table9(results: dict) -> str:
    """Supp. Table 9: all-caption R@1/R@5, zero-shot CLIP and the models fine-tuned on Lenses."""
    protocol = gallery_protocol(results)
    systems = results.get("systems", {}).get(protocol, {})
    placed = results.get("open_clip_row") or {}  # the paper row baselines.open_clip fills
    from_open_clip = placed.get("system") if placed.get("row") == "CLIP" else None
    zero_shot = "CLIP" if "CLIP" in systems else from_open_clip
    keys = ["all/i2t/R@1", "all/i2t/R@5", "all/t2i/R@1", "all/t2i/R@5"]
    spec = [
        ("CLIP", zero_shot, "not run: baselines.zero_shot row CLIP or baselines.open_clip.row: CLIP"),
        ("CLIP", CLIP_FINETUNED, "not run: baselines.clip_finetune.enabled is false"),
        (
            "BGE-VL-MLLM",
            FINE_TUNED,
            "not run: baselines.global_only_encodings or global_only_checkpoint not set",
        ),
        ("Lenses - All", MAIN, ""),
    ]
    rows = [["*Zero-shot*", *("" for _ in keys), ""]]
    for i, (label, name, missing) in enumerate(spec):
        if i == 1:
            rows.append(["*Fine-tuned on Lenses dataset*", *("" for _ in keys), ""])
        metrics = systems.get(name) if name else None
        from_clip_baseline = i == 0 and name != "CLIP"
        note = missing if metrics is None else (f"baselines.open_clip: {name}" if from_clip_baseline else "")
        rows.append(table_row(label, metrics, keys, note))
    header = ["Model", "I→T R@1", "I→T R@5", "T→I R@1", "T→I R@5", "Note"]
    return f"## Supp. Table 9, architecture vs. data — R@K (%), `{protocol}`\n\n{table(header, rows)}"
