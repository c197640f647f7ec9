"""Generator swap (supp. Table 6): the frozen models on test captions written by other generators.

Supp. Sec. 5: the lens model and the fine-tuned global-only BGE-VL-MLLM are trained once on the
InternVL3.5-38B build; at test time the InternVL3.5-38B image-side prompts stay and only the
captions (queries and candidates) come from another captioning model (Qwen3VL-30B-A3B, Grok 4.1
Fast). Each generator is a build of the same pipeline with `models.generator.model` set to it
(docs/evaluation.md); EvalConfig `generator_swap` lists the builds. One block per generator,
rows BGE-VL-MLLM and Lenses, columns the five lenses and All, I→T/T→I R@1/R@5. Protocols as
main Table 2 (the paper's InternVL3.5-38B block repeats Table 2's two fine-tuned rows): the lens
model by its lens-c slots (`lens_slot`), BGE-VL-MLLM by its one score on the same galleries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from training.evaluation.config import EvalConfig
from training.evaluation.systems.backbone_scaling import (
    LENS_COLS,
    gallery_protocol,
    lens_protocol,
    protocols_title,
    table_row,
)
from training.evaluation.systems.swap import FINE_TUNED, MAIN, SwapModels, swap_results
from training.evaluation.tables.markdown import table
from training.evaluation.types import SplitLabels

NOT_RUN = "not run: no `generator_swap` entries in the evaluation config"
ROWS = (("BGE-VL-MLLM", FINE_TUNED), ("Lenses", MAIN))


def generator_swap_results(
    cfg: EvalConfig,
    labels: SplitLabels,
    results: dict[str, Any],
    source: dict,
    evaluate: Callable,
    models: SwapModels | None = None,
) -> dict[str, Any]:
    """The frozen lens model and global-only baseline with each configured build's captions."""
    return swap_results(cfg, labels, results, source, evaluate, cfg.generator_swap, "captions", True, models)


def _note(swap: dict, block: str, system: str, metrics: dict | None) -> str:
    if metrics is not None:
        return ""
    reason = swap["unavailable"].get(block) or swap["unavailable"].get(system)
    return f"unavailable: {reason}" if reason else "not run: baselines.global_only_* not set"


def supp_table6(results: dict) -> str:
    protocols = {FINE_TUNED: gallery_protocol(results), MAIN: lens_protocol(results)}
    title = f"## Supp. Table 6, caption generator swap — R@K (%), {protocols_title(results)}"
    swap = results.get("generator_swap")
    if not swap:
        return f"{title}\n\n{NOT_RUN}."
    keys = [f"{k}/{d}/R@{r}" for _, k in LENS_COLS for d in ("i2t", "t2i") for r in (1, 5)]
    header = [
        "Model",
        *(f"{t} {d} R@{r}" for t, _ in LENS_COLS for d in ("I→T", "T→I") for r in (1, 5)),
        "Note",
    ]
    rows = []
    for block in swap["order"]:
        rows.append([f"*{block} (captions)*", *("" for _ in keys), ""])
        for label, system in ROWS:
            metrics = swap["rows"].get(block, {}).get(system, {}).get(protocols[system])
            rows.append(table_row(label, metrics, keys, _note(swap, block, system, metrics)))
    return f"{title}\n\n{table(header, rows)}"
