"""`lenses run` ends a build whose validator rejected every text with exit code 5 and the reasons'
counts (the dataset is still written), and exits 0 for the same build when the yield is accepted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lenses_data.publish.yields import YIELD_EXIT

LENSES = str(Path(sys.executable).parent / "lenses")
SAMPLE = Path(__file__).resolve().parents[2] / "configs" / "sample.yaml"


def _run(config: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [LENSES, "run", "--sample", "--config", str(config), *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_a_validator_rejecting_everything_fails_the_build_unless_accepted(tmp_path: Path) -> None:
    config = yaml.safe_load(SAMPLE.read_text())
    config["run_dir"] = str(tmp_path / "run")
    # The simulated Listing 4 model rewrites every fixed Focus field (seen on a real build).
    config["simulator"]["server_faults"] = {"garble_validator_focus": True}
    path = tmp_path / "garbled.yaml"
    path.write_text(yaml.safe_dump(config))

    failed = _run(path)
    assert failed.returncode == YIELD_EXIT == 5, failed.stderr[-3000:]
    assert "Traceback" not in failed.stderr + failed.stdout
    found = re.search(r"error: stage validate rejected (\d+) of (\d+) records \(100\.0%", failed.stderr)
    assert found and found.group(1) == found.group(2) and int(found.group(1)) > 100, failed.stderr[-3000:]
    assert re.search(r"reasons: fixed_field_changed \d+", failed.stderr)
    assert "stage filter" not in failed.stderr and "stage rules" not in failed.stderr  # only the culprit
    assert "validate " in failed.stdout and "rejected" in failed.stdout  # the funnel is still shown
    assert (tmp_path / "run" / "export" / "manifest.json").exists()  # and the dataset written

    accepted = _run(path, "--accept-yield")
    assert accepted.returncode == 0, accepted.stderr[-3000:]
    assert "warning: accepted: stage validate rejected" in accepted.stderr
