"""Shard tasks on a Dask task runner give the same stage output as the default thread runner."""

from __future__ import annotations

import pandas as pd
import pytest

from flows.stages import run_stage_with_runner
from lenses_data import io
from lenses_data.config import config_from_dict
from lenses_data.sample import sample_sources


def _ingest_and_dedupe(run, sources, orchestration):
    config = config_from_dict(
        {
            "run_dir": str(run),
            "shard_size": 8,
            "ingest": {"sources": sources, "workers": 1},
            "orchestration": orchestration,
        },
        environ={},
    )
    return [run_stage_with_runner(stage, config) for stage in ("ingest", "dedupe")]


@pytest.mark.slow
def test_dask_runner_matches_thread_runner(prefect_harness, sample_pool, tmp_path):
    pytest.importorskip("prefect_dask")
    sources = sample_sources(sample_pool)
    threads = _ingest_and_dedupe(tmp_path / "threads", sources, {"task_runner": "thread"})
    dask = _ingest_and_dedupe(
        tmp_path / "dask",
        sources,
        {
            "task_runner": "dask",
            "runner_options": {"processes": False, "n_workers": 1, "threads_per_worker": 2},
        },
    )
    for a, b in zip(threads, dask, strict=True):
        assert {k: a[k] for k in ("records_in", "records_out", "rejected")} == {
            k: b[k] for k in ("records_in", "records_out", "rejected")
        }
    for stage in ("ingest", "dedupe"):
        left = io.read_stage(tmp_path / "threads", stage).drop(columns=["path"], errors="ignore")
        right = io.read_stage(tmp_path / "dask", stage).drop(columns=["path"], errors="ignore")
        pd.testing.assert_frame_equal(left, right)


def test_unknown_runner_is_a_config_error():
    from lenses_data.config import ConfigError

    with pytest.raises(ConfigError, match="orchestration.task_runner"):
        config_from_dict({"orchestration": {"task_runner": "celery"}}, environ={})


def test_dask_runner_options_reach_the_cluster_or_the_client():
    pytest.importorskip("prefect_dask")
    from flows.common import make_task_runner

    local = config_from_dict(
        {"orchestration": {"task_runner": "dask", "runner_options": {"n_workers": 3, "processes": True}}},
        environ={},
    )
    runner = make_task_runner(local)
    assert runner.cluster_kwargs == {"n_workers": 3, "processes": True} and runner.address is None
    remote = config_from_dict(
        {
            "orchestration": {
                "task_runner": "dask",
                "runner_address": "tcp://10.0.0.1:8786",
                "runner_options": {"timeout": 30},
            }
        },
        environ={},
    )
    runner = make_task_runner(remote)
    assert runner.address == "tcp://10.0.0.1:8786" and runner.client_kwargs.get("timeout") == 30
