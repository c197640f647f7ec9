"""Prefect fixtures: a real server for deployments (the in-process harness is in tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lenses_data.simulator.simulator import free_port

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


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real `prefect server start` on 127.0.0.1 with its own SQLite database; yields (api_url, home)."""
    home = tmp_path_factory.mktemp("prefect-server-home")
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    prefect = str(Path(sys.executable).parent / "prefect")
    log = (home / "server.log").open("w")
    proc = subprocess.Popen(
        [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui"],
        env=prefect_env(home),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"prefect server exited: {(home / 'server.log').read_text()[-3000:]}")
            try:
                if httpx.get(f"{api_url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        else:
            raise TimeoutError("prefect server did not become healthy in 180 s")
        yield api_url, home
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
