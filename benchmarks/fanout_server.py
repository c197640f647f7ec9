"""A `prefect server start` in its own process, and a probe that samples it once a second.

Used by bench_fanout.py. The server runs on SQLite (a file in its home) or on a PostgreSQL URL;
the probe records the server's process-tree CPU seconds and RSS, the latency of a cheap endpoint
(GET /api/health) and of one that reads the database (POST /api/task_runs/count), the task-run
count over time, and every non-200 answer or transport error.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from tests.support.prefect_server import prefect_server_process


def server_env(home: Path, database_url: str | None, api_url: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "PREFECT_HOME": str(home),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_API_DATABASE_CONNECTION_URL": database_url or f"sqlite+aiosqlite:///{home}/prefect.db",
            "PREFECT_SERVER_API_HOST": "127.0.0.1",
            "PREFECT_UI_ENABLED": "false",
        }
    )
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return env


@contextmanager
def prefect_server(home: Path, port: int, database_url: str | None) -> Iterator[tuple[str, psutil.Process]]:
    """Start the server, wait for /api/health; yields (api_url, its process)."""
    with prefect_server_process(home, port, server_env(home, database_url)) as (api_url, proc):
        yield api_url, psutil.Process(proc.pid)


def tree_usage(process: psutil.Process) -> tuple[float, int]:
    """(CPU seconds, RSS bytes) summed over a process and its descendants."""
    cpu, rss = 0.0, 0
    for proc in [process, *process.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            cpu += times.user + times.system + times.children_user + times.children_system
            rss += proc.memory_info().rss
        except psutil.Error:
            continue
    return cpu, rss


def count_task_runs(client: httpx.Client, api_url: str) -> int:
    response = client.post(f"{api_url}/task_runs/count", json={})
    response.raise_for_status()
    return int(response.json())


@dataclass
class Probe:
    """Samples the server once a second in a thread until `stop()`."""

    api_url: str
    server: psutil.Process
    database: psutil.Process | None = None  # PostgreSQL's postmaster (its backends are children)
    interval_s: float = 1.0
    health_ms: list[float] = field(default_factory=list)
    count_ms: list[float] = field(default_factory=list)
    counts: list[tuple[float, int]] = field(default_factory=list)  # (monotonic time, task runs)
    cpu: list[tuple[float, float]] = field(default_factory=list)  # (monotonic time, CPU seconds)
    series: list[tuple[float, float, int]] = field(
        default_factory=list
    )  # (time, CPU s, task runs; -1: failed)
    peak_rss: int = 0
    db_peak_rss: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> Probe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _error(self, key: str) -> None:
        self.errors[key] = self.errors.get(key, 0) + 1

    def _timed(
        self, client: httpx.Client, method: str, path: str, into: list[float]
    ) -> httpx.Response | None:
        started = time.perf_counter()
        try:
            response = client.request(method, f"{self.api_url}{path}", json={} if method == "POST" else None)
        except httpx.HTTPError as error:
            self._error(f"{path}: {type(error).__name__}")
            return None
        into.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            self._error(f"{path}: HTTP {response.status_code}")
            return None
        return response

    def sample(self, client: httpx.Client) -> None:
        now = time.monotonic()
        cpu, rss = tree_usage(self.server)
        self.cpu.append((now, cpu))
        self.peak_rss = max(self.peak_rss, rss)
        if self.database is not None:
            self.db_peak_rss = max(self.db_peak_rss, tree_usage(self.database)[1])
        self._timed(client, "GET", "/health", self.health_ms)
        counted = self._timed(client, "POST", "/task_runs/count", self.count_ms)
        if counted is not None:
            self.counts.append((now, int(counted.json())))
        self.series.append((now, cpu, self.counts[-1][1] if counted is not None else -1))

    def _loop(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                started = time.monotonic()
                self.sample(client)
                self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def peak_rate(counts: list[tuple[float, int]], window_s: float = 10.0) -> float:
    """Most task runs recorded per second over any `window_s` window of the samples."""
    best = 0.0
    for i, (t0, c0) in enumerate(counts):
        for t1, c1 in counts[i + 1 :]:
            if t1 - t0 >= window_s:
                best = max(best, (c1 - c0) / (t1 - t0))
                break
    return best
