"""Reading what a flow run left on the Prefect API (logs, artifacts, task runs) in tests."""

from __future__ import annotations

from typing import Any
from uuid import UUID


def run_logs(flow_run_id: UUID | str) -> list[Any]:
    """Every log line stored for one flow run, oldest first (after flushing this process's logs)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()
    logs: list[Any] = []
    log_filter = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[UUID(str(flow_run_id))]))
    with get_client(sync_client=True) as client:
        while True:
            page = client.read_logs(
                log_filter=log_filter, offset=len(logs), limit=200, sort=LogSort.TIMESTAMP_ASC
            )
            logs += page
            if len(page) < 200:
                return logs


def run_artifacts(flow_run_id: UUID | str) -> dict[str, Any]:
    """The latest artifact per key attached to one flow run."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    artifact_filter = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(str(flow_run_id))]))
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(artifact_filter=artifact_filter)
    latest: dict[str, Any] = {}
    for artifact in sorted(artifacts, key=lambda a: a.created):
        latest[artifact.key] = artifact
    return latest


def stage_task_runs(build_flow_run_id: UUID | str) -> list[Any]:
    """Every task run in the stage subflows of one build."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    parent = FlowRunFilter(
        parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[UUID(str(build_flow_run_id))])
    )
    with get_client(sync_client=True) as client:
        return client.read_task_runs(flow_run_filter=parent, limit=200)


def stage_task_states(build_flow_run_id: UUID | str) -> list[tuple[str, str]]:
    """(task run name, state name) of every task run in the stage subflows of one build."""
    runs = stage_task_runs(build_flow_run_id)
    return [(run.name, run.state.name if run.state else "") for run in runs]


def stage_task_histories(build_flow_run_id: UUID | str, prefix: str = "") -> dict[str, list[list[str]]]:
    """Task run name -> the state types each task run of that name went through, oldest first, for
    the task runs in the stage subflows of one build whose name starts with `prefix`."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    parent = FlowRunFilter(
        parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[UUID(str(build_flow_run_id))])
    )
    histories: dict[str, list[list[str]]] = {}
    with get_client(sync_client=True) as client:
        runs = [
            run
            for run in client.read_task_runs(flow_run_filter=parent, limit=200)
            if run.name.startswith(prefix)
        ]
        for run in runs:
            states = sorted(client.read_task_run_states(run.id), key=lambda state: state.timestamp)
            histories.setdefault(run.name, []).append([state.type.value for state in states])
    return histories
