"""The `evaluate-retriever` flow: a thin Prefect wrapper around `training.evaluation.run.run_evaluation`."""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from flows.common import export_run_dir, run_name_from_parameters
from flows.failures import FLOW_RETRIES, run_explained
from flows.runlogs import lenses_logs_to_run


@flow(
    name="evaluate-retriever",
    log_prints=True,
    retries=FLOW_RETRIES,
    validate_parameters=True,
    flow_run_name=run_name_from_parameters("evaluate", export_run_dir),
)
def evaluate_retriever(
    config_path: str = "eval-tiny",
    export_dir: str | None = None,
    encodings_dir: str | None = None,
    out_dir: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> Any:
    """Evaluate the lens-slot retriever and its baselines on one split; publish the tables.

    Args:
        config_path: EvalConfig YAML on the worker, or a name in training/configs/.
        export_dir: `lenses export` folder; overrides the config.
        encodings_dir: `lenses encode` folder of the lens model; overrides the config.
        out_dir: Where metrics.json, report.md and routing.png go.
        overrides: Nested EvalConfig fields to override.
    """

    def body() -> dict[str, Any]:
        from training.evaluation.config import load_eval_config
        from training.evaluation.run import run_evaluation, summary_lines
        from training.evaluation.tables.reports import render_markdown

        logger = get_run_logger()
        merged = dict(overrides or {})
        for key, value in (
            ("export_dir", export_dir),
            ("encodings_dir", encodings_dir),
            ("out_dir", out_dir),
        ):
            if value is not None:
                merged[key] = value
        cfg = load_eval_config(config_path, merged)
        if cfg.imp is not None and cfg.imp.difficulty_table is None:  # IMP split first, as its own step
            from training.evaluation.imp.split import write_imp_split

            table = str(write_imp_split(cfg)["difficulty"])
            logger.info("IMP difficulty split written to %s", table)
            cfg = cfg.model_copy(update={"imp": cfg.imp.model_copy(update={"difficulty_table": table})})
        results, paths = run_evaluation(cfg)
        for line in summary_lines(results):
            logger.info(line)
        create_markdown_artifact(
            key="evaluate-retriever-report",
            markdown=render_markdown(results),
            description="Lenses evaluation tables",
        )
        return {"out_dir": cfg.out_dir, "files": {k: str(v) for k, v in paths.items()}}

    with lenses_logs_to_run():
        return run_explained(body)
