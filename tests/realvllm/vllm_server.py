"""Start and stop a real vLLM OpenAI-compatible server (CPU) from the venv `make vllm-env` builds."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from lenses_data.models.dialect import compact_json_flags
from lenses_data.models.serve import installed_version

VLLM_VENV = Path(os.environ.get("LENSES_VLLM_VENV", Path.home() / ".cache" / "lenses" / "vllm-0.32.0"))
STAMP = ".lenses-vllm-installed"
START_TIMEOUT_S = float(os.environ.get("LENSES_VLLM_START_TIMEOUT", "600"))
SERVER_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; plenty for the tiny models
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # vLLM's torch.compile cache beside the kit's other caches (default ~/.cache/vllm)
    "VLLM_CACHE_ROOT": str(Path.home() / ".cache" / "lenses" / "vllm-cache"),
}
MULTIMODAL_ARGS = (
    "--limit-mm-per-prompt",
    json.dumps({"image": 1, "video": 0}),
    "--trust-request-mm-kwargs",
    "--chat-template-content-format",
    "string",
)


@dataclass
class VllmServer:
    """A running server: its OpenAI base URL (`http://127.0.0.1:PORT/v1`), model and log file."""

    base_url: str
    model_dir: Path
    served_model_name: str
    log_path: Path
    started_in_s: float = 0.0
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def root_url(self) -> str:
        return self.base_url.removesuffix("/v1")

    def log_tail(self, chars: int = 6000) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text[-chars:]


def vllm_python(venv: Path = VLLM_VENV) -> Path | None:
    """The venv's python when `make vllm-env` finished there (its stamp file exists), else None."""
    python = venv / "bin" / "python"
    return python if python.exists() and (venv / STAMP).exists() else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_command(
    python: Path, model_dir: Path, name: str, port: int, max_model_len: int, multimodal: bool
) -> list[str]:
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir)]
    command += ["--served-model-name", name, "--host", "127.0.0.1", "--port", str(port)]
    command += [
        "--max-model-len",
        str(max_model_len),
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--dtype",
        "float32",  # as trained (vLLM's CPU default downcasts to bfloat16)
        # Every prompt prefilled in one step: vLLM 0.32's CPU build kills its engine ("CPU Generator
        # does not use offset", then 500s) when a seeded request's prefill is chunked, and its CPU
        # default budget is 2,048 tokens a step, below the longest image prompts of these tests.
        "--max-num-batched-tokens",
        str(max_model_len),
    ]
    # As `lenses serve` starts production servers: compact JSON, named as this release names it.
    command += compact_json_flags(installed_version(str(python)))
    return command + list(MULTIMODAL_ARGS if multimodal else ())


def start_server(
    python: Path,
    model_dir: Path,
    name: str,
    log_path: Path,
    max_model_len: int = 4096,
    multimodal: bool = False,
) -> VllmServer:
    """Start the server in its own process group and wait until /health answers."""
    port = free_port()
    command = server_command(python, model_dir, name, port, max_model_len, multimodal)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **SERVER_ENV}
    env.pop("VLLM_API_KEY", None)  # vLLM reads it from the environment: the tests send no key
    with open(log_path, "wb") as log:
        log.write(("$ " + " ".join(command) + "\n").encode())
        log.flush()
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            cwd=log_path.parent,
        )
    server = VllmServer(f"http://127.0.0.1:{port}/v1", model_dir, name, log_path, process=process)
    began = time.monotonic()
    try:
        wait_healthy(server)
    except BaseException:
        stop_server(server)
        raise
    server.started_in_s = round(time.monotonic() - began, 1)
    return server


def wait_healthy(server: VllmServer, timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process is not None and server.process.poll() is not None:
            raise RuntimeError(f"vLLM exited with {server.process.returncode}; log:\n{server.log_tail()}")
        try:
            if httpx.get(f"{server.root_url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1)
    raise TimeoutError(f"vLLM not healthy after {timeout_s:.0f}s; log:\n{server.log_tail()}")


def stop_server(server: VllmServer, grace_s: float = 30) -> None:
    """SIGTERM to the server's process group (engine core and workers too), SIGKILL after `grace_s`."""
    process = server.process
    if process is None or process.poll() is not None:
        return
    _signal_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(process.pid, signal.SIGKILL)
        process.wait(timeout=grace_s)
    _signal_group(process.pid, signal.SIGKILL)  # leftovers of the group, if any


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
