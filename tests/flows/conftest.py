"""Prefect fixtures: a real server on PostgreSQL for deployments, as docs/deploy.md runs one in production
(the in-process SQLite harness of the flow tests is in tests/conftest.py)."""

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
from tests.support.postgres import PostgresServer, start_postgres

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
def prefect_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL cluster for the session's Prefect server (stopped after the server)."""
    with start_postgres(tmp_path_factory.mktemp("postgres")) as pg:
        yield pg


@pytest.fixture(scope="session")
def prefect_server(
    tmp_path_factory: pytest.TempPathFactory, prefect_postgres: PostgresServer
) -> Iterator[tuple[str, Path]]:
    """A real `prefect server start` on 127.0.0.1, its database on `prefect_postgres`; yields (api_url, home)."""
    home = tmp_path_factory.mktemp("prefect-server-home")
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    prefect = str(Path(sys.executable).parent / "prefect")
    env = {**prefect_env(home), "PREFECT_API_DATABASE_CONNECTION_URL": prefect_postgres.asyncpg_url}
    log = (home / "server.log").open("w")
    started = time.monotonic()
    proc = subprocess.Popen(
        [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_until_healthy(proc, api_url, home / "server.log")
        print(f"\nprefect server on PostgreSQL healthy in {time.monotonic() - started:.1f} s")
        yield api_url, home
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _wait_until_healthy(proc: subprocess.Popen, api_url: str, log_path: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
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
        f"prefect server did not become healthy in {timeout:.0f} s: {log_path.read_text()[-3000:]}"
    )
