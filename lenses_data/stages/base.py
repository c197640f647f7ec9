"""The stage protocol shared by the CLI, the Prefect flows and the tests.

A stage reads the shards of its input stage and writes its own shard with the same index, plus
that shard's rejections. `process_shard` must be idempotent: it skips a shard whose output and
rejection files already exist, so a rerun after a crash repeats only unfinished shards.
`finish` writes the success marker once every shard is done. Global stages (dedupe, split,
export) have a single "shard" 0 and do their work in it.

Flows map `process_shard` over `input_shards(run)` as Prefect tasks; `run_stage_locally` is the
same thing as a plain loop, for the CLI and the tests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from lenses_data import io

log = logging.getLogger(__name__)


@dataclass
class ShardStats:
    """What one shard of one stage did: every input record is either out or rejected."""

    stage: str
    shard: int
    records_in: int = 0
    records_out: int = 0
    rejected: int = 0
    skipped: bool = False
    reasons: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "shard": self.shard,
            "records_in": self.records_in,
            "records_out": self.records_out,
            "rejected": self.rejected,
            "skipped": self.skipped,
            "reasons": dict(self.reasons),
            "extra": dict(self.extra),
        }


class Stage(Protocol):
    name: str
    input_stage: str | None
    reads: tuple[str, ...]
    writes: tuple[str, ...]

    def input_shards(self, run: Path) -> list[int]: ...

    def process_shard(self, run: Path, shard: int) -> ShardStats: ...

    def finish(self, run: Path, shards: list[int], stats: list[ShardStats]) -> dict[str, Any]: ...


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
    }


def log_simulated(summary: dict[str, Any], logger: logging.Logger | logging.LoggerAdapter = log) -> None:
    """One loud banner per stage whose model answers came from the simulator."""
    from lenses_data.models.progress import simulated_banner

    simulated = int(summary.get("simulated_answers") or 0)
    if simulated:
        logger.warning("%s: %s", summary.get("stage"), simulated_banner(simulated))


def run_stage_locally(
    stage: Stage, run: Path, progress: Callable[[ShardStats], None] | None = None
) -> dict[str, Any]:
    """Run every shard of a stage in this process, then mark it complete."""
    shards = stage.input_shards(run)
    stats = []
    started = time.monotonic()
    for number, shard in enumerate(shards, 1):
        result = stage.process_shard(run, shard)
        stats.append(result)
        log.info(
            "%s: shard %d/%d (%s) in=%d out=%d rejected=%d, %.1fs elapsed",
            stage.name,
            number,
            len(shards),
            "skipped, already done" if result.skipped else "done",
            result.records_in,
            result.records_out,
            result.rejected,
            time.monotonic() - started,
        )
        if progress:
            progress(result)
    summary = stage.finish(run, shards, stats)
    log_simulated(summarize(stage.name, stats))
    return summary
