"""The parent `build-dataset` flow: every stage in order, then optionally hand off to training.

Its parameters are flat (one form field each in the UI; `--param run_dir=...` from CI keeps the
deployment's other parameters) and strict: `prefect deployment run` refuses an unknown name and
lists the valid ones, the server refuses a wrong type or a `stop_after` that is not a stage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from prefect import flow, get_run_logger

from flows.common import current_flow_run_id, load_run_config, one_cluster_per_build, run_name_from_parameters
from flows.failures import FLOW_RETRIES, ParameterError, run_explained
from flows.reporting import publish_funnel
from flows.runlogs import lenses_logs_to_run
from flows.stages import run_stage_with_runner
from lenses_data.config import PipelineConfig
from lenses_data.models.reuse import check_sources
from lenses_data.stages.entry import GuardedRun, guarded_run
from lenses_data.stages.registry import STAGES, pipeline_order

# Every registered stage, in order: a typo is refused when the run is created.
StageName = Literal[tuple(STAGES)]


def _prepare_sources(config: PipelineConfig, sample: bool) -> PipelineConfig:
    if not sample:
        return config
    from lenses_data.candidates.sample import build_sample_pool, sample_sources

    pool = Path(config.run_dir) / "sample"
    build_sample_pool(pool)
    ingest = config.ingest.model_copy(update={"sources": sample_sources(pool)})
    return config.model_copy(update={"ingest": ingest})


def _hand_off(deployment: str, export_dir: str) -> str:
    from prefect.deployments import run_deployment

    # Flat parameters of `train-retriever`; its production recipe is training/configs/h200x8.yaml.
    parameters = {"config_path": "h200x8", "export_dir": export_dir}
    flow_run = run_deployment(name=deployment, parameters=parameters, timeout=0)
    return str(flow_run.id)


def run_all_stages(
    config: PipelineConfig, run: GuardedRun, stop_after: str | None = None, rebuild_changed: bool = False
) -> list[dict[str, Any]]:
    order = pipeline_order(config)
    if stop_after and stop_after not in order:
        raise ParameterError(f"stop_after={stop_after!r} is not a stage; stages: {', '.join(order)}")
    run.check_all(config, rebuild_changed)  # before any work: no stage mixes old and new settings
    check_sources(config.models.reuse_answers_from)  # a wrong source of reused answers: exit 2 now
    summaries = []
    try:
        with one_cluster_per_build(config) as staged:
            for stage_name in order:
                summaries.append(run_stage_with_runner(stage_name, staged, run))
                if stage_name == stop_after:
                    break
    finally:  # the funnel so far, also when a stage failed: what got through, and where it stopped
        if summaries:
            publish_funnel(config.run_dir, summaries)
    return summaries


@flow(
    name="build-dataset",
    log_prints=True,
    retries=FLOW_RETRIES,
    validate_parameters=True,
    flow_run_name=run_name_from_parameters("build"),
)
def build_dataset(
    config_path: str | None = None,
    run_dir: str | None = None,
    sample: bool = False,
    simulate: bool = False,
    stop_after: StageName | None = None,
    train_deployment: str | None = None,
    overrides: dict[str, Any] | None = None,
    rebuild_changed: bool = False,
) -> Any:
    """Build the Lenses dataset: ingest, dedupe, filter, split, generate, rule checks, validation, export.

    Args:
        config_path: YAML config file on the worker (e.g. configs/production.yaml); empty: built-in defaults.
        run_dir: Run directory; overrides the config's run_dir. A rerun on the same directory resumes.
        sample: Build the bundled sample pool into <run_dir>/sample and use it as the only source.
        simulate: Answer every model call with the built-in simulator (dry run, outputs marked simulated).
        stop_after: Stop after this stage (e.g. dedupe); empty: run every stage.
        train_deployment: After export, start this deployment (e.g. train-retriever/h200x8).
        overrides: Config fields over the file and the LENSES__ environment, nested as in the YAML,
            e.g. {"shard_size": 500}.
        rebuild_changed: On a run directory whose settings changed, redo the first changed stage and
            every later one (old outputs moved to <run_dir>/_replaced/, their model answers reused);
            off: such a rerun stops with the changed settings named.
    """

    def body() -> dict[str, Any]:
        config = load_run_config(config_path, run_dir, overrides)
        with guarded_run(config.run_dir, current_flow_run_id()) as run:
            config = _prepare_sources(config, sample)
            return _build(run, config, simulate, stop_after, train_deployment, rebuild_changed)

    with lenses_logs_to_run():
        return run_explained(body)


def judge_yields(config: PipelineConfig, result: dict[str, Any]) -> None:
    """Raise `YieldOutOfBand` when a stage of the funnel left its `yields` band, unless accepted
    (then the breaches are logged and recorded in the result as `accepted_yields`)."""
    from lenses_data.config.yields import bands_of_run
    from lenses_data.publish.yields import judge_yields as judge

    for line in judge(result, config.yields, bands_of_run(config)):
        get_run_logger().warning("accepted (yields.accept): %s", line)


def _build(
    run: GuardedRun,
    config: PipelineConfig,
    simulate: bool,
    stop_after: str | None,
    train_deployment: str | None,
    rebuild_changed: bool = False,
) -> dict[str, Any]:
    logger = get_run_logger()
    if simulate:
        from lenses_data.simulator.dryrun import simulated_models

        with simulated_models(config) as simulated_config:
            logger.warning("SIMULATED RUN: every model answer comes from the built-in simulator")
            summaries = run_all_stages(simulated_config, run, stop_after, rebuild_changed)
    else:
        summaries = run_all_stages(config, run, stop_after, rebuild_changed)
    result: dict[str, Any] = {"run_dir": config.run_dir, "stages": summaries, "simulated": simulate}
    judge_yields(config, result)  # before any hand-off: never train on a funnel that emptied out
    export_dir = str(Path(config.run_dir) / "export")
    deployment = train_deployment or config.orchestration.train_deployment
    if deployment and stop_after in (None, "export"):
        result["train_flow_run"] = _hand_off(deployment, export_dir)
        logger.info("handed off to %s (flow run %s)", deployment, result["train_flow_run"])
    return result
