"""The papers' result tables with their own rows, in their order (main Tables 2, 3a, 4, 5;
supplementary Tables 3 and 5). A row the run did not produce is kept and marked: "unavailable"
(the code cannot produce it, with the reason) or "not run" (what to configure for it).

Reads only the results dict of `training.evaluation.run`; the generic per-protocol tables stay in
`training.evaluation.tables.reports`, which appends these.
"""

from __future__ import annotations

from typing import Any

from training.evaluation.markdown import LENS_COLS, table_row
from training.evaluation.markdown import fmt as _fmt
from training.evaluation.markdown import table as _table
from training.evaluation.metrics.keys import DIVERSITY_KEYS, RSUM, title
from training.evaluation.tables.harness_tables import harness_tables
from training.evaluation.types import FINE_TUNED
from training.evaluation.types import MAIN_SYSTEM as MAIN

# Rows no configuration can fill, with the reason (docs/evaluation.md lists them).
NO_ADAPTER = {
    "Onepiece": "unavailable: no loader for OnePiece in this code (not an open_clip or transformers "
    "family it knows)",
}
TABLE2_ZERO_SHOT = ("BLIP-2", "CLIP", "CoCa", "OpenCLIP", "Jina-v4", "BGE-VL-Large", "BGE-VL-MLLM")
TABLE5_ZERO_SHOT = ("BLIP-2", "BGE-VL-Large", "CLIP", "CoCa", "Jina-v4", "Onepiece", "OpenCLIP", "SigLIP-2")
TABLE5_FINE_TUNED = ("BGE-VL-MLLM (fine-tuned)", "Lenses - All", "Lenses - Literal", "Lenses - Emotional")


def _block(title: str, width: int) -> list[str]:
    return [f"*{title}*", *("" for _ in range(width))]


def _lens_model(results: dict, by_protocol: dict | None) -> tuple[dict | None, str]:
    """A lens model's per-lens numbers as the paper reads them: the lens-slot protocol (main
    Sec. 4.2), else the first gallery protocol with a note. by_protocol: {protocol: metrics}."""
    if not by_protocol:
        return None, ""
    if "lens_slot" in by_protocol:
        return by_protocol["lens_slot"], "`lens_slot`"
    protocol, _ = _gallery(results)
    return by_protocol.get(protocol), f"`{protocol}` (lens_slot not in metrics.protocols)"


def _main_by_protocol(results: dict) -> dict[str, dict]:
    return {p: s[MAIN] for p, s in results.get("systems", {}).items() if MAIN in s}


def _gallery(results: dict) -> tuple[str | None, dict[str, dict]]:
    systems = results.get("systems", {})
    protocols = [p for p in systems if p != "lens_slot"]
    return (protocols[0], systems[protocols[0]]) if protocols else (None, {})


def _zero_shot_note(results: dict, row: str, systems: dict, suffix: str = "") -> tuple[dict | None, str]:
    if row in systems:
        return systems[row], ""
    unavailable = results.get("zero_shot", {}).get("unavailable", {})
    if row in unavailable:
        return None, f"unavailable: {unavailable[row]}"
    if row in NO_ADAPTER:
        return None, NO_ADAPTER[row]
    return None, f"not run: no baselines.zero_shot entry with row {row!r}{suffix}"


