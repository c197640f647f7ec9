"""The dataset card (README.md + figures/) written next to an export.

Sections: Table-1-style counts (split x lens), Figure-3-style plots (lens distribution, captions
per image, prompts per image), the funnel from candidate images to final texts, rejection reasons
by stage, idiom usage by lens and family, rule flags (rules a kept text breaks without being
rejected for it), caption diversity, and provenance (models, prompt hashes). Numbers come from the exported tables and the run's stage outputs, never from the paper.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from lenses_data import io, rules
from lenses_data.phrase_bank import default_phrase_bank
from lenses_data.schemas import LENS_NAMES, SPLIT_NAMES

FIGURES = "figures"
# Said as loudly by the card and by the build report (lenses_data.report).
SIMULATED_NOTE = (
    "Model answers in this export came from the built-in simulator, not from InternVL3.5-38B or "
    "Qwen2.5-32B-Instruct. Use it to check the pipeline, never to train or evaluate."
)
DIVERSITY_SAMPLE = 2000  # images used for the within-image similarity (pairwise, so bounded)


def _md_table(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(_cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def _cell(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    if isinstance(value, float):
        return f"{value:.3f}" if value == value else "-"
    return f"{value:,}" if isinstance(value, int) else str(value)


def split_lens_table(images: pd.DataFrame, texts: pd.DataFrame, noun: str) -> pd.DataFrame:
    """Table 1 of the paper: per split, images, texts, and texts per lens; a Total row."""
    rows = []
    for split in [*SPLIT_NAMES, "Total"]:
        imgs = images if split == "Total" else images[images["split"] == split]
        part = texts if split == "Total" else texts[texts["split"] == split]
        lens_counts = part["lens"].astype(str).value_counts()
        row = {"Split": split.capitalize(), "# Images": len(imgs), f"# {noun}": len(part)}
        row.update({lens: int(lens_counts.get(lens, 0)) for lens in LENS_NAMES})
        rows.append(row)
    return pd.DataFrame(rows)


def plot_figures(out: Path, images: pd.DataFrame, captions: pd.DataFrame, prompts: pd.DataFrame) -> list[str]:
    """Figure 3 of the paper as three PNGs; returns their paths relative to `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = out / FIGURES
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    fig, ax = plt.subplots(figsize=(5, 3.2))
    counts = captions["lens"].astype(str).value_counts()
    ax.bar(LENS_NAMES, [int(counts.get(n, 0)) for n in LENS_NAMES], color="#4C72B0")
    ax.set_title("Captions per lens")
    ax.set_ylabel("captions")
    ax.tick_params(axis="x", labelrotation=20)
    written.append(_save(fig, folder / "lens_distribution.png", plt))
    for name, texts in (("captions", captions), ("prompts", prompts)):
        per_image = texts.groupby("image_id").size().reindex(images["image_id"], fill_value=0)
        fig, ax = plt.subplots(figsize=(5, 3.2))
        top = int(per_image.max()) if len(per_image) else 1
        ax.hist(per_image, bins=range(0, top + 2), align="left", color="#55A868", rwidth=0.85)
        ax.set_title(f"{name.capitalize()} per image")
        ax.set_xlabel(f"{name} per image")
        ax.set_ylabel("images")
        written.append(_save(fig, folder / f"{name}_per_image.png", plt))
    return [str(Path(FIGURES) / Path(p).name) for p in written]


def _save(fig: Any, path: Path, plt: Any) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def _count(
    run: Path, stage: str, column: str | None = None, extra: tuple[str, ...] = ()
) -> pd.DataFrame | None:
    """The stage's `column` (plus `extra`) over all its shards, or None when it has no such column.
    Only those columns are read: the funnel counts rows, and the text stages hold ~15 texts per image."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        paths = io.stage_shards(run, stage, require_complete=False)
        if column is None:
            return pd.DataFrame(index=range(sum(pq.read_metadata(path).num_rows for path in paths)))
        wanted = [column, *extra]
        if not paths or any(not set(wanted) <= set(pq.read_schema(path).names) for path in paths):
            return None
        return pa.concat_tables([pq.read_table(path, columns=wanted) for path in paths]).to_pandas()
    except (FileNotFoundError, ValueError):
        return None


def funnel(run: Path, images: pd.DataFrame, captions: pd.DataFrame, prompts: pd.DataFrame) -> pd.DataFrame:
    """From candidate images to final texts, stage by stage."""
    rows: list[dict[str, Any]] = []
    ingest = _count(run, "ingest")
    if ingest is not None:
        rows.append({"Step": "ingest: decoded candidate images", "Images": len(ingest)})
    dedupe = _count(run, "dedupe", "kept")
    if dedupe is not None:
        rows.append({"Step": "dedupe: one per near-duplicate group", "Images": int(dedupe["kept"].sum())})
    decisions = _count(run, "filter", "passed")
    if decisions is not None:
        rows.append({"Step": "filter: decided (Listing 1)", "Images": len(decisions)})
        rows.append({"Step": "filter: passed (YES)", "Images": int(decisions["passed"].sum())})
    split = _count(run, "split")
    if split is not None:
        rows.append({"Step": "split: assigned", "Images": len(split)})
    for stage, label in (
        ("generate", "generated"),
        ("rules", "rule checks passed"),
        ("validate", "text-validated"),
        ("visual_validate", "after visual validation (test)"),
    ):
        texts = _count(run, stage, "kind", ("image_id",))
        if texts is not None:
            kinds = texts["kind"].value_counts()
            rows.append(
                {
                    "Step": f"{stage}: {label}",
                    "Images": texts["image_id"].nunique(),
                    "Prompts": int(kinds.get("prompt", 0)),
                    "Captions": int(kinds.get("caption", 0)),
                }
            )
    rows.append(
        {
            "Step": "export: final dataset",
            "Images": len(images),
            "Prompts": len(prompts),
            "Captions": len(captions),
        }
    )
    table = pd.DataFrame(rows, columns=["Step", "Images", "Prompts", "Captions"]).astype(object)
    return table.where(table.notna(), "")


def rejection_table(rejections: pd.DataFrame) -> pd.DataFrame:
    if rejections.empty:
        return pd.DataFrame({"Stage": [], "Reason": [], "Rows": [], "Records": []})
    grouped = rejections.groupby(["stage", "reason"]).agg(
        Rows=("record_id", "size"), Records=("record_id", "nunique")
    )
    table = grouped.reset_index().rename(columns={"stage": "Stage", "reason": "Reason"})
    return table.sort_values(["Stage", "Rows"], ascending=[True, False]).reset_index(drop=True)


def idiom_tables(captions: pd.DataFrame, prompts: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Share of texts with a phrase-bank idiom per lens; idiom uses per family and lens."""
    bank = default_phrase_bank()
    shares, families = [], Counter()
    for lens in LENS_NAMES:
        row: dict[str, Any] = {"Lens": lens}
        for noun, texts in (("captions", captions), ("prompts", prompts)):
            part = texts[texts["lens"].astype(str) == lens]
            idiomatic = int(sum(len(v) > 0 for v in part["idioms"]))
            row[f"Idiomatic {noun}"] = f"{idiomatic}/{len(part)}"
            for idioms in part["idioms"]:
                families.update((bank.family_of(i), lens) for i in idioms)
        shares.append(row)
    names = [name for name, _, _ in bank.families] + [bank.add_ons_name]
    family_rows = [{"Family": f, **{lens: families.get((f, lens), 0) for lens in LENS_NAMES}} for f in names]
    return pd.DataFrame(shares), pd.DataFrame(family_rows)


def idiom_target_line(captions: pd.DataFrame, prompts: pd.DataFrame, share: float = 0.4) -> str:
    """How many images reach the per-image idiom target (Listing 2: 40 percent, rounded up)."""
    parts = []
    for noun, texts in (("captions", captions), ("prompts", prompts)):
        if texts.empty:
            continue
        per_image = texts.assign(_idiomatic=[len(v) > 0 for v in texts["idioms"]]).groupby("image_id")[
            "_idiomatic"
        ]
        met = sum(int(g.sum()) >= rules.idiom_target(len(g), share) for _, g in per_image)
        parts.append(f"{met:,} of {per_image.ngroups:,} images by {noun}")
    return f"Images with at least {share:.0%} idiomatic texts (rounded up): " + "; ".join(parts) + "."


def flag_table(captions: pd.DataFrame, prompts: pd.DataFrame) -> pd.DataFrame:
    """Kept texts per kind, flag code and lens that break a rule which did not reject them."""
    rows = []
    for noun, texts in (("Captions", captions), ("Prompts", prompts)):
        if texts.empty or "flags" not in texts.columns:
            continue
        exploded = texts.assign(flag=texts["flags"].map(list)).explode("flag").dropna(subset=["flag"])
        for code, group in exploded.groupby("flag"):
            lens_counts = group["lens"].astype(str).value_counts()
            row = {"Texts": noun, "Flag": code, **{n: int(lens_counts.get(n, 0)) for n in LENS_NAMES}}
            rows.append({**row, "Total": f"{len(group):,}/{len(texts):,}"})
    return pd.DataFrame(rows, columns=["Texts", "Flag", *LENS_NAMES, "Total"])


def _flags_section(captions: pd.DataFrame, prompts: pd.DataFrame, manifest: dict[str, Any]) -> list[str]:
    mode = manifest.get("config", {}).get("annotate", {}).get("idiom_rules", "flag")
    note = (
        f"Phrase-bank rules: `{mode}`. These texts are in the dataset; the codes are in each text's "
        "`flags` column, so a stricter subset is one filter away (see docs/rules.md of the pipeline)."
    )
    table = flag_table(captions, prompts)
    return _section("Rule flags on kept texts", note, _md_table(table) if len(table) else "No flags.")


def _caption_table(captions: pd.DataFrame | pa.Table) -> pa.Table:
    if isinstance(captions, pa.Table):
        return captions.select(["image_id", "text"])
    return pa.Table.from_pandas(captions[["image_id", "text"]], preserve_index=False)


def diversity(captions: pd.DataFrame | pa.Table) -> pd.DataFrame:
    """Lexical diversity of captions: length, vocabulary, distinct-n, within-image similarity."""
    # One caption at a time, from Arrow batches: only the distinct words and n-grams are kept, never
    # every caption's token list nor every text as a Python object (at 100k candidates either was
    # the export's memory peak).
    table = _caption_table(captions)
    count, words, vocabulary = 0, 0, set()
    distinct: dict[int, set] = {1: set(), 2: set()}
    grams = dict.fromkeys(distinct, 0)
    for batch in table.select(["text"]).to_batches(max_chunksize=4096):
        for text in batch.column(0).to_pylist():
            tokens = [w.lower() for w in rules.words(text)]
            count, words = count + 1, words + len(tokens)
            vocabulary.update(tokens)
            for n, seen in distinct.items():
                seen.update(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
                grams[n] += max(0, len(tokens) - n + 1)
    stats: dict[str, Any] = {"Captions": count}
    stats["Mean words"] = float(words / count) if count else float("nan")
    stats["Vocabulary"] = len(vocabulary)
    for n, seen in distinct.items():
        stats[f"Distinct-{n}"] = len(seen) / grams[n] if grams[n] else float("nan")
    sims = []
    sample = sorted(pc.unique(table["image_id"]).to_pylist())[:DIVERSITY_SAMPLE]
    chosen = table.filter(pc.is_in(table["image_id"], value_set=pa.array(sample, pa.string())))
    for _, group in chosen.to_pandas().groupby("image_id")["text"]:
        items = list(group)
        sims += [rules.ngram_similarity(a, b) for i, a in enumerate(items) for b in items[i + 1 :]]
    stats["Mean within-image overlap"] = float(sum(sims) / len(sims)) if sims else float("nan")
    return pd.DataFrame([stats])


def _idiom_share(manifest: dict[str, Any]) -> float:
    return float(manifest.get("config", {}).get("annotate", {}).get("idiom_target_share", 0.4))


def _section(title: str, *blocks: str) -> list[str]:
    lines = [f"## {title}", ""]
    for block in blocks:
        lines += [block, ""]
    return lines


def _provenance(manifest: dict[str, Any]) -> list[str]:
    hashes = pd.DataFrame([{"Template": k, "Hash": v} for k, v in manifest["prompt_hashes"].items()])
    roles = pd.DataFrame(
        [
            {"Role": role, "Model": info.get("model", ""), "Revision": info.get("revision") or "-"}
            for role, info in manifest["models"].items()
        ]
    )
    note = "Full configuration, package versions and per-stage counts: `manifest.json`."
    return _section("Provenance", _md_table(hashes), _md_table(roles), note)


def _compute(manifest: dict[str, Any]) -> list[str]:
    """Model requests and tokens from the journals, and the GPU-hour plan of `lenses plan`."""
    usage = pd.DataFrame(
        [{"Model": model, **counts} for model, counts in sorted((manifest.get("usage") or {}).items())]
    )
    parts: list[str] = ["Requests and tokens as the per-shard journals recorded them:", _md_table(usage)]
    plan = manifest.get("gpu_plan")
    if plan:
        stages = pd.DataFrame(
            [
                {
                    "Stage": item["stage"],
                    "Requests": round(item["requests"]),
                    "GPU-hours": round(item["gpu_hours"], 3),
                }
                for item in plan["stages"]
            ]
        )
        parts += [
            f"GPU-hours of this build on {plan['gpu']} (`lenses plan`, {plan['candidates']:,.0f} candidates; "
            f"total {plan['total_gpu_hours']:.3f}; every assumption in `manifest.json` under `gpu_plan`):",
            _md_table(stages),
        ]
    return _section("Compute", *parts)


def _loading(metadata: dict[str, Any] | None) -> list[str]:
    """Three ways in: pandas (categoricals), `datasets` (configs, ClassLabel), DuckDB (SQL)."""
    code = [
        "```python",
        "import pandas as pd                       # lens and split are categoricals in the paper's order",
        'captions = pd.read_parquet("export/captions.parquet")',
        "import datasets                           # one config per table, train/valid/test splits",
        'ds = datasets.load_dataset("export", "captions")   # lens is a ClassLabel',
        "import duckdb",
        "duckdb.sql(\"SELECT lens, count(*) FROM 'export/captions.parquet' GROUP BY lens\").show()",
        "```",
    ]
    note = (
        "The flat tables (`*.parquet` here) are for pandas, DuckDB and the training code. The "
        "Hugging Face configs read `hf/<config>/<split>-*.parquet`, the same rows with `lens` and `split` "
        "stored as ClassLabel codes (pandas reads the flat tables' dictionary columns as categoricals, "
        "which `datasets` cannot cast to ClassLabel); `rejections` is one split, `full`."
    )
    if metadata is None:
        return _section("Loading", "\n".join(code[:3] + code[-3:]))
    infos = metadata.get("dataset_info", [])
    images = any(item.get("dtype") == "image" for info in infos for item in info["features"])
    where = (
        "The images config embeds the image bytes (`image` column, `datasets.Image`): the export can be "
        "copied or uploaded with its images."
        if images
        else "The images config holds paths on the build machine; `lenses export --embed-images` embeds the "
        "bytes so a copied export keeps its images."
    )
    present = {(c["config_name"], f["split"]) for c in metadata["configs"] for f in c["data_files"]}
    wanted = [(n, s) for n in ("captions", "prompts", "images") for s in SPLIT_NAMES] + [
        ("rejections", "full")
    ]
    missing = [f"`{n}/{s}`" for n, s in wanted if (n, s) not in present]
    gaps = (
        f"Left out for want of rows (`datasets` cannot load an empty split): {', '.join(missing)}."
        if missing
        else ""
    )
    return _section("Loading", "\n".join(code), note, where, *([gaps] if gaps else []))


