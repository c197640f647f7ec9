"""The worker stage cache's bookkeeping, shard by shard in one thread, with real stages (a validate
stage's model client is built, never used: no request is sent).

The invariant every test checks: each stage the cache built is closed exactly once its last user is
done — after a failed shard (a retry then builds a fresh one), when a later stage run of the same
thread replaces it, or when its run is released (at once if idle, at the end of the shard if busy) —
and `release_worker_stages` counts what it released. Written against the survivors of `make mutation
MODULE=flows/worker_stages.py` (docs/testing.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flows import worker_stages
from flows.worker_stages import discard_worker_stage, release_worker_stages, worker_stage
from lenses_data.config import PipelineConfig, config_from_dict
from lenses_data.stages.base import Stage


@pytest.fixture
def config(tmp_path: Path) -> PipelineConfig:
    role = {"model": "test/validator", "base_urls": ["http://127.0.0.1:9/v1"], "timeout_s": 5}
    return config_from_dict({"run_dir": str(tmp_path), "models": {"validator": role}}, environ={})


@pytest.fixture
def run(tmp_path: Path) -> str:
    """Stage-run tokens of this test only: the cache is the process's, shared by every test."""
    return tmp_path.name


def _closed(stages: list[Stage]) -> list[bool]:
    return [stage.client.closed for stage in stages]


def test_a_failed_shard_discards_its_stage_and_the_retry_builds_a_fresh_one(config, built, run) -> None:
    before = worker_stages.setups
    with pytest.raises(ValueError, match="unreadable shard"):
        with worker_stage("validate", config, f"{run}-run-1"):
            raise ValueError("unreadable shard")
    assert _closed(built) == [True]
    with worker_stage("validate", config, f"{run}-run-1") as retry:
        assert retry is built[-1] and _closed(built) == [True, False]
    assert worker_stages.setups - before == len(built) == 2
    discard_worker_stage("validate", config, f"{run}-another-run")  # not this run's: nothing happens
    assert _closed(built) == [True, False]
    assert release_worker_stages(f"{run}-run-1") == 1 and _closed(built) == [True, True]


def test_a_reused_stage_released_during_its_shard_closes_when_the_shard_ends(config, built, run) -> None:
    with worker_stage("validate", config, f"{run}-run-1") as first:
        pass
    with worker_stage("validate", config, f"{run}-run-1") as again:
        assert again is first  # cached for the run's next shard
        assert release_worker_stages(f"{run}-run-1") == 1  # another shard failed: the run ends now
        assert _closed(built) == [False]  # still answering this shard
    assert _closed(built) == [True] and len(built) == 1
    assert release_worker_stages(f"{run}-run-1") == 0


def test_a_later_stage_run_closes_the_threads_stage_of_the_earlier_one_only(config, built, run) -> None:
    with worker_stage("validate", config, f"{run}-run-1"), worker_stage("split", config, f"{run}-run-1"):
        pass
    with worker_stage("validate", config, f"{run}-run-2") as later:
        assert later is built[-1] and _closed([built[0], later]) == [True, False]
    assert release_worker_stages(f"{run}-run-1") == 1  # the split stage: another stage, kept for run-1
    assert release_worker_stages(f"{run}-run-2") == 1 and later.client.closed


def test_a_stage_without_a_model_client_is_released_and_discarded_quietly(config, built, run) -> None:
    with worker_stage("split", config, f"{run}-run-1") as split:
        assert getattr(split, "client", None) is None
    assert release_worker_stages(f"{run}-run-1") == 1
    with pytest.raises(RuntimeError):
        with worker_stage("split", config, f"{run}-run-2"):
            raise RuntimeError("shard failed")
    assert release_worker_stages(f"{run}-run-2") == 0 and len(built) == 2
