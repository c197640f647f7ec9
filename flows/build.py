"""The parent `build-dataset` flow: every stage in order, then optionally hand off to training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from pydantic import Field

from flows.common import RunParameters, funnel_markdown, run_lock
from flows.stages import run_stage_with_runner
from lenses_data.config import PipelineConfig
from lenses_data.stages.registry import pipeline_order


class BuildParameters(RunParameters):
    """Parameters of `build-dataset` as shown in the Prefect UI."""

    sample: bool = Field(
        False, description="Build the bundled sample pool into <run_dir>/sample and use it as the only source"
    )
    simulate: bool = Field(
        False, description="Answer every model call with the built-in simulator (dry run, marked simulated)"
    )
    stop_after: str | None = Field(None, description="Stop after this stage (e.g. 'dedupe'); empty: run all")
    train_deployment: str | None = Field(
        None, description="After export, start this deployment (e.g. 'train-retriever/h200x8')"
    )


def _prepare_sources(config: PipelineConfig, sample: bool) -> PipelineConfig:
    if not sample:
        return config
    from lenses_data.sample import build_sample_pool, sample_sources

    pool = Path(config.run_dir) / "sample"
    build_sample_pool(pool)
    ingest = config.ingest.model_copy(update={"sources": sample_sources(pool)})
    return config.model_copy(update={"ingest": ingest})


def _hand_off(deployment: str, export_dir: str) -> str:
    from prefect.deployments import run_deployment

    # The training flow takes one pydantic parameter; its production recipe is training/configs/h200x8.yaml.
    parameters = {"params": {"config_path": "h200x8", "export_dir": export_dir}}
    flow_run = run_deployment(name=deployment, parameters=parameters, timeout=0)
    return str(flow_run.id)


def run_all_stages(config: PipelineConfig, stop_after: str | None = None) -> list[dict[str, Any]]:
    order = pipeline_order(config)
    if stop_after and stop_after not in order:
        raise ValueError(f"stop_after={stop_after!r} is not a stage; stages: {', '.join(order)}")
    summaries = []
    for stage_name in order:
        summaries.append(run_stage_with_runner(stage_name, config))
        if stage_name == stop_after:
            break
    return summaries


@flow(name="build-dataset", log_prints=True, validate_parameters=True)
def build_dataset(params: BuildParameters) -> dict[str, Any]:
    """Build the Lenses dataset: ingest, dedupe, filter, split, generate, rule checks, validation, export."""
    config = params.load()
    with run_lock(config):
        return _build(params, _prepare_sources(config, params.sample))


def _build(params: BuildParameters, config: PipelineConfig) -> dict[str, Any]:
    logger = get_run_logger()
    if params.simulate:
        from lenses_data.models.dryrun import simulated_models

        with simulated_models(config) as simulated_config:
            logger.warning("SIMULATED RUN: every model answer comes from the built-in simulator")
            summaries = run_all_stages(simulated_config, params.stop_after)
    else:
        summaries = run_all_stages(config, params.stop_after)
    create_markdown_artifact(
        key="build-dataset-funnel", markdown=funnel_markdown(summaries), description="Lenses build funnel"
    )
    result: dict[str, Any] = {"run_dir": config.run_dir, "stages": summaries, "simulated": params.simulate}
    export_dir = str(Path(config.run_dir) / "export")
    deployment = params.train_deployment or config.orchestration.train_deployment
    if deployment and params.stop_after in (None, "export"):
        result["train_flow_run"] = _hand_off(deployment, export_dir)
        logger.info("handed off to %s (flow run %s)", deployment, result["train_flow_run"])
    return result
