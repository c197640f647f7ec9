"""Shards per second with 1, 2 and 3 single-threaded Dask worker processes on one run directory.

One coordinator (the stage flow, as `lenses run` uses it) maps a stage's shards over a real
`distributed.LocalCluster`. Ingest and dedupe (global steps, one task each) run once; then, for
1, 2 and 3 workers in this one process, a copy of that run goes through

  filter    one model request per image
  generate  prompts and captions, several requests per image

against `lenses simulate` in its own process with a fixed latency per request (as a GPU server
would add). Reported as ratios against 1 worker. Cluster start-up is not timed. Usage:
  .venv/bin/python benchmarks/bench_dask_workers.py [--images 384] [--shard-size 32] [--write FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ingest import cpu_pressure, make_images  # noqa: E402

WORKERS = (1, 2, 3)


def _config(run: Path, pool: Path, shard_size: int, address: str, sim_url: str):
    from lenses_data.config import config_from_dict
    from lenses_data.config.models import ROLES

    role = {"base_urls": [sim_url], "timeout_s": 30, "max_concurrency": 8}
    return config_from_dict(
        {
            "run_dir": str(run),
            "shard_size": shard_size,
            "ingest": {"sources": [str(pool)], "workers": 1},
            "models": {r: {**role, "model": "bench/" + r} for r in ROLES},
            "split": {"valid": 0.0, "test": 0.0},
            "orchestration": {"task_runner": "dask", "runner_address": address or None},
        },
        environ={},
    )


TIMED = ("filter", "generate")


def prepare(base: Path, pool: Path, shard_size: int, sim_url: str) -> None:
    """Ingest and dedupe once, on threads: every worker count starts from a copy of this run."""
    from flows.stages import run_stage_with_runner
    from lenses_data.stages.entry import guarded_stage

    config = _config(base, pool, shard_size, "", sim_url)
    config = config.model_copy(
        update={"orchestration": config.orchestration.model_copy(update={"task_runner": "thread"})}
    )
    for stage in ("ingest", "dedupe"):
        with guarded_stage(stage, config) as held:
            run_stage_with_runner(stage, config, held)


WARM_MODULES = ("flows.stages", "lenses_data.stages.filter", "lenses_data.stages.generate", "openai")


def _import_all() -> int:
    import importlib

    for name in WARM_MODULES:
        importlib.import_module(name)
    return os.getpid()


def warm_up(cluster) -> None:
    """Import the stage code in every worker first: a long-lived cluster has paid that already."""
    import distributed

    with distributed.Client(cluster.scheduler_address) as client:
        client.run(_import_all)


def time_stages(workers: int, base: Path, pool: Path, shard_size: int, sim_url: str) -> dict:
    """(seconds, shards) of filter and generate with `workers` worker processes on a copy of `base`."""
    import distributed

    from flows.stages import run_stage_with_runner
    from lenses_data.stages.entry import guarded_run

    timings = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        contextlib.ExitStack() as stack,
        distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
        ) as cluster,
    ):
        warm_up(cluster)
        run = Path(tmp) / "run"
        shutil.copytree(base, run)
        config = _config(run, pool, shard_size, cluster.scheduler_address, sim_url)
        held = stack.enter_context(guarded_run(run))
        for stage in ("filter", "split", "generate"):
            held.check_stage(stage, config)  # the settings guard, outside the timed part
            started = time.perf_counter()
            summary = run_stage_with_runner(stage, config, held)
            if stage in TIMED:
                timings[stage] = (time.perf_counter() - started, summary["shards"])
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=384)
    parser.add_argument("--shard-size", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.2, help="simulated seconds per model request")
    parser.add_argument("--write", help="write the markdown section to this file")
    args = parser.parse_args()
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from prefect.testing.utilities import prefect_test_harness

    from lenses_data.simulator.testing import spawn_simulator

    sim, sim_url = spawn_simulator(["--latency", str(args.latency), "--yes-rate", "1.0"])
    results: dict[int, dict[str, tuple[float, int]]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp, prefect_test_harness(server_startup_timeout=120):
            pool, base = Path(tmp) / "pool", Path(tmp) / "base"
            pool.mkdir()
            make_images(pool, args.images)
            prepare(base, pool, args.shard_size, sim_url)
            pressure_before = cpu_pressure()
            for workers in WORKERS:
                results[workers] = time_stages(workers, base, pool, args.shard_size, sim_url)
            pressure_after = cpu_pressure()
    finally:
        os.killpg(sim.pid, signal.SIGKILL)
    text = report(results, args, pressure_before, pressure_after)
    print(text)
    if args.write:
        Path(args.write).write_text(text)


def report(results, args, pressure_before: str, pressure_after: str) -> str:
    lines = [
        "## Dask workers: shards per second on one run directory",
        "",
        f"{args.images} generated 1.5 MP JPEGs, {args.shard_size} per shard; a real `distributed.LocalCluster`",
        "of single-threaded worker processes, one coordinator; model stages against `lenses simulate` in its",
        f"own process at {args.latency:g} s per request, `max_concurrency` 8 per worker; {os.cpu_count()} CPUs,",
        f"CPU pressure (PSI some avg10) {pressure_before} before, {pressure_after} after.",
        "",
        "| stage | workers | shards | seconds | shards/s | ratio vs 1 worker |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for stage in TIMED:
        base_seconds, _ = results[1][stage]
        for workers in WORKERS:
            seconds, shards = results[workers][stage]
            lines.append(
                f"| {stage} | {workers} | {shards} | {seconds:.1f} | {shards / seconds:.2f} "
                f"| {base_seconds / seconds:.2f}x |"
            )
    lines += [
        "",
        "Both stages are bound by the model's latency: each worker process adds its own `max_concurrency`",
        "requests in flight, so shards/s grows with workers until the client's CPU work (2 cores here) or",
        "the server's capacity is the limit. Ingest and dedupe are one task each (ingest spreads its own",
        "decoding over `ingest.workers` processes), so they do not appear here.",
        f"Command: `.venv/bin/python benchmarks/bench_dask_workers.py --images {args.images} "
        f"--shard-size {args.shard_size} --latency {args.latency:g}`.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
