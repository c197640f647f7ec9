"""Session fixtures: the tiny models (built or reused from ~/.cache/lenses/tiny-models) and one real
vLLM server for each, started from the venv of `make vllm-env`.

Fixtures:
    tiny_validator_model -> Path    Qwen2 model folder (Listing 4)
    tiny_internvl_model  -> Path    InternVL model folder with its processor (Listings 1, 2, 3, 5)
    vllm_validator       -> VllmServer   .base_url "http://127.0.0.1:PORT/v1", .model_dir, .served_model_name
    vllm_internvl        -> VllmServer   (image input; per-request mm_processor_kwargs trusted)

Without the vLLM venv the tests fail (CI must run them); LENSES_REALVLLM_OPTIONAL=1 turns that
into a skip. A failing test's report carries the server log's tail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realvllm.vllm_server import VLLM_VENV, VllmServer, start_server, stop_server, vllm_python

VALIDATOR_NAME = "tiny-qwen2-validator"
INTERNVL_NAME = "tiny-internvl"
MAX_MODEL_LEN = 4096
OPTIONAL_ENV = "LENSES_REALVLLM_OPTIONAL"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "realvllm: needs real vLLM on the CPU (`make vllm-env`) and tiny models"
    )


@pytest.fixture(scope="session")
def vllm_python_path() -> Path:
    """The vLLM venv's python; fails (skips with LENSES_REALVLLM_OPTIONAL=1) when it is missing."""
    python = vllm_python()
    if python is None:
        reason = f"no vLLM venv at {VLLM_VENV} (make vllm-env builds it; LENSES_VLLM_VENV points elsewhere)"
        if os.environ.get(OPTIONAL_ENV) == "1":
            pytest.skip(f"{reason}; skipped because {OPTIONAL_ENV}=1")
        pytest.fail(reason, pytrace=False)
    return python


@pytest.fixture(scope="session")
def tiny_validator_model() -> Path:
    from tests.realvllm.tiny_models import tiny_model

    return tiny_model("validator")


@pytest.fixture(scope="session")
def tiny_internvl_model() -> Path:
    from tests.realvllm.tiny_models import tiny_model

    return tiny_model("internvl")


def _serve(
    python: Path, model: Path, name: str, tmp: pytest.TempPathFactory, multimodal: bool
) -> Iterator[VllmServer]:
    log = tmp.mktemp(f"vllm-{name}") / "server.log"
    server = start_server(python, model, name, log, max_model_len=MAX_MODEL_LEN, multimodal=multimodal)
    _SERVERS.append(server)
    try:
        yield server
    finally:
        stop_server(server)
        _SERVERS.remove(server)


_SERVERS: list[VllmServer] = []


@pytest.fixture(scope="session")
def vllm_validator(
    vllm_python_path: Path, tiny_validator_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    yield from _serve(vllm_python_path, tiny_validator_model, VALIDATOR_NAME, tmp_path_factory, False)


@pytest.fixture(scope="session")
def vllm_internvl(
    vllm_python_path: Path, tiny_internvl_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    yield from _serve(vllm_python_path, tiny_internvl_model, INTERNVL_NAME, tmp_path_factory, True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failed realvllm test's report gets the tail of each running server's log."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and item.get_closest_marker("realvllm"):
        for server in _SERVERS:
            report.sections.append((f"vLLM log {server.served_model_name}", server.log_tail()))
