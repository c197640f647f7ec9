"""The tables of the swapped-split harnesses (main Table 6, supp. Tables 6 and 7) and of supp.
Table 9, read from the results dict only (`training.evaluation.systems.swap` fills it). A table the
run did not produce is kept and marked "not run" with what to configure.

Backbone scaling (main Table 6, supp. Table 7), supp. Sec. 6: the retriever is trained once on the
InternVL3.5-38B build and kept fixed; only the model that writes the image-side prompts of the test
split changes (InternVL3.5-4B, 8B, 14B, 38B). Main Table 6 reports the macro R@K over the five
lenses per generator; supp. Table 7 the per-lens R@1/R@5, with the fine-tuned global-only
BGE-VL-MLLM (which reads no prompts) as its first row.

Generator swap (supp. Table 6), supp. Sec. 5: the InternVL3.5-38B image-side prompts stay and only
the captions (queries and candidates) come from another captioning model (Qwen3VL-30B-A3B, Grok 4.1
Fast). One block per generator, rows BGE-VL-MLLM and Lenses, columns the five lenses and All,
I→T/T→I R@1/R@5.

Every table reads the lens model as main Table 2 does (`lens_slot`, its lens-c slots): the paper's
InternVL3.5-38B rows repeat Table 2's, so the build the model was trained on must give the same
numbers here as there. The slot-less BGE-VL-MLLM row uses Table 2's gallery protocol.
"""

from __future__ import annotations

from training.baselines.clip_finetune import ROW as CLIP_FINETUNED
from training.evaluation.markdown import LENS_COLS, table, table_row
from training.evaluation.types import FINE_TUNED
from training.evaluation.types import MAIN_SYSTEM as MAIN

NOT_RUN = "not run: no `backbone_scaling` entries in the evaluation config"
SWAP_NOT_RUN = "not run: no `generator_swap` entries in the evaluation config"
SWAP_ROWS = (("BGE-VL-MLLM", FINE_TUNED), ("Lenses", MAIN))


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
        return f"{title}\n\n{SWAP_NOT_RUN}."
    keys = [f"{k}/{d}/R@{r}" for _, k in LENS_COLS for d in ("i2t", "t2i") for r in (1, 5)]
    header = [
        "Model",
        *(f"{t} {d} R@{r}" for t, _ in LENS_COLS for d in ("I→T", "T→I") for r in (1, 5)),
        "Note",
    ]
    rows = []
    for block in swap["order"]:
        rows.append([f"*{block} (captions)*", *("" for _ in keys), ""])
        for label, system in SWAP_ROWS:
            metrics = swap["rows"].get(block, {}).get(system, {}).get(protocols[system])
            rows.append(table_row(label, metrics, keys, _note(swap, block, system, metrics)))
    return f"{title}\n\n{table(header, rows)}"


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
