"""`lenses run` explains a wrong config in one line (exit code 2), without a Python traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

LENSES = str(Path(sys.executable).parent / "lenses")


@pytest.mark.parametrize(
    ("content", "expected"),
    [(None, "config file not found"), ("shard_sise: 3\n", "shard_sise: Extra inputs are not permitted")],
)
def test_a_wrong_config_is_one_clear_line(tmp_path: Path, content: str | None, expected: str) -> None:
    config = tmp_path / "own.yaml"
    if content is not None:
        config.write_text(content)
    done = subprocess.run(
        [LENSES, "run", "--config", str(config)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and expected in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not (tmp_path / "runs").exists()
