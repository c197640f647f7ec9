"""Shared fixtures for lenses_data tests: a real sample pool and a run that ingested it, and the
simulator on 127.0.0.1 for the model-client and simulator tests.

`sample_pool` (tests/conftest.py) builds the pool once per session; `ingested_run` runs the ingest stage over
the pool folder and its CC3M-style TSV once per session. Both are read-only for tests: copy
before modifying. `simulator` and `sim_url` run the simulator on a free port in a background thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lenses_data.simulator.simulator import SimConfig, run_in_thread


@pytest.fixture(scope="session")
def ingested_run(sample_pool: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run directory whose `ingest` stage is complete (pool folder + cc3m.tsv as sources)."""
    from lenses_data.candidates.sample import sample_sources
    from lenses_data.config import config_from_dict
    from lenses_data.stages.ingest import run_ingest

    run = tmp_path_factory.mktemp("ingested_run")
    config = config_from_dict({"shard_size": 16}, environ={})  # 16 < accepted rows: several shards
    run_ingest(sample_sources(sample_pool), run, config)
    return run


@pytest.fixture
def simulator() -> Callable[..., contextlib.AbstractContextManager[str]]:
    """Factory: `with simulator(faults={...}) as url:` runs a simulator with that SimConfig."""

    @contextlib.contextmanager
    def start(**settings: Any) -> Iterator[str]:
        with run_in_thread(SimConfig(**settings)) as url:
            yield url

    return start


@pytest.fixture
def sim_url() -> Iterator[str]:
    """A fault-free simulator's base URL."""
    with run_in_thread(SimConfig()) as url:
        yield url
