"""The per-stage flows (`flows.stages`) as a deployment runs them: one task run per shard or per group
of shards, named after its shards; a shard whose outputs exist ends "Skipped"; retries from the
config; progress, table and banner on the stage's flow run; the summary returned; a failing stage
returned as a Failed state that carries the original error; the worker stages released.

The stage is a double (tests/flows/test_retries.py's, made a model stage here) so each flow run
takes about a second against the session's Prefect API."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import flows.stages
from flows import worker_stages
from flows.failures import FLOW_RETRIES, stage_of
from flows.observers import observing
from flows.reporting import stage_key, summary_markdown
from lenses_data import io
from lenses_data.config.pipeline import spec_of
from lenses_data.models.progress import simulated_banner
from lenses_data.runlock import read_owner
from lenses_data.stages.base import ShardStats
from lenses_data.stages.registry import STAGES
from tests.flows.prefect_api import run_artifacts, run_logs, stage_task_runs
from tests.flows.test_retries import FlakyStage

STAGE = "generate"  # a model stage: it gets a progress artifact


class ShardedStage(FlakyStage):
    """`shards` shards; one whose output is on disk is skipped, the others count 3 in, 2 out, 1 rejected."""

    def __init__(self, shards: int, failures: int = 0, error: type[Exception] = RuntimeError):
        super().__init__(failures, error)
        self.name = STAGE
        self.shards = shards
        self.owners: list[dict | None] = []  # the run lock's owner file while the stage lists its shards
        self.runners: list[tuple[str, int]] = []  # the task runner the shards were listed under

    def input_shards(self, run: Path) -> list[int]:
        from prefect.context import FlowRunContext

        self.owners.append(read_owner(run))
        runner = FlowRunContext.get().task_runner  # the stage subflow's (private: no public getter)
        self.runners.append((type(runner).__name__, runner._max_workers))
        return list(range(self.shards))

    def process_shard(self, run: Path, shard: int) -> ShardStats:
        if io.shard_path(run, self.name, shard).exists():
            return ShardStats(stage=self.name, shard=shard, skipped=True)
        super().process_shard(run, shard)
        extra = {"simulated_answers": 2}
        return ShardStats(self.name, shard, 3, 2, 1, reasons={"too short": 1}, extra=extra)


class Calls:
    """What the flow code asked of the pieces around it, recorded while the real ones run."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, stage: ShardedStage):
        self.builds: list[tuple[str, str, bool]] = []  # (stage, the config's run directory name, client)
        self.progress: list[tuple] = []
        self.started: list = []
        self.released: list[tuple[str, int]] = []

        def build(name, config, *, with_client=True):
            self.builds.append((name, Path(config.run_dir).name, with_client))
            return stage

        def start(run_dir, name):
            self.started.append(real_start(run_dir, name))
            return self.started[-1]

        def update(*args):
            self.progress.append(args)
            real_update(*args)

        def release(token):
            self.released.append((token, real_release(token)))
            return self.released[-1][1]

        real_start, real_update = flows.stages.start_progress, flows.stages.update_progress
        real_release = flows.stages.release_worker_stages
        monkeypatch.setattr(flows.stages, "build_stage", build)
        monkeypatch.setattr(worker_stages, "build_stage", build)
        monkeypatch.setattr(flows.stages, "start_progress", start)
        monkeypatch.setattr(flows.stages, "update_progress", update)
        monkeypatch.setattr(flows.stages, "release_worker_stages", release)


class Watcher:
    """A stage observer registered by the caller of a flow (its shards sorted: tasks end in any order)."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []
        self.shards: list[int] = []

    def stage_started(self, stage: str, shards: int) -> None:
        self.seen.append(("started", stage, shards))

    def shard_finished(self, stage: str, stats: ShardStats) -> None:
        self.shards.append((stage, stats.shard))

    def stage_finished(self, summary: dict) -> None:
        self.seen += [("shard", *item) for item in sorted(self.shards)] + [("finished", summary)]


def _run(run: Path, shards_per_task: int):
    """The stage's flow, made anew so that the flow definition itself is what is tested; the retries
    come from the config file, the grouping from the overrides, the run directory from its parameter."""
    config_path = run.parent / "config.yaml"
    config_path.write_text("orchestration:\n  task_retries: 3\n  retry_delay_s: 7\n  max_workers: 3\n")
    overrides = {"orchestration": {"shards_per_task": shards_per_task}}
    stage_flow = flows.stages._stage_flow(STAGE)
    state = stage_flow(str(config_path), str(run), overrides, return_state=True)
    return state, state.state_details.flow_run_id


def _tasks(flow_run_id) -> dict[str, tuple[str, str | None]]:
    """Task run name -> (state name, state message) for the stage's shard tasks."""
    return {r.name: (r.state.name, r.state.message) for r in stage_task_runs(flow_run_id)}


