"""Suite-wide settings: nothing may reach a model hub, and Prefect sends no analytics."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# Set before anything imports huggingface_hub / transformers / prefect.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# A developer's own LENSES__ overrides must not leak into the tests.
for _key in [k for k in os.environ if k.startswith("LENSES__")]:
    del os.environ[_key]


@pytest.fixture(scope="session")
def sample_pool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder with the sample pool; `sample_pool / "sample_manifest.json"` describes every file."""
    from lenses_data.candidates.sample import build_sample_pool

    out = tmp_path_factory.mktemp("sample_pool")
    build_sample_pool(out)
    return out


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Flows and blocks in tests use a temporary SQLite-backed Prefect API, started once per session.

    With LENSES_TEST_PREFECT_API_URL set, they use that server instead: `make mutation` starts one for
    all of a module's mutants, each of which is a pytest session of its own."""
    from prefect.settings import PREFECT_API_URL, PREFECT_HOME, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    home = tmp_path_factory.mktemp("prefect-home")
    shared = os.environ.get("LENSES_TEST_PREFECT_API_URL")
    if shared:
        from prefect.logging.configuration import setup_logging

        # mutmut's fork server imported Prefect while collecting the tests, so Prefect's console
        # handler writes to that session's captured stderr, closed since: every flow run's log line
        # then failed the test (found in flows/stages.py's first mutation run). New handlers here.
        setup_logging(incremental=False)
        with temporary_settings({PREFECT_HOME: str(home), PREFECT_API_URL: shared}):
            yield
        return
    with temporary_settings({PREFECT_HOME: str(home)}), prefect_test_harness(server_startup_timeout=120):
        yield


# Why the suite leaves through os._exit: the pytest process hosts what no product process does at
# once (a Prefect test server's loops, in-process Dask clients whose IO-loop threads outlive them,
# Ray's gRPC threads, torch and faiss thread pools), and CI saw it segfault in interpreter
# teardown after "969 passed" (stop 36, make's Error 139). The result is final by then: pytest has
# printed its summary and written its caches, so the process exits with pytest's status without
# running the native destructors. The product's own processes exit normally, and their exit codes
# are asserted by the CLI tests. `make test` sets PYTHONFAULTHANDLER, so a crash before this point
# still names its threads. Only where asked (`make test` sets LENSES_TEST_FAST_EXIT=1): pytest run
# inside another program (mutmut's workers call pytest.main in a fork) must return to its caller.
_EXIT_STATUS: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Name the threads still alive as pytest exits; under `make test`, leave with pytest's own status."""
    import sys
    import threading

    alive = [t for t in threading.enumerate() if t is not threading.main_thread()]
    try:
        native = len(os.listdir("/proc/self/task"))
    except OSError:
        native = -1
    names = ", ".join(f"{t.name}{' (daemon)' if t.daemon else ''}" for t in alive) or "none"
    print(f"\nat exit: {native} OS threads; Python threads besides main: {names}", file=sys.stderr)
    if not _EXIT_STATUS or os.environ.get("LENSES_TEST_FAST_EXIT") != "1":
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_EXIT_STATUS[-1])
