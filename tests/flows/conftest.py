"""Prefect fixtures: a real server on PostgreSQL for deployments, as docs/deploy.md runs one in production
(the in-process SQLite harness of the flow tests is in tests/conftest.py)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lenses_data.simulator.simulator import free_port
from lenses_data.simulator.testing import spawn_simulator
from tests.support.postgres import PostgresServer, start_postgres
from tests.support.prefect_server import prefect_env, prefect_server_process


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
    env = {**prefect_env(home), "PREFECT_API_DATABASE_CONNECTION_URL": prefect_postgres.asyncpg_url}
    started = time.monotonic()
    with prefect_server_process(home, free_port(), env) as (api_url, _):
        print(f"\nprefect server on PostgreSQL healthy in {time.monotonic() - started:.1f} s")
        yield api_url, home


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every stage the worker-stage cache builds, in order (real stages, real clients): the cache's
    tests (test_worker_stages.py, test_worker_stage_cache.py) read what it built."""
    from flows import worker_stages
    from lenses_data.stages.registry import build_stage

    stages: list = []

    def building(name, config):
        stages.append(build_stage(name, config))
        return stages[-1]

    monkeypatch.setattr(worker_stages, "build_stage", building)
    return stages


@pytest.fixture(scope="module")
def simulator(tmp_path_factory) -> Iterator[str]:
    """An external `lenses simulate` process for one test module, whose calls the tests count
    (`lenses_data.simulator.testing.sim_stats`): what a regeneration sends, over real HTTP."""
    log = tmp_path_factory.mktemp("sim") / "sim.log"
    with log.open("w") as out:
        process, url = spawn_simulator(["--yes-rate", "0.85"], log=out)
    try:
        yield url
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
