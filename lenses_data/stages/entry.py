"""The one entry for running stages on a run directory: the run lock, and the settings guard inside it.

`lenses run` (the `build-dataset` flow), the per-stage flows and every stage command (`lenses
ingest`, `dedupe`, `filter`, `split`, `generate`, `rules`, `validate`, `visual-validate`, `export`)
open the run here, so none of them can write a stage whose settings differ from what is on disk,
and none runs beside another live run on the same directory. No Prefect: the flows pass their
flow-run id for the lock's owner file.

    with guarded_run(config.run_dir, flow_run_id) as run:   # a build: every stage on disk checked
        run.check_all(config)                               # rebuild_changed=True: redo changed stages
        for stage in order:
            run.begin(stage)                                # records RUN/<stage>/_SETTINGS.json
            ...

    summary = run_entered_stage(RULES, config)              # one stage on its own: the lock,
                                                            # the guard, setup/close, run_stage,
                                                            # then its yield judged

`run_entered_stage` is how every stage command and stage flow runs its stage: the outputs are
written first, then the stage's rejection share is judged against its `yields` band
(`lenses_data.publish.yields`), so a stage that threw away everything raises `YieldOutOfBand`
(exit 5, a Failed flow run) unless accepted. The build judges its whole funnel once instead.

`lenses export --out DIR` writes outside the run: it holds the lock (it reads the run) and checks
nothing on disk against its export settings.

A refusal (`SettingsChanged`, a `ConfigError`: exit 2; `RunDirectoryInUse`: exit 3) comes before
any stage file is written.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from lenses_data.config import ConfigError, PipelineConfig
from lenses_data.config.yields import bands_of_run
from lenses_data.publish.yields import judge_yields
from lenses_data.runlock import run_directory_lock
from lenses_data.stages.rebuild import finish_pending, replace_stages, uncommit
from lenses_data.stages.registry import open_stage, pipeline_order
from lenses_data.stages.settings_guard import (
    assess_run,
    changed_error,
    check_stage_settings,
    record_stage_settings,
)


def known_order(config: PipelineConfig) -> list[str]:
    """The pipeline's stages; `ConfigError` (exit 2, before any work) for a stage the config's
    `orchestration.stages` names that is not one of them (a typo would otherwise be ignored)."""
    order = pipeline_order(config)
    unknown = sorted(set(config.orchestration.stages) - set(order))
    if unknown:
        raise ConfigError(f"orchestration.stages: unknown stage(s) {unknown}; stages: {', '.join(order)}")
    return order


class GuardedRun:
    """A run directory held by this process; stages may start only once their settings were checked."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run = Path(run_dir)
        self._checked: dict[str, dict[str, Any]] = {}
        self._extend: set[str] = set()

    def check_all(self, config: PipelineConfig, rebuild_changed: bool = False) -> None:
        """A build: every stage on disk must have been made with `config`'s settings, or from fewer
        of its sources (extended). With `rebuild_changed`, the first stage made with other settings
        and every later one are moved aside and redone (lenses_data.stages.rebuild)."""
        order = known_order(config)
        finish_pending(self.run)
        assessment = assess_run(self.run, config, order)
        if assessment.changed and rebuild_changed:
            replace_stages(self.run, assessment.replaced, (assessment.recorded or {}).get("digest", ""))
            assessment = assess_run(self.run, config, order)
        if assessment.changed:
            raise changed_error(self.run, order, assessment)
        self._checked, self._extend = assessment.expected, set(assessment.extend)

    def check_stage(self, stage: str, config: PipelineConfig) -> None:
        """One stage on its own: its outputs and the next stage's must match `config`'s settings."""
        self._checked = {stage: check_stage_settings(self.run, config, known_order(config), stage)}

    def begin(self, stage: str) -> None:
        """Record the stage's checked settings before its first shard is written (a stage made from
        fewer sources first loses its commit point, so it runs again over the grown input)."""
        if stage not in self._checked:
            raise RuntimeError(f"stage {stage} started before its settings were checked")
        if stage in self._extend:
            uncommit(self.run, stage)
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


# How an entered stage is run: (stage name, config, the held run) -> the stage's summary.
StageRunner = Callable[[str, PipelineConfig, GuardedRun], dict[str, Any]]
# A change of the config for the run only, inside the lock (e.g. `--simulate`'s simulator).
ConfigScope = Callable[[PipelineConfig], AbstractContextManager[PipelineConfig]]


def run_in_process(stage: str, config: PipelineConfig, run: GuardedRun) -> dict[str, Any]:
    """The stage set up (`open_stage`), every shard in this process (`run_stage`), then closed."""
    from lenses_data.stages.base import run_stage

    with open_stage(stage, config) as opened:
        return run_stage(opened, run.run)


def run_entered_stage(
    stage: str,
    config: PipelineConfig,
    *,
    flow_run_id: str | None = None,
    runner: StageRunner = run_in_process,
    scope: ConfigScope | None = None,
) -> dict[str, Any]:
    """Run one stage through the entry and judge its yield; returns its summary.

    The lock and settings guard (`guarded_stage`), the config's `scope` for the run (if any), the
    `runner` (in this process by default; a stage flow maps Prefect tasks), then the judgement:
    `YieldOutOfBand` (its `result["stages"]` is `[summary]`; the outputs are already written) when
    the stage's rejection share left its `yields` band, unless `yields.accept`; an accepted breach
    is in the summary as `accepted_yields` for the caller to report.
    """
    with guarded_stage(stage, config, flow_run_id) as run:
        with scope(config) if scope else contextlib.nullcontext(config) as working:
            summary = runner(stage, working, run)
    accepted = judge_yields(
        {"run_dir": config.run_dir, "stages": [summary]}, config.yields, bands_of_run(config)
    )
    return {**summary, "accepted_yields": accepted} if accepted else summary
