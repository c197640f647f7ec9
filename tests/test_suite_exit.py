"""The suite's exit under `make test` (tests/conftest.py): pytest's own status, without the
interpreter's teardown; elsewhere the normal exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import atexit, os, pathlib

def test_probe():
    atexit.register(pathlib.Path("teardown-ran").touch)
    assert os.environ["PROBE_OUTCOME"] == "pass"
"""


def _run_probe(tmp_path: Path, outcome: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(PROBE)
    inherited = {k: v for k, v in os.environ.items() if k != "LENSES_TEST_FAST_EXIT"}
    environ = {**inherited, "PYTHONPATH": str(ROOT), "PROBE_OUTCOME": outcome, **env}
    command = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q"]
    return subprocess.run(
        [*command, str(tmp_path / "test_probe.py")],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(("outcome", "status", "summary"), [("pass", 0, "1 passed"), ("fail", 1, "1 failed")])
def test_the_suite_exits_with_pytests_status_and_skips_teardown(
    tmp_path: Path, outcome: str, status: int, summary: str
) -> None:
    done = _run_probe(tmp_path, outcome, LENSES_TEST_FAST_EXIT="1")
    assert done.returncode == status, done.stdout + done.stderr
    assert summary in done.stdout  # the summary is printed before the exit
    assert "at exit:" in done.stderr  # the threads still alive are named
    assert not (tmp_path / "teardown-ran").exists()  # atexit handlers (the interpreter's teardown) skipped


def test_without_make_tests_flag_pytest_returns_to_its_caller(tmp_path: Path) -> None:
    """pytest inside another program (mutmut's workers call pytest.main) must get its result back."""
    done = _run_probe(tmp_path, "fail")
    assert done.returncode == 1, done.stdout + done.stderr
    assert (tmp_path / "teardown-ran").exists()
