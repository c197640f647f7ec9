"""Helpers for tests and dry runs against the simulator (used by the test suite and benchmarks)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from typing import IO, Any

import httpx

from lenses_data.config.models import ROLES, ModelsConfig


def sim_models_config(
    urls: list[str], timeout_s: float = 0.5, concurrency: int = 16, probe: bool = False, **retry: Any
) -> ModelsConfig:
    """Every role pointed at `urls`, with fast backoff and a short bench so tests stay quick.

    The endpoint probe is off unless asked for: these tests count the simulator's calls."""
    retry_settings = {"backoff_base_s": 0.005, "backoff_max_s": 0.02, "unhealthy_cooldown_s": 0.05, **retry}
    roles = {
        role: {
            "model": f"test/{role}",
            "base_urls": urls,
            "timeout_s": timeout_s,
            "max_concurrency": concurrency,
        }
        for role in ROLES
    }
    return ModelsConfig.model_validate(
        {**roles, "retry": retry_settings, "progress_interval_s": 5, "probe": probe}
    )


def sim_stats(base_url: str) -> dict[str, Any]:
    """The simulator's GET /sim/stats: calls per request hash, keys, faults, max in flight."""
    return httpx.get(base_url.removesuffix("/v1") + "/sim/stats", timeout=5).json()


def spawn_simulator(
    args: Sequence[str] = (), log: IO[str] | None = None, start_timeout_s: float = 60.0
) -> tuple[subprocess.Popen, str]:
    """Start `lenses simulate` in its own process (and session) on a free port; wait until it answers.

    Returns the process and its base URL (…/v1). The caller stops it (kill the process group).
    """
    from lenses_data.simulator.simulator import free_port

    port = free_port()
    command = [sys.executable, "-m", "lenses_app.cli", "simulate", "--port", str(port), *args]
    out = log if log is not None else subprocess.DEVNULL
    process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + start_timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"simulator exited with code {process.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process, f"http://127.0.0.1:{port}/v1"
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("simulator did not start")
