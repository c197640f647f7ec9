"""Shard tasks on a Dask task runner give the same stage output as the default thread runner."""

from __future__ import annotations

import pandas as pd
import pytest

from flows.stages import run_stage_with_runner
from lenses_data import io
from lenses_data.candidates.sample import sample_sources
from lenses_data.config import config_from_dict
from lenses_data.stages.entry import guarded_stage


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
    summaries = []
    for stage in ("ingest", "dedupe"):
        with guarded_stage(stage, config) as held:
            summaries.append(run_stage_with_runner(stage, config, held))
    return summaries


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


def _cluster_shape() -> tuple[str, list[tuple[str, int]]]:
    """Inside a task: the scheduler this task ran under, and (protocol, threads) of its workers."""
    from distributed import get_client

    client = get_client()
    workers = client.scheduler_info()["workers"]
    shape = sorted((address.split("://")[0], worker["nthreads"]) for address, worker in workers.items())
    return client.scheduler.address, shape


def _run_on(config):
    from prefect import flow, task

    from flows.common import make_task_runner

    @flow(task_runner=make_task_runner(config))
    def read_back_cluster():
        return task(_cluster_shape).submit().result()

    return read_back_cluster()


def test_dask_runner_options_are_read_back_from_the_running_cluster(prefect_harness):
    """The options of `orchestration.runner_options` shape the cluster the tasks actually run on:
    three in-process workers of two threads each (a default LocalCluster is never that)."""
    pytest.importorskip("prefect_dask")
    distributed = pytest.importorskip("distributed")
    options = {"n_workers": 3, "threads_per_worker": 2, "processes": False, "dashboard_address": None}
    local = config_from_dict(
        {"orchestration": {"task_runner": "dask", "runner_options": options}}, environ={}
    )
    _, shape = _run_on(local)
    assert shape == [("inproc", 2)] * 3
    # With runner_address the tasks run on that existing cluster.
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        remote = config_from_dict(
            {"orchestration": {"task_runner": "dask", "runner_address": cluster.scheduler_address}},
            environ={},
        )
        address, shape = _run_on(remote)
    assert address == cluster.scheduler_address and shape == [("inproc", 1)]


def test_a_build_starts_one_local_cluster_for_all_its_stages():
    """Dask without an address: the build's stages share one LocalCluster (made from
    `runner_options`), closed when the build ends; an address or the thread runner pass through."""
    pytest.importorskip("prefect_dask")
    import distributed

    from flows.common import one_cluster_per_build

    options = {"processes": False, "n_workers": 2, "threads_per_worker": 1, "dashboard_address": None}
    config = config_from_dict(
        {"orchestration": {"task_runner": "dask", "runner_options": options}}, environ={}
    )
    with one_cluster_per_build(config) as staged:
        address = staged.orchestration.runner_address
        assert address and staged.orchestration.runner_options == {}
        with distributed.Client(address, timeout=10) as client:
            assert len(client.scheduler_info()["workers"]) == 2
    with pytest.raises(OSError), distributed.Client(address, timeout=1):
        pass  # closed with the build

    for kept in ({"task_runner": "thread"}, {"task_runner": "dask", "runner_address": "tcp://10.0.0.1:8786"}):
        plain = config_from_dict({"orchestration": kept}, environ={})
        with one_cluster_per_build(plain) as staged:
            assert staged is plain


def test_ray_runner_gets_the_address_and_the_init_options():
    pytest.importorskip("prefect_ray")
    from flows.common import make_task_runner

    config = config_from_dict(
        {
            "orchestration": {
                "task_runner": "ray",
                "runner_address": "10.0.0.1:6379",
                "runner_options": {"namespace": "lenses", "log_to_driver": False},
            }
        },
        environ={},
    )
    runner = make_task_runner(config)
    assert runner.address == "10.0.0.1:6379"
    assert runner.init_kwargs == {"namespace": "lenses", "log_to_driver": False}
