"""The sample run built stage by stage with the stage commands themselves (model calls answered by
the simulator), as the README's stage-by-stage section does it: built once per session, copied
by each test that changes it (test_stage_commands_guard.py, test_stage_commands_yield.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from lenses_app.cli import main
from lenses_data.config import deep_merge

REPO_ROOT = Path(__file__).resolve().parents[2]
# Every stage command in run order, with --simulate where it asks a model.
COMMANDS = [
    ["ingest"],
    ["dedupe"],
    ["filter", "--simulate"],
    ["split"],
    ["generate", "--simulate"],
    ["rules"],
    ["validate", "--simulate"],
    ["visual-validate", "--simulate"],
    ["export"],
]


def write_config(path: Path, settings: dict) -> str:
    path.write_text(yaml.safe_dump(settings))
    return str(path)


def stage_command(argv: list[str], config: str, run: Path) -> int:
    return main([*argv, "--config", config, "--run", str(run)])


def _settings(pool: Path) -> dict:
    from lenses_data.candidates.sample import sample_sources

    sample = yaml.safe_load((REPO_ROOT / "configs" / "sample.yaml").read_text())
    return deep_merge(sample, {"ingest": {"sources": sample_sources(pool)}})


@pytest.fixture(scope="session")
def built_run(sample_pool: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """(the run built by every stage command, the settings it was built with)."""
    root = tmp_path_factory.mktemp("stage_commands")
    settings = _settings(sample_pool)
    config = write_config(root / "sample.yaml", settings)
    run = root / "run"
    for argv in COMMANDS:
        assert stage_command(argv, config, run) == 0, argv
    return run, settings


@pytest.fixture
def run_copy(built_run, tmp_path) -> tuple[Path, dict]:
    run, settings = built_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy, symlinks=True)
    return copy, settings
