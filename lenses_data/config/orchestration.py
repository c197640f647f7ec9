"""How shard tasks are executed: task runner, parallelism, retries (Prefect flows read this).

The values at the top are every stage's; `stages.<stage>` overrides some of them for one stage
(a flaky model role retried more, a heavy one run with fewer tasks in flight):

    orchestration:
      task_retries: 2
      stages:
        visual_validate: {task_retries: 5, retry_delay_s: 60, max_workers: 1, tags: [vlm-38b]}
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from lenses_data.config.frozen import FrozenModel


class StageOrchestration(FrozenModel):
    """One stage's own values; an unset field is the global one (`orchestration.<field>`)."""

    task_retries: int | None = Field(None, ge=0, description="Prefect retries of this stage's shard tasks")
    retry_delay_s: float | None = Field(None, ge=0)
    max_workers: int | None = Field(
        None, ge=1, description="This stage's shard tasks in flight (thread runner)"
    )
    shards_per_task: int | None = Field(None, ge=1)
    max_tasks_per_stage: int | None = Field(None, ge=1)
    tags: tuple[str, ...] = Field(
        (),
        description="Prefect tags of this stage's shard tasks: a tag concurrency limit on the server "
        "(`prefect concurrency-limit create TAG N`) caps them across every run sharing a resource",
    )


class OrchestrationConfig(FrozenModel):
    task_runner: Literal["thread", "dask", "ray"] = Field(
        "thread", description="thread: one machine; dask/ray: needs prefect-dask / prefect-ray installed"
    )
    max_workers: int = Field(2, ge=1, description="Shard tasks in flight at once (thread runner)")
    runner_address: str | None = Field(None, description="Existing Dask scheduler / Ray cluster address")
    runner_options: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "dask: cluster_kwargs of a temporary LocalCluster (e.g. n_workers, threads_per_worker), or "
            "client_kwargs with runner_address; ray: options of ray.init"
        ),
    )
    shards_per_task: int = Field(
        1,
        ge=1,
        description=(
            "Shards one Prefect task run processes, one after another: fewer task runs for the "
            "Prefect server to record (outputs stay one file per shard; see docs/scaling.md)"
        ),
    )
    max_tasks_per_stage: int | None = Field(
        None,
        ge=1,
        description="Cap on a stage's task runs: more shards than this are grouped (raises shards_per_task)",
    )
    task_retries: int = Field(2, ge=0, description="Prefect retries of a failed shard task")
    retry_delay_s: float = Field(10.0, ge=0)
    tags: tuple[str, ...] = Field(
        (), description="Prefect tags of every shard task (see stages.<stage>.tags)"
    )
    train_deployment: str | None = Field(
        None, description="Deployment to hand off to after export, e.g. 'train-retriever/h200x8'"
    )

    stages: dict[str, StageOrchestration] = Field(
        default_factory=dict,
        description="Per-stage retries, concurrency and task tags, by stage name; unset: the values above "
        "(a name that is no stage of the pipeline is refused when a run is entered: lenses_data.stages.entry)",
    )

    def for_stage(self, stage: str) -> OrchestrationConfig:
        """The values `stage` runs with: its own (`stages.<stage>`) over the global ones."""
        own = self.stages.get(stage)
        if own is None:
            return self
        return self.model_copy(update=own.model_dump(exclude_none=True, exclude_defaults=True))

    def shard_batches(self, shards: list[int]) -> list[list[int]]:
        """Consecutive groups of `shards`, one per task run: `shards_per_task` each, or more when
        `max_tasks_per_stage` would be exceeded."""
        size = self.shards_per_task
        if self.max_tasks_per_stage:
            size = max(size, math.ceil(len(shards) / self.max_tasks_per_stage))
        return [shards[i : i + size] for i in range(0, len(shards), size)]
