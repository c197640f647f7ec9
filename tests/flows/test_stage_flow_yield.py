"""A stage flow judges its stage's yield as `lenses run` judges the build's (issue 44): a stage that
rejected everything ends Failed, the reasons' counts in its message and on its run's log, its
outputs written; with `accept_yield` it completes with a warning. And a stage's own retries and
concurrency (`orchestration.stages.<stage>`) reach its Prefect task runs, the others keep the
global ones (issue 40 item 5).

Real flows on the session's Prefect API; the stage is tests/flows/test_stage_flows.py's double."""

from __future__ import annotations

from pathlib import Path

import pytest

import flows.stages
from lenses_data import io
from lenses_data.publish.yields import YieldOutOfBand
from lenses_data.stages.base import ShardStats
from tests.flows.prefect_api import run_logs, stage_task_runs
from tests.flows.test_stage_flows import Calls, ShardedStage


class DiscardingStage(ShardedStage):
    """A validator double whose every answer is a discard: 40 texts in, 0 out per shard."""

    def __init__(self, name: str, shards: int) -> None:
        super().__init__(shards)
        self.name = name

    def process_shard(self, run: Path, shard: int) -> ShardStats:
        super().process_shard(run, shard)  # writes the shard's (empty) outputs
        return ShardStats(self.name, shard, 40, 0, 40, reasons={"validator_discarded": 40})


def _flow(stage: str, run: Path, config: str = "", **parameters):
    config_path = run.parent / "config.yaml"
    config_path.write_text(config or "orchestration:\n  retry_delay_s: 0\n")
    state = flows.stages._stage_flow(stage)(str(config_path), str(run), return_state=True, **parameters)
    return state, state.state_details.flow_run_id


@pytest.mark.slow
def test_a_stage_flow_outside_its_band_ends_failed_with_the_reasons_unless_accepted(
    prefect_harness, tmp_path, monkeypatch
):
    stage = DiscardingStage("validate", shards=3)
    Calls(monkeypatch, stage)
    run = tmp_path / "nightly"
    state, flow_run_id = _flow("validate", run)

    assert state.is_failed()
    breach = "stage validate rejected 120 of 120 records (100.0%"
    assert breach in state.message and "reasons: validator_discarded 120. " in state.message
    assert "--accept-yield" in state.message and "accept_yield" in state.message
    error = state.result(raise_on_failure=False)
    assert isinstance(error, YieldOutOfBand) and error.result["stages"][0]["rejected"] == 120
    assert any(breach in log.message for log in run_logs(flow_run_id) if log.level >= 40)  # the run page
    assert all(io.shard_path(run, "validate", shard).exists() for shard in range(3))  # written, suspect

    accepted_run = tmp_path / "accepted"
    state, flow_run_id = _flow("validate", accepted_run, accept_yield=True)
    assert state.is_completed()
    assert state.result()["accepted_yields"][0].startswith(breach)
    warnings = [log.message for log in run_logs(flow_run_id) if log.level == 30]
    assert any(line.startswith(f"accepted (yields.accept): {breach}") for line in warnings)


@pytest.mark.slow
def test_a_stages_own_retries_and_workers_reach_its_tasks_and_the_others_keep_the_global_ones(
    prefect_harness, tmp_path, monkeypatch
):
    config = (
        "orchestration:\n  task_retries: 3\n  retry_delay_s: 7\n  max_workers: 3\n"
        "  stages:\n    generate: {task_retries: 5, retry_delay_s: 2, max_workers: 1, tags: [vlm]}\n"
        "    rules: {task_retries: 0}\n"
    )
    own = ShardedStage(shards=2)  # generate
    Calls(monkeypatch, own)
    state, flow_run_id = _flow("generate", tmp_path / "own", config)
    assert state.is_completed()
    runs = stage_task_runs(flow_run_id)
    assert {(r.empirical_policy.retries, r.empirical_policy.retry_delay) for r in runs} == {(5, 2)}
    assert all("vlm" in r.tags for r in runs) and len(runs) == 2
    assert own.runners == [("ThreadPoolTaskRunner", 1)]

    other = DiscardingStage("filter", shards=1)  # no entry of its own: the global values
    other.process_shard = ShardedStage.process_shard.__get__(other)  # in band: 3 in, 2 out
    Calls(monkeypatch, other)
    state, flow_run_id = _flow("filter", tmp_path / "global", config)
    assert state.is_completed()
    [task_run] = stage_task_runs(flow_run_id)
    assert (task_run.empirical_policy.retries, task_run.empirical_policy.retry_delay) == (3, 7)
    assert "vlm" not in task_run.tags and other.runners == [("ThreadPoolTaskRunner", 3)]


def test_shard_task_options_fall_back_to_the_global_values() -> None:
    from lenses_data.config import config_from_dict

    settings = config_from_dict(
        {
            "orchestration": {
                "task_retries": 4,
                "retry_delay_s": 9,
                "stages": {"validate": {"task_retries": 1}},
            }
        },
        environ={},
    ).orchestration
    options = flows.stages.shard_task_options
    assert options(settings.for_stage("validate")) == {"retries": 1, "retry_delay_seconds": 9}
    assert options(settings.for_stage("rules")) == {"retries": 4, "retry_delay_seconds": 9}
