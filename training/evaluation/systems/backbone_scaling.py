"""Backbone scaling (main Table 6, supp. Table 7): one frozen lens model, image-side prompts and
their lens labels from generators of different sizes.

Supp. Sec. 6: the retriever is trained once on the InternVL3.5-38B build and kept fixed; only
the model that writes the image-side prompts of the test split changes (InternVL3.5-4B, 8B,
14B, 38B). Each size is a build of the same pipeline with `models.generator.model` set to it
(docs/evaluation.md); EvalConfig `backbone_scaling` lists the builds. Main Table 6 reports the
macro R@K over the five lenses per generator; supp. Table 7 the per-lens R@1/R@5, with the
fine-tuned global-only BGE-VL-MLLM (which reads no prompts) as its first row.

Both tables read the lens model as main Table 2 does (`lens_slot`, its lens-c slots): the
paper's InternVL3.5-38B row of supp. Table 7 repeats Table 2's Lenses row, so the build the model
was trained on must give the same numbers here as there. The slot-less BGE-VL-MLLM row uses
Table 2's gallery protocol for baselines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lenses_data.schemas import LENS_KEYS, LENS_NAMES
from training.evaluation.config import EvalConfig
from training.evaluation.systems.swap import FINE_TUNED, MAIN, SwapModels, swap_results
from training.evaluation.tables.markdown import fmt, table
from training.evaluation.types import SplitLabels

NOT_RUN = "not run: no `backbone_scaling` entries in the evaluation config"
LENS_COLS = (*zip(LENS_NAMES, LENS_KEYS, strict=True), ("All", "all"))  # (title, metrics key)


def backbone_scaling_results(
    cfg: EvalConfig,
    labels: SplitLabels,
    results: dict[str, Any],
    source: dict,
    evaluate: Callable,
    models: SwapModels | None = None,
) -> dict[str, Any]:
    """The frozen lens model on the evaluated split with each configured build's prompts."""
    return swap_results(
        cfg, labels, results, source, evaluate, cfg.backbone_scaling, "prompts", False, models
    )


def gallery_protocol(results: dict) -> str | None:
    """Main Table 2's protocol for slot-less rows (the first gallery protocol), so the tables agree."""
    return next((p for p in results.get("systems", {}) if p != "lens_slot"), None)


def lens_protocol(results: dict) -> str | None:
    """Main Table 2's protocol for the lens model: `lens_slot` when the run computed it, else the
    first gallery protocol (as `paper_tables` falls back)."""
    return "lens_slot" if "lens_slot" in results.get("systems", {}) else gallery_protocol(results)


def protocols_title(results: dict) -> str:
    """How a harness table's rows were scored, for its title."""
    lens, gallery = lens_protocol(results), gallery_protocol(results)
    return (
        f"lens model `{lens}`"
        + ("" if lens == gallery else f", BGE-VL-MLLM `{gallery}`")
        + " (as main Table 2)"
    )


def table_row(label: str, metrics: dict | None, keys: list[str], note: str, digits: int = 2) -> list[str]:
    cells = ["—" for _ in keys] if metrics is None else [fmt(metrics.get(k), digits) for k in keys]
    return [label, *cells, note]


def _lens_row(scaling: dict, row: str, protocol: str | None) -> tuple[dict | None, str]:
    if row in scaling["unavailable"]:
        return None, f"unavailable: {scaling['unavailable'][row]}"
    return scaling["rows"].get(row, {}).get(MAIN, {}).get(protocol), ""


def main_table6(results: dict) -> str:
    protocol = lens_protocol(results)
    title = (
        "## Main Table 6, image-side prompt generator size — macro R@K (%) over the five lenses, "
        f"`{protocol}` (as main Table 2)"
    )
    scaling = results.get("backbone_scaling")
    if not scaling:
        return f"{title}\n\n{NOT_RUN}."
    keys = [f"macro/{d}/R@{k}" for d in ("i2t", "t2i") for k in (1, 5, 10)]
    header = ["Prompt generator", *(f"{t} R@{k}" for t in ("I→T", "T→I") for k in (1, 5, 10)), "Note"]
    rows = []
    for row in scaling["order"]:
        metrics, note = _lens_row(scaling, row, protocol)
        rows.append(table_row(row, metrics, keys, note))
    return f"{title}\n\n{table(header, rows)}"


def supp_table7(results: dict) -> str:
    protocol, lens = gallery_protocol(results), lens_protocol(results)
    title = f"## Supp. Table 7, backbone scaling — per-lens R@K (%), {protocols_title(results)}"
    scaling = results.get("backbone_scaling")
    if not scaling:
        return f"{title}\n\n{NOT_RUN}."
    lenses = LENS_COLS[:-1]  # the five lenses; the table has no All column
    keys = [f"{k}/{d}/R@{r}" for _, k in lenses for d in ("i2t", "t2i") for r in (1, 5)]
    header = [
        "Backbone",
        *(f"{t} {d} R@{r}" for t, _ in lenses for d in ("I→T", "T→I") for r in (1, 5)),
        "Note",
    ]
    baseline = results.get("systems", {}).get(protocol, {}).get(FINE_TUNED)
    note = "" if baseline else "not run: baselines.global_only_encodings or global_only_checkpoint not set"
    rows = [table_row("BGE-VL-MLLM (fine-tuned, no prompts)", baseline, keys, note, 1)]
    for row in scaling["order"]:
        metrics, note = _lens_row(scaling, row, lens)
        rows.append(table_row(row, metrics, keys, note, 1))
    return f"{title}\n\n{table(header, rows)}"
