"""Ingest's append: sources added at the end of `ingest.sources` on a finished ingest are ingested
alone (`ingest.append_sources`), into new shards after the earlier ones; no earlier shard is rewritten.

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
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lenses_data import io as lio
from lenses_data.schemas import Rejection
from lenses_data.stages.ingest_rows import SUMMARY_FILE, remove_stale, shards_of
from lenses_data.stages.settings_guard import in_run_form


@dataclass
class EarlierPool:
    summary: dict[str, Any]  # the finished ingest's `_summary.json`
    added: list[str]  # the sources after its list
    earlier_ids: dict[str, str]  # image id -> source of every image ingested before


def new_sources(run: Path, earlier: list[str], sources: list[str]) -> list[str]:
    """The sources after `earlier` when `earlier` starts `sources` (paths in the run compared as
    `RUN/...`); empty when none was appended or the list changed otherwise (the settings guard's)."""
    if len(earlier) >= len(sources):
        return []
    if in_run_form(list(earlier), run) != in_run_form(list(sources[: len(earlier)]), run):
        return []
    return sources[len(earlier) :]


def earlier_pool(run: Path, stage: str, sources: list[str]) -> EarlierPool | None:
    """The finished ingest of `run` when `sources` appends to its list, else None. Finished: its
    rejections shard 0 (written last by a whole ingest) and its summary exist."""
    path = lio.stage_dir(run, stage) / SUMMARY_FILE
    if not path.exists() or not lio.rejection_path(run, stage, 0).exists():
        return None
    summary = json.loads(path.read_text())
    added = new_sources(run, summary["sources"], sources)
    if not added:
        return None
    ids: dict[str, str] = {}
    for index in range(int(summary["shards"])):
        table = pq.read_table(lio.shard_path(run, stage, index), columns=["image_id", "source"])
        ids.update(zip(table.column("image_id").to_pylist(), table.column("source").to_pylist(), strict=True))
    return EarlierPool(summary, added, ids)


def _rejection_shards(earlier: dict[str, Any], size: int) -> int:
    """Rejection files the earlier ingest wrote (summaries before appends did not say: by count)."""
    if "rejection_shards" in earlier:
        return int(earlier["rejection_shards"])
    return max(1, -(-sum(earlier["rejected"].values()) // size))


def write_appended(
    run: Path,
    stage: str,
    size: int,
    accepted: pa.Table,
    rejections: list[Rejection],
    summary: Any,
    pool: EarlierPool,
) -> None:
    """New shards and rejection files after the earlier ones, then the grown summary (the commit)."""
    first, earlier = int(pool.summary["shards"]), pool.summary
    new_shards = list(shards_of(accepted, size)) if len(accepted) else []
    for offset, rows in enumerate(new_shards):
        lio.write_table(lio.shard_path(run, stage, first + offset), rows)
    remove_stale(lio.stage_dir(run, stage), "part-", first + len(new_shards))
    first_rejections = _rejection_shards(earlier, size)
    chunks = [rejections[i : i + size] for i in range(0, len(rejections), size)]
    for offset, chunk in enumerate(chunks):
        lio.write_rejections(run, stage, first_rejections + offset, chunk)
    remove_stale(run / lio.REJECTIONS_DIR, f"{stage}-part-", first_rejections + len(chunks))
    summary.accepted, summary.shards = len(accepted), len(new_shards)
    summary.rejected = Counter(r.reason for r in rejections)
    grown = {
        "sources": [*earlier["sources"], *pool.added],
        "accepted": earlier["accepted"] + summary.accepted,
        "rejected": dict(sorted((Counter(earlier["rejected"]) + summary.rejected).items())),
        "skipped": dict(sorted((Counter(earlier["skipped"]) + summary.skipped).items())),
        "shards": first + len(new_shards),
        "rejection_shards": first_rejections + len(chunks),
    }
    lio.atomic_write_json(lio.stage_dir(run, stage) / SUMMARY_FILE, grown)  # the commit point