def _flow_run_names(flow_run_id) -> tuple[str, list[str]]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    children = FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id]))
    with get_client(sync_client=True) as client:
        own = client.read_flow_run(flow_run_id).name
        return own, [r.name for r in client.read_flow_runs(flow_run_filter=children)]


SKIPPED = ("Skipped", "outputs already on disk")
DONE = ("Completed", "")


@pytest.mark.slow
def test_a_stage_flow_runs_one_task_per_shard_and_skips_the_shards_on_disk(
    prefect_harness, tmp_path, monkeypatch
):
    run = tmp_path / "nightly"
    stage = ShardedStage(shards=3)
    calls = Calls(monkeypatch, stage)
    with observing(Watcher()) as watcher:  # what `lenses run`'s progress display is told
        state, flow_run_id = _run(run, shards_per_task=1)

    summary = state.result()
    assert summary == {
        "stage": STAGE,
        "shards": 3,
        "shards_skipped": 0,
        "records_in": 9,
        "records_out": 6,
        "rejected": 3,
        "reasons": {"too short": 3},
        "simulated_answers": 6,
    }
    shards = [("shard", STAGE, shard) for shard in range(3)]
    assert watcher.seen == [("started", STAGE, 3), *shards, ("finished", summary)]
    assert _flow_run_names(flow_run_id) == ("nightly-generate", ["nightly-generate-shards"])
    names = [f"{STAGE}-shard-{shard:05d}" for shard in range(3)]
    assert _tasks(flow_run_id) == dict.fromkeys(names, DONE)
    policies = {
        (r.empirical_policy.retries, r.empirical_policy.retry_delay) for r in stage_task_runs(flow_run_id)
    }
    assert policies == {(3, 7)}
    assert sorted(stage.calls) == [0, 1, 2]
    assert [owner["flow_run_id"] for owner in stage.owners] == [str(flow_run_id)]  # who holds the run
    assert stage.runners == [("ThreadPoolTaskRunner", 3)]  # the config's, not Prefect's default
    # The listing stage asks no model; each worker thread built its own, all released at the end.
    assert calls.builds[0] == (STAGE, "nightly", False) and set(calls.builds[1:]) == {
        (STAGE, "nightly", True)
    }
    [(token, released)] = calls.released
    assert re.fullmatch(r"[0-9a-f]{32}", token) and released == len(calls.builds) - 1
    [progress] = calls.started
    assert calls.progress == [(str(progress), STAGE, done, 3) for done in (1, 2, 3)]
    # The stage's table and banner go on the run a user opened.
    table = run_artifacts(flow_run_id)[stage_key(str(run), STAGE)]
    assert table.data == summary_markdown(summary)
    banner = f"{STAGE}: {simulated_banner(6)}"
    # Once, from the run's own logger (not only through the lenses_data log bridge).
    assert [log.name for log in run_logs(flow_run_id) if log.message == banner] == ["prefect.flow_runs"]

    io.shard_path(run, STAGE, 1).unlink()  # a deleted output is rebuilt, the others are skipped
    state, rerun_id = _run(run, shards_per_task=1)
    assert state.result()["shards_skipped"] == 2
    assert _tasks(rerun_id) == {names[0]: SKIPPED, names[1]: DONE, names[2]: SKIPPED}
    assert sorted(stage.calls) == [0, 1, 1, 2]


