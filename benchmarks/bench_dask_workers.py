"""Shards per second with 1, 2 and 3 single-threaded Dask worker processes on one run directory.

One coordinator (the stage flow, as `lenses run` uses it) maps a stage's shards over a real
`distributed.LocalCluster`. Two workloads, each timed with 1, 2 and 3 workers in this one process and
reported as ratios against 1 worker:

  ingest   CPU-bound: decode check, sha256 and metadata of generated 1.5 MP JPEGs
  filter   I/O-bound: one model request per image against `lenses simulate` in its own process
           with a fixed latency per request (as a GPU server would add)

Cluster start-up is not timed. Usage:
  .venv/bin/python benchmarks/bench_dask_workers.py [--images 768] [--shard-size 32] [--write FILE]
"""

from __future__ import annotations

import argparse
import os
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
            "orchestration": {"task_runner": "dask", "runner_address": address},
        },
        environ={},
    )


def time_stages(workers: int, pool: Path, shard_size: int, sim_url: str) -> dict[str, tuple[float, int]]:
    """(seconds, shards) per stage for ingest then dedupe (untimed) then filter, on a fresh run."""
    import distributed

    from flows.stages import run_stage_with_runner

    timings = {}
    with (
        tempfile.TemporaryDirectory() as run,
        distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
        ) as cluster,
    ):
        config = _config(Path(run), pool, shard_size, cluster.scheduler_address, sim_url)
        for stage in ("ingest", "dedupe", "filter"):
            started = time.perf_counter()
            summary = run_stage_with_runner(stage, config)
            if stage != "dedupe":  # dedupe is one global shard: nothing to spread
                timings[stage] = (time.perf_counter() - started, summary["shards"])
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=768)
    parser.add_argument("--shard-size", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.05, help="simulated seconds per model request")
    parser.add_argument("--write", help="write the markdown section to this file")
    args = parser.parse_args()
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from prefect.testing.utilities import prefect_test_harness

    from lenses_data.models.testing import spawn_simulator

    sim, sim_url = spawn_simulator(["--latency", str(args.latency), "--yes-rate", "1.0"])
    results: dict[int, dict[str, tuple[float, int]]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp, prefect_test_harness(server_startup_timeout=120):
            pool = Path(tmp)
            make_images(pool, args.images)
            pressure_before = cpu_pressure()
            for workers in WORKERS:
                results[workers] = time_stages(workers, pool, args.shard_size, sim_url)
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
        "of single-threaded worker processes, one coordinator; filter against `lenses simulate` in its own",
        f"process at {args.latency:g} s per request, `max_concurrency` 8 per worker; {os.cpu_count()} CPUs,",
        f"CPU pressure (PSI some avg10) {pressure_before} before, {pressure_after} after.",
        "",
        "| stage | workers | shards | seconds | shards/s | ratio vs 1 worker |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for stage in ("ingest", "filter"):
        base_seconds, _ = results[1][stage]
        for workers in WORKERS:
            seconds, shards = results[workers][stage]
            lines.append(
                f"| {stage} | {workers} | {shards} | {seconds:.1f} | {shards / seconds:.2f} "
                f"| {base_seconds / seconds:.2f}x |"
            )
    lines += [
        "",
        "Ingest is CPU-bound: on 2 cores a third worker has no core of its own. The filter is bound by",
        "the model's latency: each worker process adds its own `max_concurrency` requests in flight.",
        f"Command: `.venv/bin/python benchmarks/bench_dask_workers.py --images {args.images} "
        f"--shard-size {args.shard_size} --latency {args.latency:g}`.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