def _licences(licences: pd.DataFrame | None) -> list[str]:
    if licences is None:
        return []
    note = "Licences the sources gave for the exported images (the card's `license` field summarises them):"
    return _section("Licences", note, _md_table(licences))


# The card's count tables as JSON next to it: the build report (lenses_data.report) shows these same
# numbers without recounting the run (recounting reads every text of four stages).
COUNTS_FILE = "card_counts.json"


def count_tables(
    run: Path, images: pd.DataFrame, captions: pd.DataFrame, prompts: pd.DataFrame, rejections: pd.DataFrame
) -> dict[str, pd.DataFrame]:
    """Table 1 for captions and prompts, the funnel, and rejections by stage and reason."""
    return {
        "captions": split_lens_table(images, captions, "Captions"),
        "prompts": split_lens_table(images, prompts, "Prompts"),
        "funnel": funnel(run, images, captions, prompts),
        "rejections": rejection_table(rejections),
    }


def write_counts(out: Path, tables: dict[str, pd.DataFrame]) -> Path:
    import json

    # to_json: numpy integers become JSON numbers (json.dumps refuses them)
    payload = {name: json.loads(t.to_json(orient="split", index=False)) for name, t in tables.items()}
    io.atomic_write_json(out / COUNTS_FILE, payload)
    return out / COUNTS_FILE


