"""The `train-retriever` flow: a thin Prefect wrapper around `training.loop.train.train`.

For multi-GPU training launch torchrun directly (docs/training.md); this flow runs one process,
which is what a single-GPU worker or a dry run needs. Parameters are flat, like `build-dataset`'s.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger

from flows.common import export_run_dir, run_name_from_parameters
from flows.failures import FLOW_RETRIES, run_explained
from flows.runlogs import lenses_logs_to_run


@flow(
    name="train-retriever",
    log_prints=True,
    retries=FLOW_RETRIES,
    validate_parameters=True,
    flow_run_name=run_name_from_parameters("train", export_run_dir),
)
def train_retriever(
    config_path: str = "tiny",
    export_dir: str | None = None,
    out_dir: str | None = None,
    max_steps: int | None = None,
    overrides: dict[str, Any] | None = None,
) -> Any:
    """Train (or resume) the lens-slot retriever; returns the final step and checkpoint path.

    Args:
        config_path: TrainConfig YAML on the worker, or a name in training/configs/ (e.g. h200x8).
        export_dir: `lenses export` folder; overrides data.export_dir.
        out_dir: Run folder (checkpoints, metrics.jsonl); overrides run.out_dir.
        max_steps: Stop early at this step (the schedule is unchanged).
        overrides: Nested TrainConfig fields to override, e.g. {"loss": {"mode": "global"}}.
    """

    def body() -> dict[str, Any]:
        from training.loop.train import train
        from training.retriever.config import load_train_config

        merged = {k: dict(v) if isinstance(v, dict) else v for k, v in (overrides or {}).items()}
        if export_dir is not None:
            merged.setdefault("data", {})["export_dir"] = export_dir
        if out_dir is not None:
            merged.setdefault("run", {})["out_dir"] = out_dir
        cfg = load_train_config(config_path, merged)
        result = train(cfg, max_steps=max_steps)
        last = result.history[-1] if result.history else {}
        get_run_logger().info(
            "trained steps %d -> %d, last losses %s", result.start_step, result.final_step, last
        )
        return {
            "final_step": result.final_step,
            "checkpoint": str(result.checkpoint) if result.checkpoint else None,
            "last": last,
        }

    with lenses_logs_to_run():
        return run_explained(body)
