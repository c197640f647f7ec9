"""Shared pieces of the Prefect flows: parameters, the run-directory lock, task runners, artifacts.

Flows stay thin: they map `lenses_data` stages over shards, set retries and cache policies and
publish what happened. No stage logic lives here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, Field

from lenses_data.config import PipelineConfig, config_from_dict, deep_merge, load_config
from lenses_data.runlock import run_directory_lock


class RunParameters(BaseModel):
    """What a user sets when starting a run from the Prefect UI, the CLI or CI."""

    config_path: str | None = Field(
        None, description="YAML config file on the worker (e.g. configs/production.yaml); empty: defaults"
    )
    run_dir: str | None = Field(None, description="Run directory; overrides the config's run_dir")
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description='Nested settings merged over the config file, e.g. {"shard_size": 500}',
    )

    def load(self) -> PipelineConfig:
        base = load_config(self.config_path).model_dump(mode="json")
        merged = deep_merge(base, self.overrides)
        if self.run_dir:
            merged["run_dir"] = self.run_dir
        return config_from_dict(merged, origin=self.config_path or "<defaults>")


@contextlib.contextmanager
def run_lock(config: PipelineConfig) -> Iterator[None]:
    """Hold the run directory for this flow run; a second live run on it is refused at once."""
    from prefect.runtime import flow_run

    with run_directory_lock(config.run_dir, flow_run_id=flow_run.get_id()):
        yield


def make_task_runner(config: PipelineConfig):
    """Thread pool on one machine; Dask or Ray when configured and installed."""
    settings = config.orchestration
    if settings.task_runner == "dask":
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError as error:
            raise RuntimeError("task_runner 'dask' needs `pip install prefect-dask`") from error
        options = dict(settings.runner_options)
        if settings.runner_address:  # an existing cluster: the options go to its distributed.Client
            return DaskTaskRunner(address=settings.runner_address, client_kwargs=options or None)
        # A temporary LocalCluster: the options are its cluster_kwargs (n_workers, threads_per_worker, ...)
        return DaskTaskRunner(cluster_kwargs=options or None)
    if settings.task_runner == "ray":
        try:
            from prefect_ray import RayTaskRunner
        except ImportError as error:
            raise RuntimeError("task_runner 'ray' needs `pip install prefect-ray`") from error
        return RayTaskRunner(address=settings.runner_address, init_kwargs=settings.runner_options or None)
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=settings.max_workers)


def summary_markdown(summary: dict[str, Any]) -> str:
    """A stage summary as a markdown table for the Prefect UI."""
    lines = [
        f"### Stage `{summary.get('stage', '?')}`",
        "",
        "| records in | records out | rejected | shards | shards skipped (already done) |",
        "|---:|---:|---:|---:|---:|",
        f"| {summary.get('records_in', 0)} | {summary.get('records_out', 0)} | {summary.get('rejected', 0)} "
        f"| {summary.get('shards', 0)} | {summary.get('shards_skipped', 0)} |",
    ]
    reasons = summary.get("reasons") or {}
    if reasons:
        lines += ["", "| rejection reason | count |", "|---|---:|"]
        lines += [f"| {reason} | {count} |" for reason, count in sorted(reasons.items())]
    return "\n".join(lines)


def funnel_markdown(summaries: list[dict[str, Any]]) -> str:
    lines = ["## Lenses build funnel", "", "| stage | in | out | rejected |", "|---|---:|---:|---:|"]
    for item in summaries:
        lines.append(
            f"| {item.get('stage')} | {item.get('records_in', 0)} | {item.get('records_out', 0)} "
            f"| {item.get('rejected', 0)} |"
        )
    return "\n".join(lines)


def artifact_key(text: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
