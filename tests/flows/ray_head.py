"""A local Ray cluster for tests and benchmarks: `ray start --head --block` in its own session."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from lenses_data.simulator.simulator import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


class RayHead(NamedTuple):
    address: str
    session: int  # `ray start`'s session id: the head's processes and its worker processes
    started_s: float  # from `ray start` to the first driver connected


def ray_start_command(port: int, cpus: int, temp_dir: str) -> list[str]:
    """A small head node: `cpus` CPUs (one worker process per CPU runs tasks), a 200 MB object store,
    no dashboard. Every port it listens on is a free one: the fixed defaults (10001, 52365, 8265)
    would collide with another Ray on a shared machine."""
    dashboard, client, agent, metrics = (free_port() for _ in range(4))
    return [
        str(Path(sys.executable).parent / "ray"),
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        f"--port={port}",
        f"--num-cpus={cpus}",
        "--object-store-memory=200000000",
        "--include-dashboard=false",
        f"--dashboard-port={dashboard}",
        f"--ray-client-server-port={client}",
        f"--dashboard-agent-listen-port={agent}",
        f"--metrics-export-port={metrics}",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
    ]


@contextlib.contextmanager
def ray_head(cpus: int = 2, start_timeout_s: float = 120.0) -> Iterator[RayHead]:
    """Start a Ray head whose workers import this checkout; stop it and all its processes after."""
    import ray

    port = free_port()
    # A short temp dir: Ray's socket paths must stay under 107 characters (pytest's tmp_path is long).
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    log_path = Path(temp_dir) / "head.log"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    started = time.monotonic()
    with log_path.open("w") as log:
        head = subprocess.Popen(
            ray_start_command(port, cpus, temp_dir),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    address = f"127.0.0.1:{port}"
    try:
        while not _connects(ray, address):
            if head.poll() is not None:
                raise RuntimeError(f"ray start exited: {log_path.read_text()[-3000:]}")
            if time.monotonic() - started > start_timeout_s:
                raise TimeoutError(f"the Ray head did not start in {start_timeout_s:.0f} s")
            time.sleep(0.5)
        yield RayHead(address, head.pid, time.monotonic() - started)
    finally:
        _stop(head)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _connects(ray, address: str) -> bool:
    try:
        ray.init(address=address, logging_level="WARNING", log_to_driver=False)
    except ConnectionError:
        return False
    ray.shutdown()
    return True


def _stop(head: subprocess.Popen) -> None:
    head.send_signal(signal.SIGTERM)  # `ray start --block` stops the head's processes on SIGTERM
    try:
        head.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(head.pid, signal.SIGKILL)  # whatever is left of its session


def busy_workers(session: int, task_name: str) -> list[int]:
    """Worker processes of the cluster running `task_name` now (Ray titles a busy worker `ray::<task>`)."""
    busy = []
    title = f"ray::{task_name}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0]
            if argv0.startswith(title) and os.getsid(int(entry.name)) == session:
                busy.append(int(entry.name))
        except (OSError, ProcessLookupError):
            continue  # ended while looked at
    return busy
