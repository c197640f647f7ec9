"""Ingest's append: sources added at the end of `ingest.sources` on a finished ingest are ingested
alone, into new shards after the earlier ones; no earlier shard is rewritten.

So every later stage keeps its finished shards (shard i still holds the same images) and does only
the new ones; dedupe and split keep their earlier decisions (lenses_data.stages.rebuild). An image
of a new source with the same bytes as one ingested before is an `exact_duplicate` rejection: the
earlier copy stays, with its texts, split and answers.

Commit point: `_summary.json`, rewritten last with the grown source list. A kill before it leaves
the earlier summary, and the rerun appends the same sources again into the same file names
(deterministic: sorted by image id), removing any shard past the new count.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from lenses_data import io as lio
from lenses_data.config import PipelineConfig
from lenses_data.stages.ingest import (
    STAGE,
    SUMMARY_FILE,
    IngestSummary,
    _collect,
    _numbered,
    _process,
    _remove_stale,
    checked_sources,
)
from lenses_data.stages.ingest_rows import shards_of
from lenses_data.stages.settings_guard import in_run_form


def _earlier_summary(run: Path) -> dict | None:
    """The summary of a finished ingest (its rejections shard 0, written last, exists), else None."""
    path = lio.stage_dir(run, STAGE) / SUMMARY_FILE
    if not path.exists() or not lio.rejection_path(run, STAGE, 0).exists():
        return None
    return json.loads(path.read_text())


def new_sources(run: Path, earlier: list[str], sources: list[str]) -> list[str]:
    """The sources after `earlier` when `earlier` starts `sources` (paths in the run compared as
    `RUN/...`); empty when none was appended or the list changed otherwise (the settings guard's)."""
    if len(earlier) >= len(sources):
        return []
    if in_run_form(list(earlier), run) != in_run_form(list(sources[: len(earlier)]), run):
        return []
    return sources[len(earlier) :]


def _earlier_ids(run: Path, shards: int) -> dict[str, str]:
    """Image id -> source of every image ingested before."""
    ids: dict[str, str] = {}
    for index in range(shards):
        table = pq.read_table(lio.shard_path(run, STAGE, index), columns=["image_id", "source"])
        ids.update(zip(table.column("image_id").to_pylist(), table.column("source").to_pylist(), strict=True))
    return ids


def _rejection_shards(earlier: dict, size: int) -> int:
    """Rejection files the earlier ingest wrote (summaries before appends did not say: by count)."""
    if "rejection_shards" in earlier:
        return int(earlier["rejection_shards"])
    return max(1, -(-sum(earlier["rejected"].values()) // size))


def append_new_sources(run: Path, config: PipelineConfig) -> IngestSummary | None:
    """Ingest the sources appended since the finished ingest in `run`; None when there are none."""
    earlier = _earlier_summary(run)
    sources = checked_sources(config.ingest.sources, config)
    added = new_sources(run, earlier["sources"], sources) if earlier else []
    if not added:
        return None
    run = run.absolute()
    (lio.stage_dir(run, STAGE) / lio.SUCCESS_MARKER).unlink(missing_ok=True)
    summary = IngestSummary(run=run, sources=added)
    started = time.monotonic()
    items: list = []
    outcomes = _process(_numbered(added, config, items, summary), items, run, config)
    kept, rejections = _collect(outcomes, items, config, started, _earlier_ids(run, earlier["shards"]))
    summary.seconds = time.monotonic() - started
    size, first = config.shard_size, int(earlier["shards"])
    accepted = kept.sorted_table()
    new_shards = list(shards_of(accepted, size)) if len(accepted) else []
    for offset, rows in enumerate(new_shards):
        lio.write_table(lio.shard_path(run, STAGE, first + offset), rows)
    _remove_stale(lio.stage_dir(run, STAGE), "part-", first + len(new_shards))
    first_rejections = _rejection_shards(earlier, size)
    chunks = [rejections[i : i + size] for i in range(0, len(rejections), size)]
    for offset, chunk in enumerate(chunks):
        lio.write_rejections(run, STAGE, first_rejections + offset, chunk)
    _remove_stale(run / lio.REJECTIONS_DIR, f"{STAGE}-part-", first_rejections + len(chunks))
    summary.accepted, summary.shards = len(accepted), len(new_shards)
    summary.rejected = Counter(r.reason for r in rejections)
    grown = {
        "sources": [*earlier["sources"], *added],
        "accepted": earlier["accepted"] + summary.accepted,
        "rejected": dict(sorted((Counter(earlier["rejected"]) + summary.rejected).items())),
        "skipped": dict(sorted((Counter(earlier["skipped"]) + summary.skipped).items())),
        "shards": first + len(new_shards),
        "rejection_shards": first_rejections + len(chunks),
    }
    lio.atomic_write_json(lio.stage_dir(run, STAGE) / SUMMARY_FILE, grown)  # the commit point
    return summary
