"""The build on a local Ray cluster (`ray start --head`, two worker processes) through prefect-ray.

One build on Ray (it costs ~2.5 min on this shared machine, so one, not a clean one and a killed
one), compared with the same build on the thread runner. A Ray worker process is SIGKILLed in the
middle of a generate shard, and:

- every shard is processed exactly once: one Prefect task run per shard, each stage's shard files
  on disk as on threads, the funnel holds (in = out + rejected), and the dataset equals the thread
  runner's;
- the kill costs only the requests the worker had in flight: Ray reruns that task on another
  worker with the same Prefect task run (the one task run that shows two Running states), the
  shard's journal replays what the killed worker had journaled (every answer journaled once, at most
  `max_concurrency` model calls repeated), and the build completes without being rerun.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lenses_data.simulator.testing import sim_stats, spawn_simulator
from tests.flows.prefect_api import stage_task_histories
from tests.flows.ray_head import RayHead, busy_workers, ray_head
from tests.flows.test_dask_cluster import (
    MAX_CONCURRENCY,
    _assert_same_dataset,
    _build,
    _config,
    _journal_lines,
    _pipeline_calls,
)

ray = pytest.importorskip("ray")
pytest.importorskip("prefect_ray")


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayHead]:
    with ray_head(cpus=2) as head:  # two worker processes run shard tasks at once
        yield head


@pytest.fixture(scope="module")
def simulators(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """`start(name, latency)` starts a simulator and returns its URL; all stop with the module."""
    logs = tmp_path_factory.mktemp("ray-simulators")
    started: list[subprocess.Popen] = []

    def start(name: str, latency: float) -> str:
        with (logs / f"{name}.log").open("w") as log:
            process, url = spawn_simulator(["--yes-rate", "0.85", "--latency", str(latency)], log=log)
        started.append(process)
        return url

    yield start
    for process in started:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture(scope="module")
def sources(sample_pool: Path) -> list[str]:
    return [str(sample_pool), str(sample_pool / "cc3m.tsv")]


@pytest.fixture(scope="module")
def reference(prefect_harness, simulators, sources, tmp_path_factory) -> tuple[Path, dict]:
    """The same build on the thread runner: the dataset both Ray builds must equal."""
    folder = tmp_path_factory.mktemp("ray-reference")
    url = simulators("threads", 0.01)
    result = _build(_config(folder / "t.yaml", folder / "run", sources, url, {"task_runner": "thread"}))
    return folder / "run", result


def _ray(cluster: RayHead, **options: object) -> dict:
    return {"task_runner": "ray", "runner_address": cluster.address, **options}


def _shard_files(run: Path) -> list[str]:
    """Every shard output and rejections file of a run (`<stage>/part-N`, `rejections/<stage>-part-N`)."""
    files = [*run.glob("*/part-*.parquet"), *(run / "rejections").glob("*-part-*.parquet")]
    return sorted(str(path.relative_to(run)) for path in files)


def _assert_every_shard_once(run: Path, result: dict, reference: tuple[Path, dict]) -> None:
    """Each stage ran as many shards as on the thread runner and wrote the same shard files, and the
    funnel holds: every record in is out or rejected, and a stage takes in what the one before put
    out (generate makes several texts of an image: its in and out differ)."""
    stages, expected = result["stages"], reference[1]["stages"]
    assert [(s["stage"], s["shards"]) for s in stages] == [(s["stage"], s["shards"]) for s in expected]
    assert _shard_files(run) == _shard_files(reference[0]) != []
    for summary in stages:
        if summary["stage"] != "generate":
            assert summary["records_in"] == summary["records_out"] + summary["rejected"], summary["stage"]
    for before, after in zip(stages, stages[1:], strict=False):
        assert after["records_in"] == before["records_out"], (before["stage"], after["stage"])


def _generate_shard_in_flight(run: Path) -> bool:
    """A generate shard has journaled answers but not written its output yet."""
    for journal in (run / "journal" / "generate").glob("part-*.jsonl"):
        if (
            journal.stat().st_size
            and not (run / "generate" / journal.name.replace(".jsonl", ".parquet")).exists()
        ):
            return True
    return False


def _kill_a_worker_mid_generate(cluster: RayHead, run: Path, done: threading.Event) -> int | None:
    while not done.is_set():
        busy = busy_workers(cluster.session, "process_shard_task") if _generate_shard_in_flight(run) else []
        if busy:
            os.kill(busy[0], signal.SIGKILL)
            return busy[0]
        time.sleep(0.02)
    return None


@pytest.mark.slow
def test_ray_processes_each_shard_once_and_a_killed_worker_costs_only_its_requests_in_flight(
    ray_cluster, reference, simulators, sources, tmp_path
):
    url = simulators("ray", 0.15)
    run = tmp_path / "ray"
    # No Prefect retries: the shard the killed worker ran is rerun by Ray, on another worker.
    config_path = _config(tmp_path / "r.yaml", run, sources, url, _ray(ray_cluster, task_retries=0))
    state, killed = _build_killing_a_worker_mid_generate(ray_cluster, config_path, run)
    assert killed is not None, "the build ended before a generate shard was in flight"
    assert state.is_completed(), f"the build failed after the kill: {state.message}"
    result = state.result()

    assert result["stages"][4]["shards"] >= 4  # enough generate shards that both workers get some
    _assert_every_shard_once(run, result, reference)
    _assert_same_dataset(reference[0], run)
    calls = _pipeline_calls(sim_stats(url))
    repeated = sum(calls.values()) - len(calls)
    assert repeated <= MAX_CONCURRENCY, (
        f"{repeated} model calls repeated (one worker, {MAX_CONCURRENCY} in flight)"
    )
    lines = _journal_lines(run)  # each answer journaled once, the killed worker's ones included
    assert len(lines) == len({line["hash"] for line in lines}) == len(calls)
    # One task run per shard of every stage, all completed, each run once but the killed one: Ray
    # reran that with the same task run id, so its history reads Pending, Running, Pending, Running.
    histories = {
        name: runs
        for name, runs in stage_task_histories(state.state_details.flow_run_id).items()
        if "-shard-" in name
    }
    assert len(histories) == sum(s["shards"] for s in result["stages"])
    assert all(len(runs) == 1 and runs[0][-1] == "COMPLETED" for runs in histories.values()), histories
    runs_of = {name: runs[0].count("RUNNING") for name, runs in histories.items()}
    assert sorted(runs_of.values()) == [1] * (len(runs_of) - 1) + [2], histories
    assert max(runs_of, key=runs_of.__getitem__).startswith("generate-shard-"), histories


def _build_killing_a_worker_mid_generate(cluster: RayHead, config_path: str, run: Path):
    """Run the build in a thread and SIGKILL a Ray worker once a generate shard is in flight;
    returns the build's final state and the pid killed (None: no generate shard was seen running)."""
    from flows.build import build_dataset

    done, outcome = threading.Event(), {}

    def build() -> None:
        try:
            outcome["state"] = build_dataset(config_path=config_path, return_state=True)
        finally:
            done.set()

    runner = threading.Thread(target=build)
    runner.start()
    killed = _kill_a_worker_mid_generate(cluster, run, done)
    runner.join(timeout=600)
    assert not runner.is_alive(), "the build hung after its Ray worker was killed"
    assert "state" in outcome, "the build raised instead of returning a state (see the log above)"
    return outcome["state"], killed


@pytest.mark.slow
def test_a_build_connects_to_ray_once_for_all_its_stages(ray_cluster):
    """Each stage's RayTaskRunner finds the build's connection and keeps it: one Ray job per build
    (a job per stage started every stage's workers cold). A caller's own connection is left open."""
    from flows.common import make_task_runner, one_cluster_per_build
    from lenses_data.config import config_from_dict

    config = config_from_dict({"orchestration": _ray(ray_cluster)}, environ={})
    with one_cluster_per_build(config) as staged:
        job = ray.get_runtime_context().get_job_id()
        for _ in range(2):  # two stages
            with make_task_runner(staged):
                assert ray.get_runtime_context().get_job_id() == job
            assert ray.is_initialized()
    assert not ray.is_initialized()

    ray.init(address=ray_cluster.address, log_to_driver=False)
    try:
        with one_cluster_per_build(config):
            pass
        assert ray.is_initialized()
    finally:
        ray.shutdown()
