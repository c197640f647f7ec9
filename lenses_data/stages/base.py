"""Running stages, and the base of the row stages.

The protocol every stage implements is `lenses_data.stages.protocol.Stage` (its declaration,
`output_settings` required, and `input_shards`/`process_shard`/`finish`/`setup`/`close`). A stage
reads the shards of its input stage and writes its own shard with the same index, plus that shard's
rejections. `process_shard` must be idempotent: it skips a shard whose output and rejection files
already exist, so a rerun after a crash repeats only unfinished shards. `finish` writes the success
marker once every shard is done. Global stages (ingest, dedupe, split, export;
`global_base.GlobalStage`) have a single "shard" 0 and do their work in it; row stages derive from
`ShardedStage` here.

`run_stage` is the one way to run a stage over its shards: a plain loop by default (the CLI's
single-stage commands, the tests), or the flows' Prefect tasks passed as `map_shards`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from lenses_data import io
from lenses_data.config import PipelineConfig
from lenses_data.models.journal import shard_journal_path
from lenses_data.models.reuse_report import client_calls, shard_calls, summary_calls
from lenses_data.models.types import AnswerClient
from lenses_data.schemas import LensText, Rejection
from lenses_data.stages.protocol import ShardStats, Stage

log = logging.getLogger(__name__)


class ColumnMismatch(ValueError):
    """A shard's columns differ from what its stage declares (`reads`, `writes`): a bug, not data."""


def check_columns(
    stage: str, frame: pd.DataFrame | pa.Table, declared: Sequence[str], what: str, *, exact: bool
) -> None:
    """Raise, naming the stage and the columns, when `frame` (a DataFrame or an Arrow table) lacks a
    declared column (or, when `exact`, has one that is not declared)."""
    columns = list(frame.column_names if isinstance(frame, pa.Table) else frame.columns)
    missing = [c for c in declared if c not in columns]
    unexpected = [c for c in columns if c not in declared] if exact else []
    if not missing and not unexpected:
        return
    parts = [f"missing {missing}"] if missing else []
    parts += [f"unexpected {unexpected}"] if unexpected else []
    raise ColumnMismatch(f"stage {stage}: {what} columns differ from its declaration: {'; '.join(parts)}")


def shard_done(run: Path, stage: str, shard: int) -> bool:
    """A shard is done when both its output and its rejections file exist (both written atomically)."""
    return io.shard_path(run, stage, shard).exists() and io.rejection_path(run, stage, shard).exists()


def input_shard_indices(run: Path, input_stage: str) -> list[int]:
    """Indices of a finished input stage's shards, from its success marker."""
    paths = io.stage_shards(run, input_stage)
    return [int(p.stem.split("-")[1]) for p in paths]


def summarize(stage: str, stats: list[ShardStats]) -> dict[str, Any]:
    reasons: dict[str, int] = {}
    for item in stats:
        for reason, count in item.reasons.items():
            reasons[reason] = reasons.get(reason, 0) + count
    return {
        "stage": stage,
        "shards": len(stats),
        "shards_skipped": sum(s.skipped for s in stats),
        "records_in": sum(s.records_in for s in stats),
        "records_out": sum(s.records_out for s in stats),
        "rejected": sum(s.rejected for s in stats),
        "reasons": dict(sorted(reasons.items())),
        "simulated_answers": sum(int(s.extra.get("simulated_answers", 0)) for s in stats),
        **summary_calls(s.extra for s in stats),  # model stages: calls sent, answers reused
    }


def log_simulated(summary: dict[str, Any], logger: logging.Logger | logging.LoggerAdapter = log) -> None:
    """One loud banner per stage whose model answers came from the simulator."""
    from lenses_data.models.progress import simulated_banner

    simulated = int(summary.get("simulated_answers") or 0)
    if simulated:
        logger.warning("%s: %s", summary.get("stage"), simulated_banner(simulated))


class StageObserver(Protocol):
    """Told what a stage run does as it happens (a progress display, a UI); never changes it."""

    def stage_started(self, stage: str, shards: int) -> None: ...

    def shard_finished(self, stage: str, stats: ShardStats) -> None: ...

    def stage_finished(self, summary: dict[str, Any]) -> None: ...


# How a runner maps `process_shard` over shard indices: yields each shard's stats as it finishes,
# in any order. The default is a plain loop in this process; the flows submit Prefect tasks.
ShardMap = Callable[[list[int]], Iterable[ShardStats]]


