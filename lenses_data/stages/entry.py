"""The one entry for running stages on a run directory: the run lock, and the settings guard inside it.

`lenses run` (the `build-dataset` flow), the per-stage flows and every stage command (`lenses
ingest`, `dedupe`, `filter`, `split`, `generate`, `rules`, `validate`, `visual-validate`, `export`)
open the run here, so none of them can write a stage whose settings differ from what is on disk,
and none runs beside another live run on the same directory. No Prefect: the flows pass their
flow-run id for the lock's owner file.

    with guarded_run(config.run_dir, flow_run_id) as run:   # a build: every stage on disk checked
        run.check_all(config)
        for stage in order:
            run.begin(stage)                                # records RUN/<stage>/_SETTINGS.json
            ...

    with guarded_stage(RULES, config):                      # one stage on its own
        run_stage(...)

`lenses export --out DIR` writes outside the run: it holds the lock (it reads the run) and checks
nothing on disk against its export settings.

A refusal (`SettingsChanged`, a `ConfigError`: exit 2; `RunDirectoryInUse`: exit 3) comes before
any stage file is written.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lenses_data.config import PipelineConfig
from lenses_data.runlock import run_directory_lock
from lenses_data.stages.registry import pipeline_order
from lenses_data.stages.settings_guard import check_run_settings, check_stage_settings, record_stage_settings


class GuardedRun:
    """A run directory held by this process; stages may start only once their settings were checked."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run = Path(run_dir)
        self._checked: dict[str, dict[str, Any]] = {}

    def check_all(self, config: PipelineConfig) -> None:
        """A build: every stage on disk must have been made with `config`'s settings."""
        self._checked = check_run_settings(self.run, config, pipeline_order(config))

    def check_stage(self, stage: str, config: PipelineConfig) -> None:
        """One stage on its own: its outputs and the next stage's must match `config`'s settings."""
        self._checked = {stage: check_stage_settings(self.run, config, pipeline_order(config), stage)}

    def begin(self, stage: str) -> None:
        """Record the stage's checked settings before its first shard is written."""
        if stage not in self._checked:
            raise RuntimeError(f"stage {stage} started before its settings were checked")
        record_stage_settings(self.run, self._checked[stage])


@contextlib.contextmanager
def guarded_run(run_dir: str | os.PathLike[str], flow_run_id: str | None = None) -> Iterator[GuardedRun]:
    """Hold the run directory (`RunDirectoryInUse` at once if a live run has it) for the block."""
    with run_directory_lock(run_dir, flow_run_id=flow_run_id):
        yield GuardedRun(run_dir)


@contextlib.contextmanager
def guarded_stage(stage: str, config: PipelineConfig, flow_run_id: str | None = None) -> Iterator[GuardedRun]:
    """One stage on `config.run_dir`: hold the lock, check the settings, record them, then the block."""
    with guarded_run(config.run_dir, flow_run_id) as run:
        run.check_stage(stage, config)
        run.begin(stage)
        yield run
