"""Ray against Dask, two worker processes each: start-up, then shards per second of filter and generate.

The same shape as bench_dask_workers.py, in one process: ingest and dedupe once on threads, then a
copy of that run goes through filter and generate (split between them) on

  dask  a `distributed.LocalCluster` of 2 single-threaded worker processes
  ray   a local Ray head (`ray start --head --num-cpus 2`, tests/flows/ray_head.py), reached as an
        existing cluster, one driver connection for the stages (as a build makes it)

against `lenses simulate` in its own process at a fixed latency per request. Start-up is timed
from the cluster's start to its first connection; stage times include nothing of it, but the
first stage pays for importing the stage code in fresh workers on both (no warm-up on either).
Usage:
  PYTHONPATH=. .venv/bin/python benchmarks/bench_ray_vs_dask.py [--images 192] [--shard-size 16] [--write FILE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_dask_workers import TIMED, _config, prepare  # noqa: E402
from bench_ingest import cpu_pressure, make_images  # noqa: E402

WORKERS = 2


@contextmanager
def dask_cluster() -> Iterator[tuple[dict, float]]:
    import distributed

    started = time.perf_counter()
    with distributed.LocalCluster(
        n_workers=WORKERS, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
    ) as cluster:
        yield (
            {"task_runner": "dask", "runner_address": cluster.scheduler_address},
            time.perf_counter() - started,
        )


@contextmanager
def ray_cluster() -> Iterator[tuple[dict, float]]:
    from tests.flows.ray_head import ray_head

    with ray_head(cpus=WORKERS) as head:
        yield {"task_runner": "ray", "runner_address": head.address}, head.started_s


def time_stages(cluster, base: Path, pool: Path, shard_size: int, sim_url: str) -> dict:
    """Start-up seconds, and (seconds, shards) of filter and generate on a copy of `base`."""
    from flows.common import one_cluster_per_build
    from flows.stages import run_stage_with_runner
    from lenses_data.stages.entry import guarded_run

    timings: dict = {}
    with tempfile.TemporaryDirectory() as tmp, cluster() as (orchestration, startup_s):
        timings["startup"] = startup_s
        run = Path(tmp) / "run"
        shutil.copytree(base, run)
        config = _config(run, pool, shard_size, "", sim_url)
        config = config.model_copy(
            update={"orchestration": config.orchestration.model_copy(update=orchestration)}
        )
        with guarded_run(run) as held, one_cluster_per_build(config) as staged:
            for stage in ("filter", "split", "generate"):
                held.check_stage(stage, staged)  # the settings guard, outside the timed part
                started = time.perf_counter()
                summary = run_stage_with_runner(stage, staged, held)
                if stage in TIMED:
                    timings[stage] = (time.perf_counter() - started, summary["shards"])
    return timings


def _square(number: int) -> int:
    return number * number


def many_tasks(count: int) -> float:
    """Seconds for one flat map of `count` trivial Prefect tasks on a 2-CPU Ray head; every result
    is checked (prefect-ray was reported to hang at 15,000 tasks, PrefectHQ/prefect-ray#76)."""
    from prefect import flow, task
    from prefect_ray import RayTaskRunner

    from tests.flows.ray_head import ray_head

    with ray_head(cpus=WORKERS) as head:

        @flow(task_runner=RayTaskRunner(address=head.address))
        def flat_map() -> list[int]:
            return task(_square).map(range(count)).result()

        started = time.perf_counter()
        results = flat_map()
        seconds = time.perf_counter() - started
    if results != [n * n for n in range(count)]:
        raise AssertionError("a task of the flat map returned a wrong result or none")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=192)
    parser.add_argument("--shard-size", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.2, help="simulated seconds per model request")
    parser.add_argument("--write", help="write the markdown section to this file")
    parser.add_argument("--ray-first", action="store_true", help="run Ray before Dask (order effects)")
    parser.add_argument("--many-tasks", type=int, default=0, help="also time a flat map of this many tasks")
    args = parser.parse_args()
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from prefect.testing.utilities import prefect_test_harness

    from lenses_data.simulator.testing import spawn_simulator

    sim, sim_url = spawn_simulator(["--latency", str(args.latency), "--yes-rate", "1.0"])
    results = {}
    try:
        with tempfile.TemporaryDirectory() as tmp, prefect_test_harness(server_startup_timeout=120):
            pool, base = Path(tmp) / "pool", Path(tmp) / "base"
            pool.mkdir()
            make_images(pool, args.images)
            prepare(base, pool, args.shard_size, sim_url)
            pressure_before = cpu_pressure()
            order = [("dask", dask_cluster), ("ray", ray_cluster)]
            for name, cluster in reversed(order) if args.ray_first else order:
                results[name] = time_stages(cluster, base, pool, args.shard_size, sim_url)
            if args.many_tasks:
                results["many_tasks"] = many_tasks(args.many_tasks)
            pressure_after = cpu_pressure()
    finally:
        os.killpg(sim.pid, signal.SIGKILL)
    text = report(results, args, pressure_before, pressure_after)
    print(text)
    if args.write:
        Path(args.write).write_text(text)


def report(results: dict, args, pressure_before: str, pressure_after: str) -> str:
    lines = [
        "## Ray against Dask: start-up and shards per second, 2 worker processes each",
        "",
        f"{args.images} generated 1.5 MP JPEGs, {args.shard_size} per shard; one coordinator; model stages",
        f"against `lenses simulate` in its own process at {args.latency:g} s per request, `max_concurrency` 8",
        f"per worker; {'Ray' if args.ray_first else 'Dask'} ran first; {os.cpu_count()} CPUs, CPU pressure (PSI some avg10) {pressure_before} before,",
        f"{pressure_after} after.",
        "",
        "| runner | start-up s | stage | shards | seconds | shards/s | ratio vs Dask |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for name in ("dask", "ray"):
        for stage in TIMED:
            seconds, shards = results[name][stage]
            ratio = results["dask"][stage][0] / seconds
            lines.append(
                f"| {name} | {results[name]['startup']:.1f} | {stage} | {shards} | {seconds:.1f} "
                f"| {shards / seconds:.2f} | {ratio:.2f}x |"
            )
    if "many_tasks" in results:
        seconds = results["many_tasks"]
        lines += [
            "",
            f"A flat map of {args.many_tasks} trivial Prefect tasks on a 2-CPU Ray head: all results back in "
            f"{seconds:.1f} s ({args.many_tasks / seconds:.1f} tasks/s).",
        ]
    lines += [
        "",
        f"Command: `PYTHONPATH=. .venv/bin/python benchmarks/bench_ray_vs_dask.py --images {args.images} "
        f"--shard-size {args.shard_size} --latency {args.latency:g} --many-tasks {args.many_tasks}"
        f"{' --ray-first' if args.ray_first else ''}`.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