def table2(results: dict) -> str:
    protocol, systems = _gallery(results)
    systems, from_open_clip = with_open_clip_row(results, systems), open_clip_note(results, systems)
    keys = [f"{k}/{d}/R@{r}" for _, k in LENS_COLS for d in ("i2t", "t2i") for r in (1, 5)]
    header = [
        "Model",
        *(f"{t} {d} R@{r}" for t, _ in LENS_COLS for d in ("I→T", "T→I") for r in (1, 5)),
        "Note",
    ]
    rows = [_block("Zero-shot", len(keys) + 1)]
    for r in TABLE2_ZERO_SHOT:
        m, note = _zero_shot_note(results, r, systems)
        rows.append(table_row(r, m, keys, from_open_clip.get(r, note) if m is not None else note))
    rows.append(_block("Fine-Tune", len(keys) + 1))
    rows.append(table_row("BGE-VL-MLLM", systems.get(FINE_TUNED), keys,
                          "" if FINE_TUNED in systems else "not run: baselines.global_only_encodings or global_only_checkpoint not set"))  # fmt: skip
    m, note = _lens_model(results, _main_by_protocol(results))
    rows.append(table_row("Lenses", m, keys, note))
    if note.startswith("`lens_slot`"):  # beside it: the full score on the same galleries, as the baselines
        rows.append(
            table_row("Lenses, full score", systems.get(MAIN), keys, f"`{protocol}`, not a paper row")
        )
    for role, label in (("lenses_literal", "Lenses - Literal"), ("lenses_emotional", "Lenses - Emotional")):
        v = results.get("variants", {}).get(role)
        if v is not None:
            m, note = _lens_model(results, v)
            rows.append(table_row(label, m, keys, f"variant, {note}"))
    title = (
        "## Main Table 2 (paper rows), R@K (%) — per lens c, I→T ranks the lens-c captions only "
        f"(main Sec. 4.2); lens models by their lens-c slots (`lens_slot`), the others by their score (`{protocol}`); "
        "All: full score, every caption"
    )
    return f"{title}\n\n{_table(header, rows)}"


def table3a(results: dict) -> str:
    protocol, systems = _gallery(results)
    variants = results.get("variants", {})
    spec = [("1", "✓", "", "", variants.get("loss_ret", {}).get(protocol), "loss_ret"),
            ("2", "✓", "✓", "", variants.get("loss_ret_slot", {}).get(protocol), "loss_ret_slot"),
            ("3", "✓", "✓", "✓", systems.get(MAIN), None)]  # fmt: skip
    rows = []
    for n, a, b, c, m, role in spec:
        note = "" if m is not None else f"not run: variants entry with role {role} (configs/ablations)"
        rows.append([n, a, b, c, _fmt(m.get(RSUM), 1) if m else "—", note])
    header = ["", "L_ret", "L_cap→slot", "L_div-img", "RSUM (All)", "Note"]
    return f"## Main Table 3a, loss ablation (RSUM of All)\n\n{_table(header, rows)}"


def table4(results: dict) -> str:
    _, systems = _gallery(results)
    keys = list(DIVERSITY_KEYS)
    zs, note = _zero_shot_note(results, "BGE-VL-MLLM", systems)
    rows = [table_row("BGE-VL-MLLM", zs, keys, note, 1),
            table_row("BGE-VL-MLLM (Fine-Tune)", systems.get(FINE_TUNED), keys,
                      "" if FINE_TUNED in systems else "not run: baselines.global_only_encodings or global_only_checkpoint not set", 1),
            table_row("Lenses", systems.get(MAIN), keys, "", 1)]  # fmt: skip
    header = ["Method", *map(title, keys), "Note"]
    return f"## Main Table 4, lens-aware retrieval metrics\n\n{_table(header, rows)}"


def table5(results: dict) -> str:
    title = "## Main Table 5, ArtEmis retrieval R@K (%)"
    art = results.get("artemis")
    if art is None:
        return f"{title}\n\nnot run: external.artemis not configured (every row)."
    keys = [f"all/{d}/R@{k}" for d in ("i2t", "t2i") for k in (1, 5, 10)]
    header = ["Model", *(f"{t} R@{k}" for t in ("I→T", "T→I") for k in (1, 5, 10)), "Note"]
    systems, unavailable = art["systems"], art["unavailable"]
    from_open_clip = open_clip_note(results, systems)
    systems = with_open_clip_row(results, systems, results.get("external", {}).get(ARTEMIS_OPEN_CLIP))
    rows = [_block("Zero-shot", len(keys) + 1)]
    for r in TABLE5_ZERO_SHOT:
        m, note = _zero_shot_note({"zero_shot": {"unavailable": unavailable}}, r, systems)
        rows.append(table_row(r, m, keys, from_open_clip.get(r, note) if m is not None else note))
    rows.append(_block("Fine-tuned on Lenses", len(keys) + 1))
    for r in TABLE5_FINE_TUNED:
        rows.append(
            table_row(r, systems.get(r), keys, f"not run: {unavailable[r]}" if r in unavailable else "")
        )
    sizes = (f"{art['n_images']} images, {art['n_captions']} captions, {art['n_rejected_rows']} rows rejected; "
             f"{art['n_images_with_prompts']} images with image-side prompts")  # fmt: skip
    return f"{title}\n\n{sizes}\n\n{_table(header, rows)}"


