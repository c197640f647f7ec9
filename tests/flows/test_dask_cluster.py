"""The build on a real Dask cluster of worker processes: the engine hands each shard to one worker.

- Three worker processes on one run directory: every shard is processed once (no model request is
  sent twice, no journal line is written twice) and the dataset equals the thread runner's.
- A worker SIGKILLed in the middle of a generate shard: after a rerun the dataset equals a clean
  run's, nothing is lost, and the model calls repeated are at most the requests that were in flight.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lenses_data.config.models import ROLES
from lenses_data.simulator.testing import sim_stats, spawn_simulator

distributed = pytest.importorskip("distributed")
pytest.importorskip("prefect_dask")

MAX_CONCURRENCY = 4


@pytest.fixture
def cluster() -> Iterator[distributed.LocalCluster]:
    with distributed.LocalCluster(
        n_workers=3, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
    ) as local:
        yield local


@pytest.fixture
def start_simulator(tmp_path: Path) -> Iterator:
    started: list[subprocess.Popen] = []

    def start(name: str, latency: float) -> str:
        with (tmp_path / f"{name}.log").open("w") as log:
            process, url = spawn_simulator(["--yes-rate", "0.85", "--latency", str(latency)], log=log)
        started.append(process)
        return url

    yield start
    for process in started:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _config(path: Path, run: Path, sources: list[str], url: str, orchestration: dict) -> str:
    role = {"base_urls": [url], "timeout_s": 10, "max_concurrency": MAX_CONCURRENCY}
    models = {r: {**role, "model": "test/" + r} for r in ROLES}
    config = {
        "run_dir": str(run),
        "shard_size": 4,
        # Two decode processes: ingest then runs inside a (daemonic) Dask worker process.
        "ingest": {"sources": sources, "workers": 2},
        "split": {"valid": 0.15, "test": 0.3, "seed": "dask"},
        "models": models,
        "orchestration": {"retry_delay_s": 0, **orchestration},
    }
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _build(config_path: str) -> dict:
    from flows.build import build_dataset

    return build_dataset(config_path=config_path)


def _dataset(run: Path) -> dict[str, pd.DataFrame]:
    frames = {}
    for name, key in (("images", "image_id"), ("captions", "text_id"), ("prompts", "text_id")):
        frame = pd.read_parquet(run / "export" / f"{name}.parquet").drop(columns=["path"], errors="ignore")
        assert not frame[key].duplicated().any(), f"duplicated {key} in {name}"
        frames[name] = frame.sort_values(key).reset_index(drop=True)
    return frames


def _assert_same_dataset(left: Path, right: Path) -> None:
    a, b = _dataset(left), _dataset(right)
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], obj=name)


def _pipeline_calls(stats: dict) -> dict[str, int]:
    """Calls per request hash of the stages' own requests. Capability probes (key `probe:<role>`) are
    left out: every worker process probes each role once, by design."""
    return {h: n for h, n in stats["calls"].items() if not stats["keys"].get(h, "").startswith("probe:")}


def _journal_lines(run: Path) -> list[dict]:
    return [json.loads(line) for p in sorted((run / "journal").glob("*/part-*.jsonl")) for line in p.open()]


def _dask(cluster: distributed.LocalCluster) -> dict:
    return {"task_runner": "dask", "runner_address": cluster.scheduler_address}


@pytest.mark.slow
def test_three_dask_workers_process_each_shard_once(
    prefect_harness, cluster, start_simulator, sample_pool, tmp_path
):
    sources = [str(sample_pool), str(sample_pool / "cc3m.tsv")]
    threads_url, dask_url = start_simulator("threads", 0.01), start_simulator("dask", 0.01)
    threads_run, dask_run = tmp_path / "threads", tmp_path / "dask"
    _build(_config(tmp_path / "t.yaml", threads_run, sources, threads_url, {"task_runner": "thread"}))
    result = _build(_config(tmp_path / "d.yaml", dask_run, sources, dask_url, _dask(cluster)))

    assert result["stages"][2]["shards"] >= 6  # enough shards that all three workers get some
    _assert_same_dataset(threads_run, dask_run)
    calls = _pipeline_calls(sim_stats(dask_url))
    assert sum(calls.values()) == len(calls) > 0  # no request of a stage was ever sent twice
    lines = _journal_lines(dask_run)
    assert len(lines) == len({line["hash"] for line in lines}) == len(calls)


def _kill_a_worker_mid_generate(cluster, run: Path, done: threading.Event) -> int | None:
    """SIGKILL the worker process running a generate shard once that shard has journaled answers."""
    client = distributed.Client(cluster.scheduler_address, timeout=30)
    try:
        pids = client.run(os.getpid)  # worker address -> pid
        while not done.is_set():
            processing = {w: ts for w, ts in client.processing().items() if ts}
            journaled = list((run / "journal" / "generate").glob("part-*.jsonl"))
            if journaled and any(p.stat().st_size for p in journaled) and processing:
                busy = [w for w, tasks in processing.items() if any("generate" in str(t) for t in tasks)]
                for address in busy or list(processing):
                    os.kill(pids[address], signal.SIGKILL)
                    return pids[address]
            time.sleep(0.02)
        return None
    finally:
        client.close()


@pytest.mark.slow
def test_a_killed_dask_worker_costs_only_its_requests_in_flight(
    prefect_harness, cluster, start_simulator, sample_pool, tmp_path
):
    sources = [str(sample_pool), str(sample_pool / "cc3m.tsv")]
    clean_url, url = start_simulator("clean", 0.01), start_simulator("killed", 0.15)
    clean_run, run = tmp_path / "clean", tmp_path / "killed"
    _build(_config(tmp_path / "c.yaml", clean_run, sources, clean_url, {"task_runner": "thread"}))

    config_path = _config(tmp_path / "k.yaml", run, sources, url, {**_dask(cluster), "task_retries": 0})
    done, outcome = threading.Event(), {}

    def first_run() -> None:
        try:
            outcome["result"] = _build(config_path)
        except BaseException as error:  # the killed shard may fail the flow: the rerun resumes it
            outcome["error"] = error
        finally:
            done.set()

    runner = threading.Thread(target=first_run)
    runner.start()
    killed = _kill_a_worker_mid_generate(cluster, run, done)
    runner.join(timeout=600)
    assert not runner.is_alive(), "the first run hung after its worker was killed"
    assert killed is not None, "the build ended before a generate shard was in flight"

    _build(config_path)  # the rerun: finished shards are skipped, journaled answers replayed
    _assert_same_dataset(clean_run, run)
    calls = _pipeline_calls(sim_stats(url))
    repeated = sum(calls.values()) - len(calls)
    assert repeated <= MAX_CONCURRENCY, (
        f"{repeated} model calls repeated (one worker, {MAX_CONCURRENCY} in flight)"
    )
