"""Run in a fresh process with PREFECT_FLOWS_DEFAULT_RETRIES set (tests/flows/test_retries.py):
a stage flow and the build flow whose stage keeps failing, and a control flow that returns Failed.

The default retries setting is read when a flow is defined, so it takes a process that imports
the pipeline's flows with the setting already in its environment. Prints one JSON object: shard
calls and flow runs (name, run count, state) per case, and the control flow's attempts.

    python -m tests.flows.flow_retry_probe RUN_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from prefect import Flow, flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId
from prefect.states import Failed

from flows import stages
from flows.build import build_dataset
from flows.evaluate import evaluate_retriever
from flows.stages import rules_flow
from flows.train import train_retriever
from lenses_data.stages import registry
from tests.flows.test_retries import FlakyStage

OVERRIDES = {"orchestration": {"task_retries": 1, "retry_delay_s": 0}}
control_attempts = 0


@flow(name="returns-failed")  # no `retries`: it takes the default from the environment
def returns_failed() -> Any:
    global control_attempts
    control_attempts += 1
    return Failed(message="failed on purpose")


def _stage_flows() -> list[Any]:
    return [item for item in vars(stages).values() if isinstance(item, Flow)]


def _flow_runs(parent_id: Any) -> list[tuple[str, int, str]]:
    """(flow name, run count, state type) of the run and of its direct subflow runs."""
    children = FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_id]))
    with get_client(sync_client=True) as client:
        runs = [client.read_flow_run(parent_id), *client.read_flow_runs(flow_run_filter=children)]
        names = {run.flow_id: client.read_flow(run.flow_id).name for run in runs}
    return sorted((names[run.flow_id], run.run_count, run.state.type.value) for run in runs)


def _failing_case(run_flow: Any, run_dir: Path) -> dict[str, Any]:
    """Every stage is a FlakyStage whose shard 0 always fails with a transient error."""
    stage = FlakyStage(failures=1000)
    registry.stage_class = lambda name, config=None: stage.built_as()
    state = run_flow(run_dir=str(run_dir), overrides=OVERRIDES, return_state=True)
    return {
        "calls": sorted(stage.calls),
        "state": state.type.value,
        "runs": _flow_runs(state.state_details.flow_run_id),
    }


def main(run_root: Path) -> None:
    report = {
        "retries": {
            item.name: item.retries
            for item in (build_dataset, train_retriever, evaluate_retriever, *_stage_flows())
        },
        "stage_flow": _failing_case(rules_flow, run_root / "stage"),
        "build": _failing_case(build_dataset, run_root / "build"),
    }
    returns_failed(return_state=True)
    report["control"] = {"retries": returns_failed.retries, "attempts": control_attempts}
    print(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
