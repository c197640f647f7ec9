"""A rerun on a run directory whose settings changed stops before any work; unchanged settings resume.

The build runs the sample pool through ingest..split (model calls answered by the simulator),
then reruns it on the same directory with a changed filter prompt text, a changed split seed,
the same settings, and as a run directory from before the guard (no settings recorded).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from flows.build import build_dataset
from lenses_app.cli import build_parser
from lenses_app.commands import run as run_command
from lenses_data import io
from lenses_data.annotation.prompts import get_template
from lenses_data.resources import ENV_VAR, resource_dir
from lenses_data.stages.settings_guard import SETTINGS_FILE, SettingsChanged

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_CONFIG = str(REPO_ROOT / "configs" / "sample.yaml")
STAGES = ["ingest", "dedupe", "filter", "split"]


def _build(run: Path, **extra):
    params = {"config_path": SAMPLE_CONFIG, "run_dir": str(run), "sample": True, "simulate": True}
    return build_dataset(**params, stop_after="split", **extra)


def _snapshot(run: Path) -> dict[str, int]:
    """Every file of the stage folders with its modification time: a new or rewritten file shows."""
    return {
        str(p.relative_to(run)): p.stat().st_mtime_ns
        for stage in STAGES
        for p in sorted(io.stage_dir(run, stage).rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def finished_run(prefect_harness, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("guard") / "run"
    _build(run)
    return run


@pytest.fixture
def run_copy(finished_run, tmp_path) -> Path:
    """A private copy of the finished run, so each test may change it."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run, symlinks=True)
    return run


@pytest.fixture
def changed_prompts(tmp_path, monkeypatch) -> None:
    """The shipped resources with one more sentence in the filter prompt (Listing 1)."""
    root = tmp_path / "resources"
    for name in ("prompts", "phrase_bank"):
        shutil.copytree(resource_dir(name), root / name)
    listing = root / "prompts" / "filter.txt"
    listing.write_text(listing.read_text() + "Answer with care.\n")
    monkeypatch.setenv(ENV_VAR, str(root))
    get_template.cache_clear()
    yield
    get_template.cache_clear()


def test_every_started_stage_records_its_settings(finished_run):
    for stage in STAGES:
        assert (io.stage_dir(finished_run, stage) / SETTINGS_FILE).exists(), stage
    assert not io.stage_dir(finished_run, "generate").exists()


def test_unchanged_settings_resume_and_skip_every_shard(run_copy):
    before = _snapshot(run_copy)
    stages = _build(run_copy)["stages"]
    assert [s["stage"] for s in stages] == STAGES
    sharded = [s for s in stages if s["stage"] in ("ingest", "filter")]
    assert all(s["shards"] > 0 and s["shards_skipped"] == s["shards"] for s in sharded)
    assert {k for k in _snapshot(run_copy) if "part-" in k} == {k for k in before if "part-" in k}


def test_changed_filter_prompt_stops_the_rerun_and_writes_nothing(run_copy, changed_prompts):
    before = _snapshot(run_copy)
    with pytest.raises(SettingsChanged) as raised:
        _build(run_copy)
    message = str(raised.value)
    assert len(message.splitlines()) == 1
    assert message.startswith("stage filter ") and "prompt:filter" in message and " -> " in message
    assert "new run directory" in message and str(run_copy / "filter") in message
    assert str(run_copy / "split") in message  # the stages after it consumed the changed output
    assert _snapshot(run_copy) == before


def test_changed_split_seed_names_the_setting_old_and_new(run_copy):
    before = _snapshot(run_copy)
    with pytest.raises(SettingsChanged, match=r'stage split .*split\.seed "lenses-sample" -> "other"'):
        _build(run_copy, overrides={"split": {"seed": "other"}})
    assert _snapshot(run_copy) == before


def test_an_earlier_stage_deleted_and_redone_with_new_settings_still_stops_the_later_ones(run_copy):
    shutil.rmtree(io.stage_dir(run_copy, "ingest"))
    with pytest.raises(SettingsChanged, match=r"stage dedupe .*settings of an earlier stage"):
        _build(run_copy, overrides={"shard_size": 5})


def test_a_run_directory_from_before_the_guard_resumes_with_one_warning(run_copy, caplog):
    for stage in STAGES:
        (io.stage_dir(run_copy, stage) / SETTINGS_FILE).unlink()
    with caplog.at_level(logging.WARNING, logger="lenses_data.stages.settings_guard"):
        stages = _build(run_copy)["stages"]
    warnings = [r for r in caplog.records if r.name == "lenses_data.stages.settings_guard"]
    assert len(warnings) == 1 and "predates the settings guard" in warnings[0].getMessage()
    assert all(s["shards_skipped"] == s["shards"] for s in stages if s["stage"] in ("ingest", "filter"))
    for stage in STAGES:  # adopted: the next rerun is checked
        assert (io.stage_dir(run_copy, stage) / SETTINGS_FILE).exists()


def test_lenses_run_exits_2_with_one_line_naming_the_stage(run_copy, capsys, monkeypatch):
    monkeypatch.setenv("LENSES__SPLIT__SEED", "other")
    # The CLI's own parser: every option `handle` reads gets its default (a hand-made Namespace
    # missed one that was added later).
    argv = ["run", "--config", SAMPLE_CONFIG, "--run", str(run_copy), "--sample", "--stop-after", "split"]
    args = build_parser().parse_args(argv)
    before = _snapshot(run_copy)
    assert run_command.handle(args) == 2
    # The run's warnings (the SIMULATED banner) and its failure log line stay visible above it.
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.startswith("error:")]
    assert len(err) == 1 and err[0].startswith("error: stage split ") and "split.seed" in err[0]
    assert _snapshot(run_copy) == before


def test_a_stage_flow_with_changed_settings_stops_and_writes_nothing(run_copy):
    """The per-stage flows go through the same entry as `lenses run` and the stage commands."""
    from flows.stages import split_flow

    before = _snapshot(run_copy)
    with pytest.raises(SettingsChanged, match=r'stage split .*split\.seed "lenses-sample" -> "other"'):
        split_flow(config_path=SAMPLE_CONFIG, run_dir=str(run_copy), overrides={"split": {"seed": "other"}})
    assert _snapshot(run_copy) == before


def test_a_stage_command_on_a_built_run_checks_its_stage_only(run_copy, capsys, monkeypatch):
    """`lenses split` on a `lenses run --sample` build: the sample's sources, which the build
    computed and the config file lacks, are read from the record; a changed seed is refused."""
    from lenses_app.cli import main

    argv = ["split", "--config", SAMPLE_CONFIG, "--run", str(run_copy)]
    before = _snapshot(run_copy)
    monkeypatch.setenv("LENSES__SPLIT__SEED", "other")
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and err[0].startswith("error: stage split ") and "split.seed" in err[0]
    assert _snapshot(run_copy) == before
    monkeypatch.delenv("LENSES__SPLIT__SEED")
    assert main(argv) == 0
