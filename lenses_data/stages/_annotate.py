"""Plumbing shared by the annotation stages (filter, generate, rules, validate, visual_validate).

Each stage is a class following `lenses_data.stages.base.Stage` (reads the input stage's shard
with the same index, writes its own shard and that shard's rejections, skips finished shards),
around a pure `process_shard(df, client, config) -> (records_df, rejections_df)` function.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
from pydantic import BaseModel

from lenses_data import io
from lenses_data.models.journal import shard_journal_path
from lenses_data.schemas import LensText, Rejection, SplitAssignment, column_names
from lenses_data.stages.base import ShardStats, input_shard_indices, shard_done, summarize

ShardFn = Callable[[pd.DataFrame], tuple[pd.DataFrame, pd.DataFrame]]
TEXT_COLUMNS: tuple[str, ...] = tuple(column_names(LensText))


def rejection(
    stage: str,
    record_id: str,
    reason: str,
    message: str,
    *,
    image_id: str | None = None,
    raw: str | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    return Rejection(
        stage=stage,
        record_id=record_id,
        reason=reason,
        message=message,
        image_id=image_id,
        raw=raw,
        source=source,
    ).model_dump()


def rejections_frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=column_names(Rejection))


def concat_rejections(*frames: pd.DataFrame) -> pd.DataFrame:
    parts = [f for f in frames if len(f)]
    return pd.concat(parts, ignore_index=True) if parts else rejections_frame([])


def records_frame(rows: Iterable[dict[str, Any]], model: type[BaseModel]) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=column_names(model))


def failed_result_rejection(stage: str, record_id: str, result: Any, image_id: str | None) -> dict[str, Any]:
    """A failed ModelResult as a rejection row: its reason code, message and raw answer kept."""
    return rejection(
        stage,
        record_id,
        result.error_code or "model_error",
        f"{result.error_message or 'model call failed'} (after {result.attempts} attempt(s))",
        image_id=image_id,
        raw=result.raw,
    )


def split_lookup(run: Path) -> dict[str, str]:
    """image_id -> split, for the images the split stage selected."""
    frame = io.read_stage(run, "split", SplitAssignment)
    return dict(zip(frame["image_id"], frame["split"].astype(str), strict=True))


def ingest_paths(run: Path, shard: int) -> dict[str, str]:
    """image_id -> local path, from the ingest shard with the same index (shards stay aligned)."""
    path = io.shard_path(run, "ingest", shard)
    if path.exists():
        frame = io.read_shard(path)
    else:  # shard numbering changed upstream: fall back to the whole stage
        frame = io.read_stage(run, "ingest")
    return dict(zip(frame["image_id"], frame["path"], strict=True))


def lens_text_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    rows = frame.to_dict(orient="records")
    for row in rows:
        row["lens"] = str(row["lens"])
        row["split"] = None if row.get("split") is None or pd.isna(row["split"]) else str(row["split"])
        row["idioms"] = list(row.get("idioms") if row.get("idioms") is not None else [])
        if row.get("original_text") is not None and pd.isna(row["original_text"]):
            row["original_text"] = None
    return rows


def _rows(path: Path) -> int:
    return pq.read_metadata(path).num_rows if path.exists() else 0


class ShardedStage:
    """A stage whose shard i reads shard i of `input_stage` and writes `model` rows."""

    name: str = ""
    input_stage: str = ""
    model: type[BaseModel] = LensText
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    def __init__(self, config: Any, client: Any = None) -> None:
        self.config = config
        self.client = client

    def input_shards(self, run: Path) -> list[int]:
        return input_shard_indices(Path(run), self.input_stage)

    def load_input(self, run: Path, shard: int) -> pd.DataFrame:
        return io.read_shard(io.shard_path(run, self.input_stage, shard), self.input_model())

    def input_model(self) -> type[BaseModel] | None:
        return LensText

    def transform(self, run: Path, shard: int, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        raise NotImplementedError

    def process_shard(self, run: Path, shard: int) -> ShardStats:
        run = Path(run)
        if shard_done(run, self.name, shard):
            return self.recount(run, shard)
        frame = self.load_input(run, shard)
        simulated_before = getattr(self.client, "simulated_answers", 0)
        with self.shard_journal(run, shard):
            records, rejected = self.transform(run, shard, frame)
        io.write_shard(run, self.name, shard, records, self.model)
        io.write_rejections(run, self.name, shard, rejected)
        simulated = getattr(self.client, "simulated_answers", 0) - simulated_before
        return ShardStats(
            self.name,
            shard,
            records_in=len(frame),
            records_out=len(records),
            rejected=len(rejected),
            reasons=dict(Counter(rejected["reason"])) if len(rejected) else {},
            extra={"simulated_answers": simulated} if simulated else {},
        )

    def shard_journal(self, run: Path, shard: int) -> contextlib.AbstractContextManager[None]:
        """The model client journals this shard's answers to its own file (model stages only)."""
        opener = getattr(self.client, "shard_journal", None)
        if opener is None:
            return contextlib.nullcontext()
        return opener(shard_journal_path(run, self.name, shard))

    def recount(self, run: Path, shard: int) -> ShardStats:
        """Stats of a shard finished earlier, read back from its files (so resumed totals are right)."""
        rejected = io.read_shard(io.rejection_path(run, self.name, shard), Rejection)
        return ShardStats(
            self.name,
            shard,
            records_in=len(self.load_input(run, shard)),  # the stage's own view of its input (e.g. filtered)
            records_out=_rows(io.shard_path(run, self.name, shard)),
            rejected=len(rejected),
            skipped=True,
            reasons=dict(Counter(rejected["reason"])) if len(rejected) else {},
        )

    def extra_stats(self, run: Path) -> dict[str, Any]:
        return {}

    def finish(self, run: Path, shards: list[int], stats: list[ShardStats]) -> dict[str, Any]:
        # Shards skipped by another runner (e.g. the flows' lease wrapper) carry no counts: recount.
        stats = [self.recount(Path(run), s.shard) if s.skipped else s for s in stats]
        summary = summarize(self.name, stats)
        summary.update(self.extra_stats(Path(run)))
        io.mark_stage_complete(run, self.name, shards, summary)
        return summary
