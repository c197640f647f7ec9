"""The `lenses serve` command line the serve tests start (the validator role of a config file)."""

from __future__ import annotations

import sys
from pathlib import Path


def lenses_serve_command(config: Path, vllm_python: Path | str, *options: str) -> list[str]:
    """`lenses serve --role validator --config CONFIG --vllm-python PYTHON OPTIONS...`, run by this
    interpreter (the project's venv), so the test exercises the real CLI."""
    command = [sys.executable, "-m", "lenses_app.cli", "serve", "--role", "validator"]
    return command + ["--config", str(config), "--vllm-python", str(vllm_python), *options]
