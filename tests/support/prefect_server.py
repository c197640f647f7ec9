"""`prefect server start` in its own process on 127.0.0.1, waited for until /api/health answers.

Shared by the deployment tests' session fixture (tests/flows/conftest.py), the fan-out benchmark
(benchmarks/fanout_server.py) and `make mutation`'s one server for flow modules (tools/mutation.py,
which loads this file by path, so it imports nothing of the project); each passes the environment it
needs (`prefect_env`, with its own database URL or logging on top).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]


def prefect_env(home: Path, api_url: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "PREFECT_HOME": str(home),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{home}/prefect.db",
            "PREFECT_SERVER_API_HOST": "127.0.0.1",
            "PREFECT_UI_ENABLED": "false",
            "PREFECT_LOGGING_LEVEL": "INFO",
            # As docs/deploy.md starts the server: `prefect deployment run --watch` streams the run's logs.
            "PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED": "true",
            "PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED": "true",
            "LENSES_HOME": str(REPO_ROOT),
            "PYTHONPATH": str(REPO_ROOT),
        }
    )
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return env


@contextmanager
def prefect_server_process(
    home: Path, port: int, env: dict[str, str], timeout_s: float = 180
) -> Iterator[tuple[str, subprocess.Popen]]:
    """Start the server with `env` (its log in home/server.log); yields (api_url, process).

    Raises RuntimeError with the log's tail when the server exits, TimeoutError when it is not healthy
    in `timeout_s`. The server is terminated (killed after 30 s) when the block ends, also on error.
    """
    api_url = f"http://127.0.0.1:{port}/api"
    prefect = str(Path(sys.executable).parent / "prefect")
    home.mkdir(parents=True, exist_ok=True)
    log_path = home / "server.log"
    command = [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui"]
    with log_path.open("w") as log:
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_until_healthy(proc, api_url, log_path, timeout_s)
            yield api_url, proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_until_healthy(proc: subprocess.Popen, api_url: str, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prefect server exited: {log_path.read_text()[-3000:]}")
        try:
            if httpx.get(f"{api_url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError(
        f"prefect server did not become healthy in {timeout_s:.0f} s: {log_path.read_text()[-3000:]}"
    )