def supp_table3(results: dict) -> str:
    ab = results.get("ablations") or {}
    keys = ["all/i2t/R@1", "all/i2t/R@5", "all/t2i/R@1", "all/t2i/R@5"]
    names = [("Global only (w/o prompts)", "Global only (w/o prompts)"), ("Global only (w/ prompts)", "Global only"),
             ("No-mask smooth Chamfer", "No-mask smooth Chamfer"),
             ("Lens-masked smooth Chamfer", "Lens-masked smooth Chamfer"),
             ("Full Model (Lens-masked + Global)", "Full model (lens-masked + global)")]  # fmt: skip
    rows = []
    for label, key in names:
        note = (
            ""
            if key in ab
            else results.get("ablation_notes", {}).get(key, "not run: baselines.similarity_ablations off")
        )
        rows.append(table_row(label, ab.get(key), keys, note, 1))
    header = ["Similarity variant", "I→T R@1", "I→T R@5", "T→I R@1", "T→I R@5", "Note"]
    return f"## Supp. Table 3, similarity ablation on fixed embeddings\n\n{_table(header, rows)}"


def supp_table5(results: dict) -> str:
    protocol, systems = _gallery(results)
    variants = results.get("variants", {})
    keys = [f"{k}/{d}/R@{r}" for _, k in LENS_COLS for d in ("i2t", "t2i") for r in (1, 5)]
    header = [
        "Config (z)",
        *(f"{t} {d} R@{r}" for t, _ in LENS_COLS for d in ("I→T", "T→I") for r in (1, 5)),
        "Note",
    ]
    rows = []
    for label, role in (("z=0 (Token-Only)", "density_z0"), ("z=1 (Top-1 Prompt)", "density_z1")):
        m, note = _lens_model(results, variants.get(role))
        rows.append(table_row(label, m, keys, note if m else f"not run: variants entry with role {role}"))
    m, note = _lens_model(results, _main_by_protocol(results))
    rows.append(table_row("z>1 (All-Prompts)", m, keys, note))
    if note.startswith("`lens_slot`"):
        rows.append(table_row("z>1, full score", systems.get(MAIN), keys, f"`{protocol}`, not a paper row"))
    title = "## Supp. Table 5, prompt density — the protocol of main Table 2 (its z>1 row is Table 2's Lenses row)"
    return f"{title}\n\n{_table(header, rows)}"


def paper_tables_markdown(results: dict[str, Any]) -> list[str]:
    """Markdown sections of the papers' tables, in paper order."""
    if not results.get("systems"):
        return []
    return [
        "# The papers' tables",
        table2(results), table3a(results), table4(results), table5(results),
        supp_karpathy_table(results, "coco"), supp_karpathy_table(results, "flickr30k"),
        supp_table3(results), supp_table5(results), *harness_tables(results),
        "# Every metric, by protocol",
    ]  # fmt: skip


# --- baselines.open_clip in its paper row; supp. Tables 1-2 (training/evaluation/external/karpathy.py) ---

