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
    """Flows and blocks in tests use a temporary SQLite-backed Prefect API, started once per session."""
    from prefect.settings import PREFECT_HOME, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    home = tmp_path_factory.mktemp("prefect-home")
    with temporary_settings({PREFECT_HOME: str(home)}), prefect_test_harness(server_startup_timeout=120):
        yield
