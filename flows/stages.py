"""One Prefect flow per stage: `lenses_data.stages.base.run_stage` with one Prefect task per shard
(or per group of shards, `orchestration.shards_per_task`).

A build is one flow run, its one coordinator: the task runner (threads, or a Dask/Ray cluster)
hands each shard task to one worker. The outputs on disk decide what is done: a shard whose files
exist is skipped by the stage itself (its task ends in a Completed state named "Skipped"), and a
deleted file is rebuilt. Shard tasks therefore use no Prefect cache: a cached result could stand
in for a file that no longer exists. Only transient errors are retried (`flows.failures`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task, unmapped
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed
from prefect.states import Completed, Failed

from flows.common import (
    current_flow_run_id,
    load_run_config,
    make_task_runner,
    run_label,
    run_name_from_parameters,
)
from flows.failures import FLOW_RETRIES, explain, mark_stage, retry_transient, run_explained
from flows.observers import Broadcast
from flows.reporting import in_flow_run, publish_stage_table, start_progress, update_progress
from flows.runlogs import lenses_logs_to_run
from flows.worker_stages import release_worker_stages, worker_stage
from lenses_data.config import OrchestrationConfig, PipelineConfig, deep_merge
from lenses_data.config.pipeline import BUILTIN_STAGES, spec_of
from lenses_data.stages.base import ShardStats, log_simulated, run_stage
from lenses_data.stages.entry import GuardedRun, run_entered_stage
from lenses_data.stages.registry import build_stage

# No `retries` or `retry_delay_seconds` here: every submission sets both from the config
# (`shard_task_options`), the one place they are written.
_SHARD_TASK = dict(
    retry_jitter_factor=0.5,
    retry_condition_fn=retry_transient,
    cache_policy=NO_CACHE,
    persist_result=False,
)


def _process(stage_name: str, shard: int, config: PipelineConfig, token: str) -> ShardStats:
    with worker_stage(stage_name, config, token) as stage:
        return stage.process_shard(Path(config.run_dir), shard)


@task(task_run_name="{stage_name}-shard-{shard:05d}", **_SHARD_TASK)
def process_shard_task(stage_name: str, shard: int, config: PipelineConfig, token: str) -> Any:
    """One shard on this worker's stage (set up once per worker and stage run, `flows.worker_stages`)."""
    stats = _process(stage_name, shard, config, token)
    if stats.skipped:  # outputs already on disk: say so in the UI instead of a plain "Completed"
        return Completed(name="Skipped", message="outputs already on disk", data=[stats.to_dict()])
    return [stats.to_dict()]


@task(task_run_name="{stage_name}-shards-{first:05d}-{last:05d}", **_SHARD_TASK)
def process_shard_batch_task(
    stage_name: str, shards: list[int], config: PipelineConfig, token: str, first: int, last: int
) -> Any:
    """Several shards, one after another, in one task run (`orchestration.shards_per_task`).

    Each shard is still written and skipped on its own, so a retry redoes only the unfinished ones."""
    stats = [_process(stage_name, shard, config, token) for shard in shards]
    rows = [item.to_dict() for item in stats]
    if all(item.skipped for item in stats):
        return Completed(name="Skipped", message="outputs already on disk", data=rows)
    return rows


def shard_task_options(settings: OrchestrationConfig) -> dict[str, Any]:
    """The shard tasks' retries and tags, from the config (`orchestration.task_retries`,
    `retry_delay_s`, `tags`; a stage's own are in `settings` from `OrchestrationConfig.for_stage`)."""
    options: dict[str, Any] = {
        "retries": settings.task_retries,
        "retry_delay_seconds": settings.retry_delay_s,
    }
    if settings.tags:
        options["tags"] = set(settings.tags)
    return options


def prefect_shard_map(
    stage_name: str, config: PipelineConfig, token: str, progress_id: str | None
) -> Callable[[list[int]], Iterator[ShardStats]]:
    """`map_shards` for `run_stage`: one Prefect task per shard, or per group of shards, on the
    flow's task runner, with the stage's own retries and grouping (`orchestration.stages`)."""
    settings = config.orchestration.for_stage(stage_name)
    options = shard_task_options(settings)
    # Retries: the config's `orchestration.stages.<stage>.task_retries`, else the stage's declared
    # default (a user stage's `retries` in its entry), else the global `orchestration.task_retries`.
    own = config.orchestration.stages.get(stage_name)
    declared = spec_of(stage_name, config).retries
    if declared is not None and (own is None or own.task_retries is None):
        options["retries"] = declared

    def submit(batches: list[list[int]]) -> list:
        if all(len(batch) == 1 for batch in batches):
            single = process_shard_task.with_options(**options)
            shards = [batch[0] for batch in batches]
            return single.map(unmapped(stage_name), shards, unmapped(config), unmapped(token))
        grouped = process_shard_batch_task.with_options(**options)
        firsts, lasts = [b[0] for b in batches], [b[-1] for b in batches]
        return grouped.map(unmapped(stage_name), batches, unmapped(config), unmapped(token), firsts, lasts)

    def map_shards(shards: list[int]) -> Iterator[ShardStats]:
        done = 0
        for future in as_completed(submit(settings.shard_batches(shards))):  # progress as tasks finish
            for row in future.result():
                done += 1
                yield ShardStats(**row)
            update_progress(progress_id, stage_name, done, len(shards))

    return map_shards


