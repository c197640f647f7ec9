"""`lenses run` as a user starts it, against a real Prefect server with API logging on.

- `lenses run --config OWN.yaml --simulate` finishes (the in-process simulator once deadlocked
  Prefect's API log handler by reconfiguring logging at flow start).
- Two `lenses run` on one run directory at once: one builds, the other is refused at once with a
  message naming the live run, and the dataset equals a single run's.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.support.prefect_server import prefect_env

LENSES = str(Path(sys.executable).parent / "lenses")


def _own_config(path: Path, run: Path, sample_pool: Path) -> Path:
    config = {
        "run_dir": str(run),
        "shard_size": 8,
        "ingest": {"sources": [str(sample_pool), str(sample_pool / "cc3m.tsv")], "workers": 1},
        "split": {"valid": 0.15, "test": 0.3, "seed": "cli"},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _start(config: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    out = log.open("w")
    return subprocess.Popen(
        [LENSES, "run", "--config", str(config), "--simulate"], env=env, stdout=out, stderr=subprocess.STDOUT
    )


def _wait(proc: subprocess.Popen, log: Path, timeout: float = 600) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"lenses run hung for {timeout} s: {log.read_text()[-3000:]}") from None


def _captions(run: Path) -> pd.DataFrame:
    frame = pd.read_parquet(run / "export" / "captions.parquet")[["text_id", "image_id", "lens", "text"]]
    return frame.sort_values("text_id").reset_index(drop=True)


@pytest.mark.slow
def test_two_runs_on_one_directory_one_builds_one_is_refused(prefect_server, sample_pool, tmp_path):
    api_url, home = prefect_server
    env = {**prefect_env(home, api_url), "PREFECT_LOGGING_TO_API_ENABLED": "true"}
    shared = _own_config(tmp_path / "own.yaml", tmp_path / "shared", sample_pool)

    first = _start(shared, env, tmp_path / "first.log")
    deadline = time.monotonic() + 120
    while not (tmp_path / "shared" / ".lenses-run.owner.json").exists():  # the first run holds it
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the first run never took the run directory"
        time.sleep(0.1)
    second = _start(shared, env, tmp_path / "second.log")
    assert _wait(second, tmp_path / "second.log", timeout=120) == 3
    refusal = (tmp_path / "second.log").read_text()
    assert "is in use by a live run" in refusal and f"pid {first.pid}" in refusal
    assert "Traceback" not in refusal
    assert _wait(first, tmp_path / "first.log") == 0, (tmp_path / "first.log").read_text()[-3000:]
    assert "SIMULATED RUN" in (tmp_path / "first.log").read_text()

    alone = _own_config(tmp_path / "alone.yaml", tmp_path / "alone", sample_pool)
    single = _start(alone, env, tmp_path / "alone.log")
    assert _wait(single, tmp_path / "alone.log") == 0
    pd.testing.assert_frame_equal(_captions(tmp_path / "shared"), _captions(tmp_path / "alone"))