@pytest.mark.slow
def test_grouped_shards_run_as_one_task_each_skipped_only_when_every_shard_is(
    prefect_harness, tmp_path, monkeypatch
):
    run = tmp_path / "nightly"
    stage = ShardedStage(shards=3)
    calls = Calls(monkeypatch, stage)
    state, flow_run_id = _run(run, shards_per_task=2)
    assert state.result()["shards"] == 3
    first, second = f"{STAGE}-shards-00000-00001", f"{STAGE}-shards-00002-00002"
    assert _tasks(flow_run_id) == {first: DONE, second: DONE}
    [(_, released)] = calls.released  # every worker's stage, built for this stage run's token
    assert released == len(calls.builds) - 1 >= 1
    assert {
        (r.empirical_policy.retries, r.empirical_policy.retry_delay) for r in stage_task_runs(flow_run_id)
    } == {(3, 7)}
    [progress] = calls.started  # after each task, every shard of the tasks finished so far
    assert [args[:2] + args[3:] for args in calls.progress] == [(str(progress), STAGE, 3)] * 2
    assert [args[2] for args in calls.progress] in ([1, 3], [2, 3])

    io.shard_path(run, STAGE, 0).unlink()
    state, rerun_id = _run(run, shards_per_task=2)
    summary = state.result()
    assert (summary["shards"], summary["shards_skipped"], summary["records_in"]) == (3, 2, 3)
    assert _tasks(rerun_id) == {first: DONE, second: SKIPPED}
    assert sorted(stage.calls) == [0, 0, 1, 2]


@pytest.mark.slow
def test_a_failing_stage_is_returned_failed_with_its_error_and_releases_its_workers(
    prefect_harness, tmp_path, monkeypatch
):
    from lenses_data.config import config_from_dict

    # One shard: a second one could start after the release and build its stage anew (a straggler).
    stage = ShardedStage(shards=1, failures=5, error=ValueError)  # permanent: not retried
    calls = Calls(monkeypatch, stage)
    config = config_from_dict({"run_dir": str(tmp_path), "orchestration": {"task_retries": 2}}, environ={})
    state = flows.stages.stage_shards_flow(STAGE, config, return_state=True)
    assert state.is_failed()
    assert state.message == f"stage {STAGE}: ValueError: simulated crash of a shard task"
    error = state.result(raise_on_failure=False)
    assert type(error) is ValueError and stage_of(error) == STAGE
    assert stage.calls == [0]
    [(token, _)] = calls.released
    assert re.fullmatch(r"[0-9a-f]{32}", token)
    assert not any(key.token == token for key in worker_stages._stages)


def test_shard_task_options_are_the_configs_retries() -> None:
    from lenses_data.config import config_from_dict

    config = config_from_dict({"orchestration": {"task_retries": 4, "retry_delay_s": 9}}, environ={})
    assert flows.stages.shard_task_options(config.orchestration) == {"retries": 4, "retry_delay_seconds": 9}


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_flow_is_named_documented_and_takes_the_run_parameters(stage, monkeypatch) -> None:
    """Also with Prefect's default flow retries set: a stage flow never retries a failed stage
    (a rerun resumes from disk instead; test_retries.py runs that)."""
    from prefect.runtime import flow_run
    from prefect.settings import PREFECT_FLOWS_DEFAULT_RETRIES, temporary_settings

    monkeypatch.setitem(flow_run.FIELDS, "parameters", lambda: {"run_dir": "/data/nightly"})
    with temporary_settings({PREFECT_FLOWS_DEFAULT_RETRIES: 2}):
        fresh = flows.stages._stage_flow(stage)
    for stage_flow in (getattr(flows.stages, f"{stage}_flow"), fresh):
        assert stage_flow.name == stage.replace("_", "-")
        assert stage_flow.fn.__name__ == f"{stage}_flow"
        help_text = spec_of(stage).help  # the declared stage's one line, on the flow's page too
        assert stage_flow.fn.__doc__ == flows.stages.STAGE_FLOW_DOC.format(stage=stage, help=help_text)
        assert stage_flow.description == inspect.cleandoc(stage_flow.fn.__doc__)
        assert f"Run the `{stage}` stage of the Lenses pipeline over every shard of a run: {help_text}." in (
            " ".join(stage_flow.description.split())
        )
        assert stage_flow.flow_run_name() == f"nightly-{stage.replace('_', '-')}"
        assert (stage_flow.retries, stage_flow.log_prints, stage_flow.should_validate_parameters) == (
            FLOW_RETRIES,
            True,
            True,
        )
        schema = stage_flow.parameters
        assert list(schema.properties) == ["config_path", "run_dir", "overrides", "accept_yield"]
        assert not schema.required
        assert all(
            schema.properties[name].get("default", None) is None for name in list(schema.properties)[:3]
        )
        assert schema.properties["accept_yield"]["default"] is False
