"""Evaluation reports: metrics.json, markdown tables laid out like the paper's, routing heatmap.

Tables: main Table 2 (lens x direction x R@1/R@5, one row per system, one table per per-lens
protocol), main Table 6 (macro R@K over the five lenses), main Table 4 (lens diversity),
polysemy metrics (IMP), IMP Tables 4-5 (per difficulty), supplementary Table 3 (similarity ablations), Table 4 (fallback
rates), main Table 3b (text-only) and external benchmarks.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from lenses_data.schemas import LENS_KEYS, LENS_NAMES
from training.evaluation.imp.aggregates import imp_aggregates_markdown
from training.evaluation.markdown import fmt as _fmt
from training.evaluation.markdown import table as _table
from training.evaluation.metrics.keys import DIVERSITY_KEYS, MAP_R, RSUM
from training.evaluation.tables.paper_tables import paper_tables_markdown

PROTOCOL_TITLES = {
    "lens_slot": "lens-specific slot retrieval, lens-c slots only, I→T gallery per `metrics.lens_slot_gallery` "
    "(default: the lens-c captions; main Sec. 4.2)",
    "lens_gallery": "full score, gallery of lens-c captions",
    "full_gallery": "full score, full gallery (supp. per-category R@K)",
}


def table2_markdown(systems: dict[str, dict[str, float]], ks: tuple[int, ...] = (1, 5)) -> str:
    """One row per system; columns lens x (I->T, T->I) x R@K, then All (as main Table 2)."""
    groups = [(t, k) for t, k in zip(LENS_NAMES, LENS_KEYS, strict=True)] + [("All", "all")]
    header = ["Model"] + [f"{t} {d} R@{k}" for t, _ in groups for d in ("I→T", "T→I") for k in ks]
    rows = []
    for name, m in systems.items():
        cells = [_fmt(m.get(f"{key}/{d}/R@{k}")) for _, key in groups for d in ("i2t", "t2i") for k in ks]
        rows.append([name, *cells])
    return _table(header, rows)


def table4_markdown(systems: dict[str, dict[str, float]]) -> str:
    cols = DIVERSITY_KEYS
    return _table(["Model", *cols], [[n, *(_fmt(m.get(c), 1) for c in cols)] for n, m in systems.items()])


def macro_markdown(by_protocol: dict[str, dict[str, dict[str, float]]], ks: tuple[int, ...]) -> str:
    """Main Table 6: per direction, the mean over lenses of per-lens R@K; one row per system and protocol."""
    header = ["Model", "Protocol"] + [f"{t} R@{k}" for t in ("I→T", "T→I") for k in ks] + ["lenses"]
    rows = []
    for protocol, systems in by_protocol.items():
        for name, m in systems.items():
            cells = [_fmt(m.get(f"macro/{d}/R@{k}")) for d in ("i2t", "t2i") for k in ks]
            rows.append([name, f"`{protocol}`", *cells, _fmt(m.get("macro/n_lenses"), 0)])
    return _table(header, rows)


def slot_coverage_markdown(m: dict[str, float]) -> str:
    """Lens-slot queries whose image has no slot of the lens (global fallback, or misses without it)."""
    rows = [
        [t, _fmt(m.get(f"{k}/i2t/n_without_slot"), 0), _fmt(m.get(f"{k}/t2i/n_without_slot"), 0)]
        for t, k in zip(LENS_NAMES, LENS_KEYS, strict=True)
    ]
    return _table(["Lens", "I→T queries without a lens slot", "T→I queries without a lens slot"], rows)


def polysemy_markdown(systems: dict[str, dict[str, float]]) -> str:
    """R@K, meanR/medR of the best positive, IMP's meanR/medR over all positives (I→T), mAP@R."""
    header = ["Model"]
    keys = []
    i2t_only = ("meanR_allpos", "medR_allpos", MAP_R)  # T→I: one positive, so _allpos = best
    for d, title in (("i2t", "I→T"), ("t2i", "T→I")):
        for k in ("R@1", "R@5", "R@10", "meanR", "medR") + (i2t_only if d == "i2t" else ()):
            header.append(f"{title} {k.replace('_allpos', ' (all pos.)')}")
            keys.append(f"all/{d}/{k}")
    header.append(RSUM)
    keys.append(RSUM)
    return _table(header, [[n, *(_fmt(m.get(k)) for k in keys)] for n, m in systems.items()])


