"""The build report: one static folder, `report/index.html` plus `thumbs/*.webp`, to look at a build.

Sections: a paged gallery of N exported images with their texts by lens, near-duplicate groups,
rejections by stage and reason with examples, and the funnel and Table-1 counts of the dataset
card (read from the card's `card_counts.json`: one source for both). The page opens from disk and
loads nothing from the network; filters (lens, split, reason) are plain JavaScript in the file.
What it reads is chosen so that time and size follow N, not the dataset (`select.py`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pandas as pd

from lenses_data import io
from lenses_data.config.pipeline import GENERATE
from lenses_data.publish import card, card_counts
from lenses_data.publish.report import dupes_page, page, select
from lenses_data.publish.report.dupes import dedupe_view
from lenses_data.publish.report.thumbs import make_thumbnails

REPORT_DIR = "report"
INDEX = "index.html"


def _counts(run: Path, export: Path) -> dict[str, pd.DataFrame]:
    """The card's tables as the export saved them; an older export: the card's functions on the
    columns they need."""
    saved = card_counts.read_counts(export)
    if saved is not None:
        return saved
    images = pd.read_parquet(export / "images.parquet", columns=["image_id", "split"])
    texts = [
        pd.read_parquet(export / f, columns=["image_id", "split", "lens"])
        for f in ("captions.parquet", "prompts.parquet")
    ]
    rejections = pd.read_parquet(export / "rejections.parquet", columns=["stage", "reason", "record_id"])
    return card_counts.count_tables(run, images, *texts, rejections)


def _gallery(export: Path, n: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    images, total = select.sample_images(export, n, seed)
    return images, select.sample_texts(export, images["image_id"].tolist()), total


def _rejections(run: Path, export: Path, counts: pd.DataFrame, k: int) -> tuple[dict, pd.DataFrame]:
    """Up to k examples per stage and reason, and the rejected texts they name (by text id)."""
    keys = [(str(s), str(r)) for s, r in counts[["Stage", "Reason"]].itertuples(index=False)]
    found = select.rejection_examples(export, keys, max(k, select.CANDIDATES) if k else 0)
    candidates = [i for rows in found.values() for i in rows["record_id"]]
    generated = select.shards(run, GENERATE)
    where = select.locate(generated, "text_id", candidates)
    chosen = select.choose_examples(found, where, k)
    shown = [i for rows in chosen.values() for i in rows["record_id"]]
    return chosen, select.rejected_texts(generated, where, shown)


def _thumbnails(run: Path, out: Path, images: pd.DataFrame, others: set[str]) -> dict[str, str]:
    """Thumbnails of the gallery (paths from the export) and of the other images shown (paths from
    ingest, read once with the gallery's licences, which the export's images table lacks)."""
    ingested = select.ingest_rows(run, set(images["image_id"]) | others)
    licences = ingested["licence"].dropna().to_dict()
    images["licence"] = [licences.get(i) for i in images["image_id"]]
    paths = {
        **ingested["path"].dropna().to_dict(),
        **dict(zip(images["image_id"], images["path"], strict=True)),
    }
    return make_thumbnails({i: paths[i] for i in set(images["image_id"]) | others if i in paths}, out)


def _header(manifest: dict[str, Any], run: Path, total: int, shown: int, seed: int) -> str:
    tables = manifest.get("tables", {})
    return (
        f"<h1>Lenses build report</h1><p>Run <code>{page.esc(run)}</code>, exported "
        f"{page.esc(manifest.get('created_at', '?'))}: {total:,} images, "
        f"{int(tables.get('captions.parquet', 0)):,} captions, {int(tables.get('prompts.parquet', 0)):,} prompts. "
        f"The gallery shows {shown:,} of them (consecutive image ids from a seeded start, seed {seed}: "
        "a uniform sample, since ids are content hashes).</p>"
        '<nav><a href="#gallery">Images</a><a href="#dedupe">Near-duplicates</a>'
        '<a href="#rejections">Rejections</a><a href="#counts">Funnel and Table 1</a></nav>'
    )


def _counts_html(counts: dict[str, pd.DataFrame]) -> str:
    return (
        '<section id="counts"><h2>Funnel and counts (the dataset card\'s numbers)</h2>'
        "<h3>Funnel: candidates to final texts</h3>"
        + page.table_html(counts["funnel"])
        + "<h3>Captions by split and lens (cf. Table 1)</h3>"
        + page.table_html(counts["captions"])
        + "<h3>Image-side prompts by split and lens</h3>"
        + page.table_html(counts["prompts"])
        + "<h3>Rejection reasons by stage</h3>"
        + page.table_html(counts["rejections"])
        + "</section>"
    )


def write_report(
    run: str | Path,
    export: str | Path | None = None,
    out: str | Path | None = None,
    *,
    n: int = 200,
    examples: int = 5,
    groups: int = 24,
    seed: int = 0,
) -> dict[str, Any]:
    """Write `out/index.html` (default: EXPORT/report, EXPORT default: RUN/export) and its thumbnails.
    Returns the page's path, what it shows, the seconds it took and the bytes of the page and the
    thumbnails it shows."""
    started = time.perf_counter()
    run = Path(run)
    export = Path(export) if export else run / "export"
    out = Path(out) if out else export / REPORT_DIR
    manifest = json.loads((export / "manifest.json").read_text())
    counts = _counts(run, export)
    images, texts, total = _gallery(export, n, seed)
    dedupe = dedupe_view(run, groups)
    found, rejected = _rejections(run, export, counts["rejections"], examples)
    others = {m["image_id"] for g in dedupe.groups for m in g["members"]}
    others |= {i for f in found.values() for i in f["image_id"] if isinstance(i, str)}
    thumbs = _thumbnails(run, out, images, others)
    by_image: dict[str, list[dict[str, Any]]] = {}
    for row in texts.to_dict("records"):
        by_image.setdefault(row["image_id"], []).append(row)
    items = "".join(
        page.gallery_item(img, by_image.get(img["image_id"], []), thumbs.get(img["image_id"]))
        for img in images.to_dict("records")
    )
    reasons = "".join(
        page.reason_html(c, found.get((str(c["Stage"]), str(c["Reason"]))), rejected, thumbs)
        for c in counts["rejections"].to_dict("records")
    )
    body = (
        page.filters_html(sorted({str(r) for r in counts["rejections"]["Reason"]}))
        + f'<section id="gallery"><h2>Images ({len(images):,} of {total:,})</h2><div class="grid">{items}</div></section>'
        + dupes_page.section_html(dedupe, thumbs)
        + f'<section id="rejections"><h2>Rejections by stage and reason</h2>{reasons}</section>'
        + _counts_html(counts)
    )
    banner = f"SIMULATED. {card.SIMULATED_NOTE}" if manifest.get("simulated") else None
    html = page.page_html(
        "Lenses build report", banner, _header(manifest, run, total, len(images), seed), body
    )
    index = out / INDEX
    io.atomic_write_bytes(index, html.encode("utf-8"))
    size = index.stat().st_size + sum((out / rel).stat().st_size for rel in set(thumbs.values()))
    return {
        "index": str(index),
        "images": len(images),
        "groups": len(dedupe.groups),
        "reasons": len(counts["rejections"]),
        "seconds": time.perf_counter() - started,
        "bytes": size,
    }
