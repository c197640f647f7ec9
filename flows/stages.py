"""One Prefect flow per stage: map the stage's `process_shard` over its shards, then `finish`.

A build is one flow run, its one coordinator: the task runner (threads, or a Dask/Ray cluster)
hands each shard task to one worker. The outputs on disk decide what is done: a shard whose files
exist is skipped by the stage itself, and a deleted file is rebuilt. Shard tasks therefore use no
Prefect cache: a cached result could stand in for a file that no longer exists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task, unmapped
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.common import RunParameters, artifact_key, make_task_runner, run_lock, summary_markdown
from lenses_data.config import PipelineConfig
from lenses_data.stages.base import ShardStats, log_simulated, summarize
from lenses_data.stages.registry import build_stage, open_stage


@task(
    retries=2,
    retry_delay_seconds=[2, 10],
    retry_jitter_factor=0.5,
    cache_policy=NO_CACHE,
    persist_result=False,
    task_run_name="{stage_name}-shard-{shard:05d}",
)
def process_shard_task(stage_name: str, shard: int, config: PipelineConfig) -> dict[str, Any]:
    with open_stage(stage_name, config) as stage:
        return stage.process_shard(Path(config.run_dir), shard).to_dict()


@task(retries=1, cache_policy=None, persist_result=False, task_run_name="{stage_name}-finish")
def finish_stage_task(
    stage_name: str, config: PipelineConfig, results: list[dict[str, Any]]
) -> dict[str, Any]:
    stage = build_stage(stage_name, config, with_client=False)  # finishing makes no model call
    run = Path(config.run_dir)
    stats = [ShardStats(**r) for r in results]
    # Every summary carries the common counts (shards, skipped, in/out/rejected), whatever the stage adds.
    return {**summarize(stage_name, stats), **stage.finish(run, [s.shard for s in stats], stats)}


@task(retries=1, cache_policy=None, persist_result=False, task_run_name="{stage_name}-list-shards")
def list_shards_task(stage_name: str, config: PipelineConfig) -> list[int]:
    return build_stage(stage_name, config, with_client=False).input_shards(Path(config.run_dir))


def run_stage(stage_name: str, config: PipelineConfig) -> dict[str, Any]:
    """Map one stage over its shards inside the current flow; publish its summary as an artifact."""
    logger = get_run_logger()
    shards = list_shards_task(stage_name, config)
    logger.info("stage %s: %d shard(s)", stage_name, len(shards))
    settings = config.orchestration
    shard_task = process_shard_task.with_options(
        retries=settings.task_retries, retry_delay_seconds=settings.retry_delay_s
    )
    futures = shard_task.map(unmapped(stage_name), shards, unmapped(config))
    results = [future.result() for future in futures]
    summary = finish_stage_task(stage_name, config, results)
    log_simulated(summarize(stage_name, [ShardStats(**r) for r in results]), logger)
    create_markdown_artifact(
        key=artifact_key(f"stage-{stage_name}"),
        markdown=summary_markdown(summary),
        description=f"Lenses stage {stage_name}: counts and rejection reasons",
    )
    logger.info(
        "stage %s: in=%s out=%s rejected=%s",
        stage_name,
        summary.get("records_in"),
        summary.get("records_out"),
        summary.get("rejected"),
    )
    return summary


@flow(name="stage-shards", log_prints=True)
def stage_shards_flow(stage_name: str, config: PipelineConfig) -> dict[str, Any]:
    """Subflow that owns the task runner chosen by the config (thread, Dask or Ray)."""
    return run_stage(stage_name, config)


def run_stage_with_runner(stage_name: str, config: PipelineConfig) -> dict[str, Any]:
    runner = make_task_runner(config)
    configured = stage_shards_flow.with_options(flow_run_name=f"{stage_name}-shards", task_runner=runner)
    return configured(stage_name, config)


def _stage_flow(stage_name: str):
    flow_name = stage_name.replace("_", "-")

    def stage_flow(params: RunParameters) -> dict[str, Any]:
        config = params.load()
        with run_lock(config):
            return run_stage_with_runner(stage_name, config)

    stage_flow.__name__ = f"{stage_name}_flow"
    stage_flow.__doc__ = f"Run the `{stage_name}` stage of the Lenses pipeline over every shard of a run."
    return flow(name=flow_name, log_prints=True, validate_parameters=True)(stage_flow)


ingest_flow = _stage_flow("ingest")
dedupe_flow = _stage_flow("dedupe")
filter_flow = _stage_flow("filter")
split_flow = _stage_flow("split")
generate_flow = _stage_flow("generate")
rules_flow = _stage_flow("rules")
validate_flow = _stage_flow("validate")
visual_validate_flow = _stage_flow("visual_validate")
export_flow = _stage_flow("export")