IMP_TITLES = ("Easy", "Medium", "Hard")


def imp_retrieval_markdown(systems: dict[str, dict[str, float]]) -> str:
    """IMP Table 4: per difficulty, R@5 (best positive) and medR (all positives), I→T then T→I."""
    groups = [(d, t, k) for d, t in (("i2t", "I→T"), ("t2i", "T→I")) for k in ("easy", "medium", "hard")]
    header = ["Model"] + [f"{t} {k.title()} {c}" for _, t, k in groups for c in ("R@5", "medR")]
    rows = []
    for name, m in systems.items():
        cells = [
            _fmt(m.get(f"{k}/{d}/{key}"), digits)
            for d, _, k in groups
            for key, digits in (("R@5", 1), ("medR_allpos", 0))
        ]
        rows.append([name, *cells])
    return _table(header, rows)


def imp_auprc_markdown(systems: dict[str, dict[str, Any]]) -> str:
    """IMP Table 5: AUPRC of binary image-text classification per difficulty, and each row's negatives."""
    keys = ("easy", "medium", "hard", "all")
    header = ["Model", *IMP_TITLES, "All", "pairs (E/M/H)", "Negatives"]
    rows = []
    for name, m in systems.items():
        counts = "/".join(_fmt(m.get(f"{k}/n_pairs"), 0) for k in keys[:3])
        rows.append([name, *(_fmt(m.get(f"{k}/AUPRC")) for k in keys), counts, m.get("negatives", "?")])
    return _table(header, rows)


def ablation_markdown(variants: dict[str, dict[str, float]]) -> str:
    header = ["Similarity variant", "I→T R@1", "I→T R@5", "T→I R@1", "T→I R@5"]
    keys = ("all/i2t/R@1", "all/i2t/R@5", "all/t2i/R@1", "all/t2i/R@5")
    return _table(header, [[n, *(_fmt(m.get(k), 1) for k in keys)] for n, m in variants.items()])


def fallback_markdown(rates: dict[str, float]) -> str:
    rows = [
        [t, _fmt(rates.get(f"fallback/{k}/all_pairs"), 1), _fmt(rates.get(f"fallback/{k}/own_image"), 1)]
        for t, k in zip(LENS_NAMES, LENS_KEYS, strict=True)
    ]
    return _table(["Lens", "Fallback % (all pairs)", "Fallback % (own image)"], rows)


def text_only_markdown(metrics: dict[str, float], ks: tuple[int, ...]) -> str:
    rows = [[f"R@{k}", _fmt(metrics.get(f"P2C/R@{k}")), _fmt(metrics.get(f"C2P/R@{k}"))] for k in ks]
    return _table(["K", "P→C", "C→P"], rows)


def flat_markdown(title_col: str, values: dict[str, float]) -> str:
    return _table([title_col, "value"], [[k, _fmt(v)] for k, v in values.items()])