def run_stage_in_flow(
    stage_name: str, config: PipelineConfig, progress_id: str | None = None
) -> dict[str, Any]:
    """Map one stage over its shards inside the current flow; returns the stage summary."""
    stage = build_stage(stage_name, config, with_client=False)  # listing and finishing ask no model
    token = uuid.uuid4().hex
    try:
        return run_stage(
            stage,
            Path(config.run_dir),
            prefect_shard_map(stage_name, config, token, progress_id),
            observer=Broadcast(),
        )
    finally:
        release_worker_stages(token)


@flow(name="stage-shards", log_prints=True, retries=FLOW_RETRIES)
def stage_shards_flow(stage_name: str, config: PipelineConfig, progress_id: str | None = None) -> Any:
    """Subflow that owns the task runner chosen by the config (thread, Dask or Ray).

    A failure is returned as a Failed state, not raised, so this run does not log a second
    traceback; the caller gets the original exception back.
    """
    try:
        return run_stage_in_flow(stage_name, config, progress_id)
    except Exception as error:
        mark_stage(error, stage_name)
        return Failed(message=explain(error), data=error)


def run_stage_with_runner(stage_name: str, config: PipelineConfig, run: GuardedRun) -> dict[str, Any]:
    """Run one stage in its subflow; its table, banner and progress go on the calling flow run.

    `run` is the run directory held through `lenses_data.stages.entry`, its settings checked: the
    stage's are recorded before its first shard."""
    run.begin(stage_name)
    runner = make_task_runner(config, stage_name)  # the stage's own max_workers, if it has one
    progress = start_progress(config.run_dir, stage_name)
    configured = stage_shards_flow.with_options(
        flow_run_name=f"{run_label(config.run_dir)}-{stage_name}-shards", task_runner=runner
    )
    summary = configured(stage_name, config, str(progress) if progress else None)
    publish_stage_table(config.run_dir, summary)
    if in_flow_run():  # one banner per stage, on the run a user opened
        log_simulated(summary, get_run_logger())
    else:
        log_simulated(summary)
    return summary


STAGE_FLOW_DOC = """Run the `{stage}` stage of the Lenses pipeline over every shard of a run: {help}.

    Args:
        config_path: YAML config file on the worker (e.g. configs/production.yaml); empty: built-in defaults.
        run_dir: Run directory; overrides the config's run_dir (and LENSES__RUN_DIR).
        overrides: Config fields over the file and the LENSES__ environment, nested as in the YAML,
            e.g. {{"shard_size": 500}}.
        accept_yield: Accept a rejection share outside the stage's band (`yields.accept`): the run
            completes with a warning; otherwise it ends Failed, the reasons' counts in its message
            (the outputs are written either way).
    """


def _stage_flow(stage_name: str, help_text: str | None = None):
    help_text = help_text or spec_of(stage_name).help  # the declared stage's one line
    flow_name = stage_name.replace("_", "-")

    def stage_flow(
        config_path: str | None = None,
        run_dir: str | None = None,
        overrides: dict[str, Any] | None = None,
        accept_yield: bool = False,
    ) -> Any:
        def body() -> dict[str, Any]:
            accepting = {"yields": {"accept": True}} if accept_yield else {}
            config = load_run_config(config_path, run_dir, deep_merge(overrides or {}, accepting))
            # The lock, its outputs' and the next stage's settings (as `lenses <stage>`), the
            # shards on this flow's task runner, then the stage's yield judged.
            summary = run_entered_stage(
                stage_name, config, flow_run_id=current_flow_run_id(), runner=run_stage_with_runner
            )
            for line in summary.get("accepted_yields", ()):
                get_run_logger().warning("accepted (yields.accept): %s", line)
            return summary

        with lenses_logs_to_run():
            return run_explained(body)

    stage_flow.__name__ = f"{stage_name}_flow"
    stage_flow.__doc__ = STAGE_FLOW_DOC.format(stage=stage_name, help=help_text)
    return flow(
        name=flow_name,
        log_prints=True,
        retries=FLOW_RETRIES,
        validate_parameters=True,
        flow_run_name=run_name_from_parameters(stage_name.replace("_", "-")),
    )(stage_flow)


# One flow per declared stage, as a module attribute `<stage>_flow`: Prefect's entrypoint
# (`flows/stages.py:<stage>_flow`, the deployments of prefect.yaml).
for _spec in BUILTIN_STAGES:
    globals()[f"{_spec.name}_flow"] = _stage_flow(_spec.name)
