"""Fan-out rehearsal: a build with thousands of shard task runs on a real Prefect server.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_fanout.py --candidates 4000 \
        --builds 8 32 2000 8x16 --database sqlite postgres --write /tmp/fanout.md

Each build is `lenses run --config` in a subprocess with PREFECT_API_URL pointing at a fresh
`prefect server start` (its own process, on SQLite or on PostgreSQL from tests/support/postgres.py),
the Dask task runner on a temporary LocalCluster of 2 single-threaded worker processes, and every
model role answered by one `lenses simulate` process (no latency: the model work is cheap, so
what is left is the per-task cost). A build spec is SHARD_SIZE or SHARD_SIZExSHARDS_PER_TASK.

The pool is bench_rehearsal's collages at 160 px (folders of 500), generated once in a temporary
directory and deleted at the end. Per build: wall time, task runs (POST /api/task_runs/count),
their rate, how long after the build the server was still recording task runs, server CPU seconds
and peak RSS (process tree), latency of GET /api/health and POST /api/task_runs/count sampled every
second, non-200 answers, and error lines in the build's and the server's logs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_rehearsal  # noqa: E402
from fanout_server import Probe, count_task_runs, peak_rate, percentile, prefect_server, tree_usage  # noqa: E402

from lenses_data.stages.registry import STAGES  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# Lines that mean the API pushed back or failed: rate limits, server errors, SQLite lock contention.
TROUBLE = re.compile(r"Too Many Requests|database is locked|HTTPStatusError|Server error|Traceback|ERROR")


def parse_build(spec: str) -> tuple[int, int]:
    if spec.startswith("noop:"):  # N no-op task runs (fanout_noop.py): the server alone, no stage work
        return 0, int(spec.split(":")[1])
    size, _, per_task = spec.partition("x")
    return int(size), int(per_task or 1)


def write_config(path: Path, run: Path, pool: Path, sim_url: str, shard_size: int, per_task: int) -> None:
    from lenses_data.config.models import ROLES

    role = {"base_urls": [sim_url], "timeout_s": 60, "max_concurrency": 8}
    dask = {"n_workers": 2, "threads_per_worker": 1, "processes": True, "dashboard_address": None}
    config = {
        "run_dir": str(run),
        "shard_size": shard_size,
        "ingest": {"sources": [str(pool)], "workers": 1},
        "dedupe": {"hash_kind": "phash", "clip_model": None},
        "annotate": {"candidates_per_image": 1},
        "models": {r: {**role, "model": "bench/" + r} for r in ROLES},
        "orchestration": {"task_runner": "dask", "runner_options": dask, "shards_per_task": per_task},
    }
    path.write_text(json.dumps(config))


def trouble_lines(path: Path) -> list[str]:
    """Lines that match TROUBLE; a traceback is reported with the exception it ends in."""
    if not path.exists():
        return []
    lines = path.read_text(errors="replace").splitlines()
    found = []
    for i, line in enumerate(lines):
        if not TROUBLE.search(line):
            continue
        if line.lstrip().startswith("Traceback"):
            tail = next((later for later in lines[i + 1 :] if later and not later[0].isspace()), "")
            line = f"{line.strip()} -> {tail.strip()}"
        found.append(line.strip()[:300])
    return found


def stage_walls(run: Path, started: float) -> dict[str, float]:
    walls, previous = {}, started
    for stage in STAGES:
        marker = run / stage / "_SUCCESS.json"
        if marker.exists():
            end = marker.stat().st_mtime
            walls[stage] = end - previous
            previous = end
    return walls


def settle(
    probe: Probe, client: httpx.Client, api_url: str, quiet_s: float = 5.0, limit_s: float = 300
) -> float:
    """Seconds after the build until the task-run count stops growing (the server's backlog)."""
    started = last_change = time.monotonic()
    last = count_task_runs(client, api_url)
    while time.monotonic() - last_change < quiet_s and time.monotonic() - started < limit_s:
        time.sleep(1)
        now = count_task_runs(client, api_url)
        if now != last:
            last, last_change = now, time.monotonic()
    return last_change - started


def run_build(work: Path, pool: Path, sim_url: str, spec: str, db: tuple, port: int) -> dict:
    database_url, db_process = db
    shard_size, per_task = parse_build(spec)
    run, home = work / f"run-{spec}", work / f"prefect-{spec.replace(':', '-')}"
    work.mkdir(parents=True, exist_ok=True)
    config = work / f"config-{spec}.json"
    if shard_size:
        write_config(config, run, pool, sim_url, shard_size, per_task)
        command = [sys.executable, "-m", "lenses_app.cli", "run", "--config", str(config)]
    else:
        command = [sys.executable, str(REPO / "benchmarks" / "fanout_noop.py"), "--tasks", str(per_task)]
    log = work / f"build-{spec.replace(':', '-')}.log"
    with prefect_server(home, port, database_url) as (api_url, server), httpx.Client(timeout=60) as client:
        env = {**os.environ, "PREFECT_API_URL": api_url, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
        cpu0, _ = tree_usage(server)
        db_cpu0 = tree_usage(db_process)[0] if db_process else 0.0
        probe = Probe(api_url, server, database=db_process).start()
        started, wall_started = time.monotonic(), time.time()
        build_cpu, build_rss = 0.0, 0
        with log.open("w") as out:
            child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
            proc = psutil.Process(child.pid)
            while child.poll() is None:
                cpu, rss = tree_usage(proc)  # descendants that already ended are not counted
                build_cpu, build_rss = max(build_cpu, cpu), max(build_rss, rss)
                time.sleep(1)
        wall = time.monotonic() - started
        backlog = settle(probe, client, api_url)
        probe.stop()
        cpu1, _ = tree_usage(server)
        db_cpu = tree_usage(db_process)[0] - db_cpu0 if db_process else 0.0
        task_runs = count_task_runs(client, api_url)
    result = {
        "spec": spec, "shard_size": shard_size, "shards_per_task": per_task, "returncode": child.returncode,
        "wall_s": wall, "task_runs": task_runs, "rate": task_runs / wall, "peak_rate_10s": peak_rate(probe.counts),
        "backlog_s": backlog, "server_cpu_s": cpu1 - cpu0, "server_peak_rss": probe.peak_rss,
        "db_cpu_s": db_cpu, "db_peak_rss": probe.db_peak_rss,
        "build_cpu_s": build_cpu, "build_peak_rss": build_rss,
        "health_ms": [percentile(probe.health_ms, q) for q in (0.5, 0.95, 1.0)],
        "count_ms": [percentile(probe.count_ms, q) for q in (0.5, 0.95, 1.0)],
        "probe_errors": probe.errors,
        "series": [(round(t - started), round(c - cpu0, 1), n) for t, c, n in probe.series][::5],
        "stage_walls": stage_walls(run, wall_started),
        "build_trouble": trouble_lines(log)[:20], "server_trouble": trouble_lines(home / "server.log")[:20],
    }  # fmt: skip
    if child.returncode:
        shutil.copy(log, Path(tempfile.gettempdir()) / f"fanout-failed-{spec}.log")
    shutil.rmtree(run, ignore_errors=True)  # keep disk use modest: the figures are in `result`
    return result


def _ms(values: list[float]) -> str:
    return " / ".join(f"{v:.0f}" for v in values)


def report(results: list[dict], candidates: int) -> str:
    lines = [
        f"Fan-out rehearsal: {candidates} candidates, Dask LocalCluster 2 x 1 thread, {os.cpu_count()} CPUs",
        "",
        "| db | build | wall s | task runs | runs/s (peak 10 s) | backlog s | server CPU s (% of wall) "
        "| server peak MiB | PostgreSQL CPU s / peak MiB | build CPU s | health ms p50/p95/max | count ms p50/p95/max | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|---|---|",
    ]
    for r in results:
        errors = sum(r["probe_errors"].values()) + len(r["build_trouble"]) + len(r["server_trouble"])
        lines.append(
            f"| {r['db']} | {r['spec']} | {r['wall_s']:.0f} | {r['task_runs']} | {r['rate']:.1f} "
            f"({r['peak_rate_10s']:.1f}) | {r['backlog_s']:.0f} | {r['server_cpu_s']:.0f} "
            f"({100 * r['server_cpu_s'] / r['wall_s']:.0f}%) | {r['server_peak_rss'] / 2**20:.0f} "
            f"| {r['db_cpu_s']:.0f} / {r['db_peak_rss'] / 2**20:.0f} | {r['build_cpu_s']:.0f} | {_ms(r['health_ms'])} | {_ms(r['count_ms'])} | {errors} |"
        )
    lines += ["", "Stage walls (s):", ""]
    for r in results:
        walls = ", ".join(f"{k} {v:.0f}" for k, v in r["stage_walls"].items())
        lines.append(f"- {r['db']} {r['spec']} (exit {r['returncode']}): {walls}")
    return "\n".join(lines)


@contextlib.contextmanager
def database(kind: str, base: Path) -> Iterator[tuple[str | None, psutil.Process | None]]:
    """A fresh database per build: (URL, its postmaster process), or (None, None) for SQLite in the
    server's home."""
    if kind == "sqlite":
        yield None, None
        return
    from tests.support.postgres import start_postgres  # a throwaway PostgreSQL cluster

    with start_postgres(base) as pg:
        pid = int((pg.data_dir / "postmaster.pid").read_text().split()[0])
        yield pg.asyncpg_url, psutil.Process(pid)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--candidates", type=int, default=4000, help="pool size (a multiple of 500)")
    parser.add_argument(
        "--builds", nargs="+", default=["8", "2000"], help="SHARD_SIZE or SHARD_SIZExSHARDS_PER_TASK"
    )
    parser.add_argument("--database", nargs="+", default=["sqlite"], choices=["sqlite", "postgres"])
    parser.add_argument("--tmp", default=None, help="parent of the temporary directory")
    parser.add_argument("--write", help="also write the table (and raw JSON beside it) here")
    args = parser.parse_args()
    from lenses_data.simulator.simulator import free_port
    from lenses_data.simulator.testing import spawn_simulator

    bench_rehearsal.LONG_SIDE = 160  # small images: the per-image work is not what is measured
    results = []
    with tempfile.TemporaryDirectory(prefix="fanout-", dir=args.tmp) as tmp:
        work, pool = Path(tmp), Path(tmp) / "pool"
        made = time.monotonic()
        size, _ = bench_rehearsal.make_pool(pool, args.candidates)
        print(
            f"pool: {args.candidates} images, {size / 2**20:.0f} MiB in {time.monotonic() - made:.0f} s",
            flush=True,
        )
        with (work / "sim.log").open("w") as sim_log:
            sim, sim_url = spawn_simulator(["--yes-rate", "0.85", "--latency", "0"], log=sim_log)
        try:
            for kind in args.database:
                for spec in args.builds:
                    with database(kind, work / f"pg-{spec}") as (url, db):
                        result = {
                            "db": kind,
                            **run_build(work / kind, pool, sim_url, spec, (url, db), free_port()),
                        }
                    results.append(result)
                    print(json.dumps(result), flush=True)
                    if args.write:
                        Path(args.write).with_suffix(".json").write_text(json.dumps(results, indent=1))
        finally:
            os.killpg(sim.pid, 9)
            sim.wait()
    text = report(results, args.candidates)
    print(text)
    if args.write:
        Path(args.write).write_text(text + "\n")


if __name__ == "__main__":
    main()