def routing_heatmap(routing: dict[str, Any], path: str | Path) -> Path:
    """Heatmap PNG: caption lens x winning image-slot lens (and x slot index), in percent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("by_lens_percent", "winning image-slot lens", list(LENS_NAMES))]
    by_slot = routing.get("by_slot_percent")
    if by_slot is not None and len(by_slot) and len(by_slot[0]):
        n_slots = len(by_slot[0])
        panels.append(("by_slot_percent", "winning image slot index", [str(i) for i in range(n_slots)]))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 5), squeeze=False)
    for ax, (key, xlabel, xticks) in zip(axes[0], panels, strict=True):
        data = np.array(routing[key], dtype=float)
        ax.imshow(np.nan_to_num(data), cmap="viridis", vmin=0, vmax=100)
        for (r, c), v in np.ndenumerate(data):
            ax.text(c, r, "-" if np.isnan(v) else f"{v:.0f}", ha="center", va="center", color="w", fontsize=8)
        ax.set_xticks(range(len(xticks)), xticks, rotation=45, ha="right")
        ax.set_yticks(range(len(LENS_NAMES)), LENS_NAMES)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("caption lens")
    fig.suptitle("Lens-aware routing (% of captions per caption lens)")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def render_markdown(results: dict[str, Any]) -> str:
    """All tables of one evaluation as one markdown document."""
    ks = tuple(results.get("meta", {}).get("ks", (1, 5, 10)))
    parts = [f"# Evaluation report ({results.get('meta', {}).get('split', '?')} split)"]
    parts += paper_tables_markdown(results)  # the papers' own rows first, unavailable ones marked
    by_protocol = results.get("systems", {})
    for protocol, systems in by_protocol.items():
        parts += [
            f"## Lens-aware retrieval, R@K (%) — protocol `{protocol}`, "
            f"{PROTOCOL_TITLES.get(protocol, protocol)}; layout of main Table 2",
            table2_markdown(systems),
        ]
        if protocol == "lens_slot":
            parts += [slot_coverage_markdown(m) for m in systems.values()]
    if by_protocol:
        parts += ["## Macro R@K (%) over the five lenses (main Table 6)", macro_markdown(by_protocol, ks)]
    # Overall and diversity metrics do not depend on the protocol; a gallery protocol lists every system.
    galleries = [p for p in by_protocol if p != "lens_slot"]
    main = by_protocol[galleries[0]] if galleries else next(iter(by_protocol.values()), {})
    if main:
        parts += ["## Lens diversity at 10 (main Table 4)", table4_markdown(main)]
        parts += [
            "## Polysemy metrics (IMP): R@K, meanR, medR (best positive; all positives), mAP@R",
            polysemy_markdown(main),
        ]
    if results.get("imp"):
        parts += [
            "## IMP difficulty split: R@5 and medR (all positives) per difficulty (IMP Table 4)",
            imp_retrieval_markdown(results["imp"]),
            "## IMP binary image-text classification, AUPRC per difficulty (IMP Table 5)",
            imp_auprc_markdown(results["imp"]),
        ]
    parts += imp_aggregates_markdown(results)  # IMP Tables 2 and 11
    if results.get("ablations"):
        parts += [
            "## Similarity ablation on fixed embeddings (supp. Table 3)",
            ablation_markdown(results["ablations"]),
        ]
    if results.get("fallback"):
        parts += ["## Global fallback usage (supp. Table 4)", fallback_markdown(results["fallback"])]
    if results.get("text_only"):
        parts += [
            "## Text-only prompt-caption retrieval (main Table 3b)",
            text_only_markdown(results["text_only"], ks),
        ]
    for name, values in results.get("external", {}).items():
        parts += [f"## External benchmark: {name}", flat_markdown("metric", values)]
    if results.get("irfl"):
        from training.evaluation.external.irfl import irfl_table_markdown

        parts += [
            f"## IRFL figurative detection, {results['irfl']['n_rows']} rows (seed 004 Table 3 layout; "
            "Acc = Precision@1, Margin = mean s(p, I_fig) - s(p, I_lit) in cosine, LitBias = % of "
            "forced choices with s(p, I_lit) >= s(p, I_fig))",
            irfl_table_markdown(results["irfl"]),
        ]
        if results["irfl"].get("fusion", {}).get("grid"):  # seed 004 Table 2
            from training.evaluation.external.irfl_fusion import fusion_grid_markdown

            parts += ["## Seed 004 Table 2: ensemble weights by validation accuracy (best 10)",
                      fusion_grid_markdown(results["irfl"]["fusion"])]  # fmt: skip
    if results.get("routing"):
        parts += ["## Routing (supp. Fig. 1)", "![routing](routing.png)"]
    return "\n\n".join(parts) + "\n"


def _json_safe(value: Any) -> Any:
    """NaN/inf become null so metrics.json is strict JSON."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return _json_safe(value.tolist())
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def write_reports(results: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """metrics.json, report.md and (when routing is present) routing.png in out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"metrics": out / "metrics.json", "report": out / "report.md"}
    tmp = paths["metrics"].with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_json_safe(results), indent=2, allow_nan=False))
    tmp.replace(paths["metrics"])
    paths["report"].write_text(render_markdown(results))
    if results.get("routing"):
        paths["routing"] = routing_heatmap(results["routing"], out / "routing.png")
    return paths
