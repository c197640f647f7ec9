"""Shard tasks are retried as the config says, for transient errors only; a shard that keeps
failing fails the flow loudly, with the stage named in its one-line explanation."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import flows.stages
from lenses_data import io
from lenses_data.config import config_from_dict
from lenses_data.schemas import Rejection
from lenses_data.stages import registry
from lenses_data.stages.base import ShardStats, summarize
from lenses_data.stages.entry import guarded_stage


class FlakyStage:
    """Shard 0 fails `failures` times before it succeeds; every call is recorded."""

    name = "rules"
    input_stage = None
    reads = ()
    writes = ()
    output_settings = ()  # the protocol asks for them; nothing in a config changes this double

    def built_as(self) -> Any:
        """A stand-in for its class in `registry.stage_class`: builds this stage, and declares its
        settings where the settings guard reads them (on the class)."""

        def build(config: Any, **_: Any) -> FlakyStage:
            return self

        build.output_settings = self.output_settings  # type: ignore[attr-defined]
        return build

    def __init__(self, failures: int, error: type[Exception] = RuntimeError):
        self.failures = failures
        self.error = error
        self.calls: list[int] = []
        self.lock = threading.Lock()

    def setup(self) -> None:  # nothing to open: the protocol's setup and close are no-ops here
        pass

    def close(self) -> None:
        pass

    def input_shards(self, run: Path) -> list[int]:
        return [0, 1]

    def process_shard(self, run: Path, shard: int) -> ShardStats:
        with self.lock:
            self.calls.append(shard)
            failing = shard == 0 and self.calls.count(0) <= self.failures
        if failing:
            raise self.error("simulated crash of a shard task")
        io.write_shard(run, self.name, shard, [], Rejection)
        io.write_rejections(run, self.name, shard, [])
        return ShardStats(stage=self.name, shard=shard)

    def finish(self, run: Path, shards: list[int], stats: list[ShardStats]) -> dict:
        summary = summarize(self.name, stats)
        io.mark_stage_complete(run, self.name, shards, summary)
        return summary


def _config(run: Path, retries: int):
    return config_from_dict(
        {"run_dir": str(run), "orchestration": {"task_retries": retries, "retry_delay_s": 0}}, environ={}
    )


def _run_rules(config) -> dict:
    with guarded_stage("rules", config) as held:
        return flows.stages.run_stage_with_runner("rules", config, held)


@pytest.mark.slow
def test_failed_shard_is_retried_per_config(prefect_harness, tmp_path, monkeypatch):
    stage = FlakyStage(failures=1)
    monkeypatch.setattr(registry, "stage_class", lambda name, config=None: stage.built_as())
    summary = _run_rules(_config(tmp_path, retries=1))
    assert sorted(stage.calls) == [0, 0, 1]
    assert summary["shards"] == 2
    assert io.stage_is_complete(tmp_path, "rules")


@pytest.mark.slow
def test_shard_failing_beyond_its_retries_fails_the_stage(prefect_harness, tmp_path, monkeypatch):
    stage = FlakyStage(failures=5)
    monkeypatch.setattr(registry, "stage_class", lambda name, config=None: stage.built_as())
    with pytest.raises(RuntimeError, match="simulated crash"):
        _run_rules(_config(tmp_path, retries=1))
    assert stage.calls.count(0) == 2
    assert not io.stage_is_complete(tmp_path, "rules")


@pytest.mark.slow
def test_a_permanent_error_is_not_retried(prefect_harness, tmp_path, monkeypatch):
    """A config-like error (ValueError) is the same on every attempt: one call, however many retries."""
    from flows.failures import explain

    stage = FlakyStage(failures=5, error=ValueError)
    monkeypatch.setattr(registry, "stage_class", lambda name, config=None: stage.built_as())
    with pytest.raises(ValueError, match="simulated crash") as raised:
        _run_rules(_config(tmp_path, retries=3))
    assert stage.calls.count(0) == 1
    assert explain(raised.value) == "stage rules: ValueError: simulated crash of a shard task"


@pytest.mark.slow
def test_no_flow_level_retry_reruns_a_failed_stage(prefect_harness, tmp_path):
    """Since Prefect 3.9 a flow that returns a Failed state is retried when it has `retries`, and a
    flow takes PREFECT_FLOWS_DEFAULT_RETRIES when it names none. With that default set, a failing
    stage still runs its shard exactly as the task retries say (1 + task_retries calls), in one
    flow run per flow: only a rerun repeats a stage, and a rerun resumes from disk and journal.

    The probe runs in a fresh process: the setting is read when the flows are defined (import)."""
    import json
    import os
    import subprocess
    import sys

    from prefect.settings import PREFECT_API_URL

    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "PREFECT_API_URL": PREFECT_API_URL.value(),  # the session harness's server
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_FLOWS_DEFAULT_RETRIES": "2",
        "PREFECT_FLOWS_DEFAULT_RETRY_DELAY_SECONDS": "0",
    }
    probe = subprocess.run(
        [sys.executable, "-m", "tests.flows.flow_retry_probe", str(tmp_path / "runs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert probe.returncode == 0, probe.stdout[-3000:] + probe.stderr[-3000:]
    report = json.loads(probe.stdout.strip().splitlines()[-1])
    # The setting is in effect, and this Prefect retries a flow that returns Failed (3.9 behaviour).
    assert report["control"] == {"retries": 2, "attempts": 3}
    stage_runs = [["rules", 1, "FAILED"], ["stage-shards", 1, "FAILED"]]
    assert report["stage_flow"] == {"calls": [0, 0, 1], "state": "FAILED", "runs": stage_runs}
    build_runs = [["build-dataset", 1, "FAILED"], ["stage-shards", 1, "FAILED"]]
    assert report["build"] == {"calls": [0, 0, 1], "state": "FAILED", "runs": build_runs}
    assert set(report["retries"].values()) == {0}, report["retries"]  # every deployed flow