def read_counts(out: Path) -> dict[str, pd.DataFrame] | None:
    """The tables `write_counts` saved, or None for an export written before they were saved."""
    import json

    path = out / COUNTS_FILE
    if not path.exists():
        return None
    payload = json.loads(path.read_text())
    return {name: pd.DataFrame(t["data"], columns=t["columns"]) for name, t in payload.items()}


def write_card(
    out: Path,
    run: Path,
    images: pd.DataFrame,
    captions: pd.DataFrame,
    prompts: pd.DataFrame,
    rejections: pd.DataFrame,
    manifest: dict[str, Any],
    metadata: dict[str, Any] | None = None,
    licences: pd.DataFrame | None = None,
    caption_texts: pa.Table | None = None,
) -> Path:
    """Write out/README.md (front matter `metadata` for the Hub, when given) and out/figures/*.png.

    `captions` and `prompts` need only the card's columns (`export.card_frame`) when the caption
    texts come as Arrow in `caption_texts` (image_id, text); otherwise `captions` holds the texts."""
    from lenses_data.card_meta import front_matter

    figures = plot_figures(out, images, captions, prompts)
    counts = count_tables(run, images, captions, prompts, rejections)
    write_counts(out, counts)
    shares, families = idiom_tables(captions, prompts)
    lines = [front_matter(metadata)] if metadata else []
    lines += ["# Lenses dataset card", ""]
    if manifest.get("simulated"):
        lines += [
            f"> **SIMULATED.** {SIMULATED_NOTE}",
            "",
        ]
    lines += [
        f"Built {manifest['created_at']} from run `{run}`: {len(images):,} images, {len(captions):,} captions and "
        f"{len(prompts):,} image-side prompts over five lenses ({', '.join(LENS_NAMES)}).",
        "",
    ]
    lines += _loading(metadata)
    lines += _section("Captions by split and lens (cf. Table 1)", _md_table(counts["captions"]))
    lines += _section("Image-side prompts by split and lens", _md_table(counts["prompts"]))
    pictures = "\n".join(f"![{Path(f).stem.replace('_', ' ')}]({f})" for f in figures)
    lines += _section("Label balance and annotation density (cf. Figure 3)", pictures)
    lines += _section("Funnel: candidates to final texts", _md_table(counts["funnel"]))
    note = "Rows are rejection records (a text can violate several rules); Records counts distinct ids."
    lines += _section("Rejection reasons by stage", note, _md_table(counts["rejections"]))
    lines += _section(
        "Idiom usage",
        "Texts containing at least one phrase-bank idiom, per lens:",
        _md_table(shares),
        idiom_target_line(captions, prompts, _idiom_share(manifest)),
        "Idiom uses per phrase-bank family and lens (captions and prompts):",
        _md_table(families),
    )
    lines += _flags_section(captions, prompts, manifest)
    lines += _section(
        "Caption diversity", _md_table(diversity(captions if caption_texts is None else caption_texts))
    )
    lines += _compute(manifest)
    lines += _licences(licences)
    lines += _provenance(manifest)
    path = out / "README.md"
    io.atomic_write_bytes(path, "\n".join(lines).encode("utf-8"))
    return path
