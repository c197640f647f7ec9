"""The base of the global stages (ingest, dedupe, split, export): one "shard" 0 that sees the whole
input at once, because its work compares every record with every other (dedupe, split) or writes
one artefact from all of them (ingest's sources, export's tables).

It fills in the parts of the `lenses_data.stages.base.Stage` protocol every global stage shares:
the config, the single shard, the skip of a shard finished earlier, and `setup`/`close` (no model
client to release). A subclass writes `run_shard` (the work) and `finish` (its summary).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lenses_data import io
from lenses_data.config import PipelineConfig
from lenses_data.stages.base import ShardStats, shard_done

# The one shard index a global stage has.
GLOBAL_SHARD = 0


class GlobalStage:
    """A stage with a single shard 0. `reads`/`writes` are the columns checked on its input and
    output frames (never config paths or file names)."""

    name: str = ""
    input_stage: str | None = None
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    # True: listing the shard raises a clear error unless `input_stage` has finished.
    needs_finished_input: bool = False
    # True: a shard whose output and rejections exist is skipped (a rerun repeats only unfinished work).
    skips_finished_shard: bool = True

    def __init__(self, config: PipelineConfig) -> None:
        self.config = config

    def setup(self) -> None:
        """Nothing to open: a global stage asks no model."""

    def close(self) -> None:
        """Nothing to release: a global stage holds no model client."""

    def __enter__(self) -> GlobalStage:
        self.setup()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def input_shards(self, run: Path) -> list[int]:
        if self.needs_finished_input and self.input_stage:
            io.stage_shards(run, self.input_stage)  # raises a clear error when it has not finished
        return [GLOBAL_SHARD]

    def process_shard(self, run: Path, shard: int) -> ShardStats:
        run = Path(run)
        if self.skips_finished_shard and shard_done(run, self.name, shard):
            return ShardStats(stage=self.name, shard=shard, skipped=True)
        return self.run_shard(run, shard)

    def run_shard(self, run: Path, shard: int) -> ShardStats:
        """The stage's work over its whole input; returns the shard's stats."""
        raise NotImplementedError

    def finish(self, run: Path, shards: list[int], stats: list[ShardStats]) -> dict[str, Any]:
        raise NotImplementedError