def run_stage(
    stage: Stage,
    run: Path,
    map_shards: ShardMap | None = None,
    observer: StageObserver | None = None,
) -> dict[str, Any]:
    """The one way to run a stage: list its shards, map `process_shard` over them, then `finish`.

    Returns the summary: the common counts (shards, skipped, in/out/rejected) and what the
    stage's `finish` adds.
    """
    run = Path(run)
    shards = stage.input_shards(run)
    log.info("stage %s: %d shard(s)", stage.name, len(shards))
    if observer:
        observer.stage_started(stage.name, len(shards))
    mapper = map_shards or (lambda indices: (stage.process_shard(run, shard) for shard in indices))
    stats: list[ShardStats] = []
    started = time.monotonic()
    for result in mapper(shards):
        stats.append(result)
        _log_shard(stage.name, result, len(stats), len(shards), time.monotonic() - started)
        if observer:
            observer.shard_finished(stage.name, result)
    stats.sort(key=lambda item: item.shard)
    summary = {**summarize(stage.name, stats), **stage.finish(run, [s.shard for s in stats], stats)}
    log.info(
        "stage %s: in=%s out=%s rejected=%s, shards %d (%d skipped, already done)",
        stage.name,
        summary.get("records_in"),
        summary.get("records_out"),
        summary.get("rejected"),
        summary.get("shards", 0),
        summary.get("shards_skipped", 0),
    )
    if observer:
        observer.stage_finished(summary)
    return summary


def _log_shard(stage: str, result: ShardStats, number: int, total: int, elapsed: float) -> None:
    log.info(
        "%s: shard %d/%d (%s) in=%d out=%d rejected=%d, %.1fs elapsed",
        stage,
        number,
        total,
        "skipped, already done" if result.skipped else "done",
        result.records_in,
        result.records_out,
        result.rejected,
        elapsed,
    )


def rejected_records(rejections: pd.DataFrame) -> int:
    """Records a shard rejected: a record failing two rules has two rejection rows (one per reason,
    both kept) but is one record of the funnel, where in = out + rejected must hold (a real-vLLM
    build had 12 texts in, 0 out and 14 rows rejected)."""
    if not len(rejections) or "record_id" not in rejections:
        return len(rejections)
    return int(rejections["record_id"].nunique())


def _rows(path: Path) -> int:
    return pq.read_metadata(path).num_rows if path.exists() else 0


class ShardedStage(Stage):
    """The public base of the row stages (rules; the model stages through `AnnotationStage`):
    shard i reads shard i of `input_stage`, writes `model` rows.

    A subclass declares what `Stage` asks (`name`, `output_settings`, ...), `input_stage`, `model`,
    the columns it `reads` (checked on the frame `load_input` returns) and `writes` (checked,
    exactly, before the shard is written), and implements `transform`; model stages use
    `self.client`, injected.
    """

    input_stage: str = ""
    model: type[BaseModel] = LensText

    def __init__(self, config: PipelineConfig, client: AnswerClient | None = None) -> None:
        super().__init__(config)
        self.client = client

    def close(self) -> None:
        """Release what the stage holds: its model client (and the client's journal), if any."""
        if self.client is not None:
            self.client.close()

    def answer_client(self) -> AnswerClient:
        """The injected model client; a stage built without one (`with_client=False`) asks no model."""
        if self.client is None:
            raise RuntimeError(f"stage {self.name}: built without a model client, cannot ask the model")
        return self.client

    def input_shards(self, run: Path) -> list[int]:
        return input_shard_indices(Path(run), self.input_stage)

    def load_input(self, run: Path, shard: int) -> pd.DataFrame:
        return io.read_shard(io.shard_path(run, self.input_stage, shard), self.input_model())

    def input_model(self) -> type[BaseModel] | None:
        return LensText

    def transform(self, run: Path, shard: int, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Input rows (what `load_input` returns) -> (records, rejections)."""
        raise NotImplementedError

    def process_shard(self, run: Path, shard: int) -> ShardStats:
        run = Path(run)
        if shard_done(run, self.name, shard):
            return self.recount(run, shard)
        frame = self.load_input(run, shard)
        check_columns(self.name, frame, self.reads, f"input shard {shard} ({self.input_stage})", exact=False)
        simulated_before = getattr(self.client, "simulated_answers", 0)
        calls_before = client_calls(self.client)
        with self.shard_journal(run, shard):
            records, rejected = self.transform(run, shard, frame)
        check_columns(self.name, records, self.writes, f"output shard {shard}", exact=True)
        io.write_shard(run, self.name, shard, records, self.model)
        io.write_rejections(run, self.name, shard, rejected)
        simulated = getattr(self.client, "simulated_answers", 0) - simulated_before
        return ShardStats(
            self.name,
            shard,
            records_in=len(frame),
            records_out=len(records),
            rejected=rejected_records(rejected),
            reasons=dict(Counter(rejected["reason"])) if len(rejected) else {},
            extra={
                **({"simulated_answers": simulated} if simulated else {}),
                **shard_calls(self.client, calls_before),
            },
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
            rejected=rejected_records(rejected),
            skipped=True,
            reasons=dict(Counter(rejected["reason"])) if len(rejected) else {},
        )

    def extra_stats(self, run: Path) -> dict[str, Any]:
        return {}

    def finish(self, run: Path, shards: list[int], stats: list[ShardStats]) -> dict[str, Any]:
        # A skipped shard was finished earlier (its files are on disk): count it from those files, so
        # a resumed stage's totals are what it wrote, whichever runner handed the stats back.
        stats = [self.recount(Path(run), s.shard) if s.skipped else s for s in stats]
        summary = summarize(self.name, stats)
        summary.update(self.extra_stats(Path(run)))
        io.mark_stage_complete(run, self.name, shards, summary)
        return summary
