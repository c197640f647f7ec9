"""The dataset card (README.md + figures/) written next to an export.

Sections: Table-1-style counts (split x lens), Figure-3-style plots (lens distribution, captions
per image, prompts per image), the funnel from candidate images to final texts, rejection reasons
by stage, idiom usage by lens and family, rule flags (rules a kept text breaks without being
rejected for it), caption diversity, and provenance (models, prompt hashes). Numbers come from the exported tables and the run's stage outputs, never from the paper.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from lenses_data import io
from lenses_data.config.annotate import IDIOM_TARGET_SHARE
from lenses_data.publish.card_counts import count_tables, write_counts
from lenses_data.publish.card_plots import plot_figures
from lenses_data.publish.card_texts import diversity, flag_table, idiom_tables, idiom_target_line
from lenses_data.schemas import LENS_NAMES, SPLIT_NAMES

# Said as loudly by the card and by the build report (lenses_data.publish.report).
SIMULATED_NOTE = (
    "Model answers in this export came from the built-in simulator, not from InternVL3.5-38B or "
    "Qwen2.5-32B-Instruct. Use it to check the pipeline, never to train or evaluate."
)


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


def _flags_section(captions: pd.DataFrame, prompts: pd.DataFrame, manifest: dict[str, Any]) -> list[str]:
    annotate = manifest.get("config", {}).get("annotate", {})
    # A manifest written before `word_limits` existed comes from a build whose word limits rejected.
    modes = f"Word limits: `{annotate.get('word_limits', 'reject')}`. "
    modes += f"Phrase-bank rules: `{annotate.get('idiom_rules', 'flag')}`."
    note = (
        f"{modes} These texts are in the dataset; the codes are in each text's `flags` column, so a "
        "stricter subset is one filter away (see docs/rules.md of the pipeline)."
    )
    table = flag_table(captions, prompts)
    return _section("Rule flags on kept texts", note, _md_table(table) if len(table) else "No flags.")


def _idiom_share(manifest: dict[str, Any]) -> float:
    return float(manifest.get("config", {}).get("annotate", {}).get("idiom_target_share", IDIOM_TARGET_SHARE))


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
    parts += _calls_parts(manifest.get("model_calls") or {})
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


def _calls_parts(calls: dict[str, dict[str, Any]]) -> list[str]:
    """Per model stage: the calls its answers cost and the answers reused from earlier runs."""
    from lenses_data.models.reuse_report import CALLS, reuse_sources_line, reused_total

    if not calls:
        return []
    table = pd.DataFrame(
        [
            {
                "Stage": stage,
                "Model calls sent": int(item.get(CALLS, 0)),
                "Answers reused": reused_total(item),
            }
            for stage, item in calls.items()
        ]
    )
    sources = reuse_sources_line({"stage": stage, **item} for stage, item in calls.items())
    return [
        "Model calls per stage (from the journals):",
        _md_table(table),
        *([sources + "."] if sources else []),
    ]


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
    funnel_steps: list | None = None,
) -> Path:
    """Write out/README.md (front matter `metadata` for the Hub, when given) and out/figures/*.png.

    `captions` and `prompts` need only the card's columns (`export_texts.card_frame`) when the caption
    texts come as Arrow in `caption_texts` (image_id, text); otherwise `captions` holds the texts.
    `funnel_steps`: the run's stages' funnel rows (`card_counts.declared_steps`; default the declared)."""
    from lenses_data.publish.card_meta import front_matter

    figures = plot_figures(out, images, captions, prompts)
    counts = count_tables(run, images, captions, prompts, rejections, funnel_steps)
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
