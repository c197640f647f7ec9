"""The base of the global stages (ingest, dedupe, split, export): one "shard" 0 that sees the whole
input at once, because its work compares every record with every other (dedupe, split) or writes
one artefact from all of them (ingest's sources, export's tables).

It fills in the parts of the `lenses_data.stages.protocol.Stage` protocol every global stage shares:
the single shard and the skip of a shard finished earlier (no model client: `setup`/`close` are the
protocol's no-ops). A subclass declares what `Stage` asks (`name`, `output_settings`, ...) and
writes `run_shard` (the work) and `finish` (its summary).
"""

from __future__ import annotations

import abc
from pathlib import Path

from lenses_data import io
from lenses_data.stages.base import shard_done
from lenses_data.stages.protocol import ShardStats, Stage

# The one shard index a global stage has.
GLOBAL_SHARD = 0


class GlobalStage(Stage):
    """A stage with a single shard 0. `reads`/`writes` are the columns checked on its input and
    output frames (never config paths or file names)."""

    # True: listing the shard raises a clear error unless `input_stage` has finished.
    needs_finished_input: bool = False
    # True: a shard whose output and rejections exist is skipped (a rerun repeats only unfinished work).
    skips_finished_shard: bool = True

    def input_shards(self, run: Path) -> list[int]:
        if self.needs_finished_input and self.input_stage:
            io.stage_shards(run, self.input_stage)  # raises a clear error when it has not finished
        return [GLOBAL_SHARD]

    def process_shard(self, run: Path, shard: int) -> ShardStats:
        run = Path(run)
        if self.skips_finished_shard and shard_done(run, self.name, shard):
            return ShardStats(stage=self.name, shard=shard, skipped=True)
        return self.run_shard(run, shard)

    @abc.abstractmethod
    def run_shard(self, run: Path, shard: int) -> ShardStats:
        """The stage's work over its whole input; returns the shard's stats (`finish`, the
        protocol's, is the subclass's too: its summary)."""