ARTEMIS_OPEN_CLIP = (
    "ArtEmis (zero-shot open_clip)"  # training.evaluation.external.artemis_irfl.external_benchmarks
)
KARPATHY_ROWS = ("OpenAI CLIP-B/16", "Open CLIP-B/16", "EVA-02-CLIP-B/16", "OpenAI CLIP-L/14", "Open CLIP-L/14",
                 "EVA-02-CLIP-L/14", "MagicLens-B", "MagicLens-L", "VLM2Vec", "BGE-VL-MLLM")  # fmt: skip
KARPATHY_LENSES = ("Lenses - All", "Lenses - Literal")
KARPATHY_TITLES = {
    "coco": ("Supp. Table 1", "COCO 5K test"),
    "flickr30k": ("Supp. Table 2", "Flickr30K 1K test"),
}
KARPATHY_NO_LOADER = {
    "MagicLens-B": "MagicLens's released checkpoints are JAX/Scenic models and the paper's "
    "reproduced CoCa checkpoints are not published; no loader here",
    "MagicLens-L": "MagicLens's released checkpoints are JAX/Scenic models and the paper's "
    "reproduced CoCa checkpoints are not published; no loader here",
}


def with_open_clip_row(results: dict, systems: dict, metrics: dict | None = None) -> dict:
    """`systems` plus baselines.open_clip's numbers under its paper row (CLIP or OpenCLIP) when no
    baselines.zero_shot entry already fills that row. metrics: its numbers (default: its system)."""
    placed = results.get("open_clip_row") or {}
    row, name = placed.get("row"), placed.get("system")
    metrics = metrics if metrics is not None else systems.get(name)
    if row is None or row in systems or metrics is None:
        return systems
    return {**systems, row: metrics}


def open_clip_note(results: dict, systems: dict) -> dict[str, str]:
    """{row: note} for the row baselines.open_clip fills (none when a zero-shot entry has it)."""
    placed = results.get("open_clip_row") or {}
    row = placed.get("row")
    if row is None or row in systems:
        return {}
    return {row: f"baselines.open_clip: {placed.get('system')}"}


def supp_karpathy_table(results: dict, dataset: str) -> str:
    """Supp. Table 1 (COCO) or 2 (Flickr30K): zero-shot I->T and T->I R@1/5/10 of every row."""
    number, name = KARPATHY_TITLES[dataset]
    title = f"## {number}, zero-shot retrieval on {name} R@K (%)"
    res = results.get(dataset)
    if res is None:
        return f"{title}\n\nnot run: external.{dataset} not configured (every row)."
    keys = [f"all/{d}/R@{k}" for d in ("i2t", "t2i") for k in (1, 5, 10)]
    header = ["Model", *(f"{t} R@{k}" for t in ("I→T", "T→I") for k in (1, 5, 10)), "Note"]
    systems = res["systems"]
    unavailable = {"zero_shot": {"unavailable": {**KARPATHY_NO_LOADER, **res["unavailable"]}}}
    rows = [_block("Zero-shot", len(keys) + 1)]
    for r in KARPATHY_ROWS:
        m, note = _zero_shot_note(unavailable, r, systems)
        rows.append(table_row(r, m, keys, note))
    for r in KARPATHY_LENSES:
        rows.append(
            table_row(
                r, systems.get(r), keys, f"unavailable: {res['unavailable'][r]}" if r not in systems else ""
            )
        )
    extra = [r for r in [*systems, *res["unavailable"]] if r not in KARPATHY_ROWS + KARPATHY_LENSES]
    if extra:  # configured systems without a paper row, also those that could not run
        rows.append(_block("Other configured systems", len(keys) + 1))
        for r in extra:
            m, note = _zero_shot_note(unavailable, r, systems)
            rows.append(table_row(r, m, keys, note))
    sizes = (f"{res['n_images']} images, {res['n_captions']} captions ({res['split']} split of {res['file']}); "
             f"{res['n_rejected']} entries rejected, {res['n_captions_beyond_limit']} captions beyond the "
             f"per-image limit left out; {res['n_images_with_prompts']} images with image-side prompts")  # fmt: skip
    return f"{title}\n\n{sizes}\n\n{_table(header, rows)}"
