"""Every stage command goes through the run's one entry (`lenses_data.stages.entry`): with settings
that differ from those its stage on disk was made with, it refuses as `lenses run` does (exit 2,
one `error:` line naming the changed setting, old -> new), and writes nothing.

The run is the sample pool built stage by stage with the commands themselves (tests/lenses_app/conftest.py).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lenses_app.cli import main
from lenses_data import io
from lenses_data.config import deep_merge
from lenses_data.runlock import LOCK_NAME, run_directory_lock
from tests.lenses_app.conftest import COMMANDS, stage_command, write_config

# command -> (a setting its stage's output depends on, changed; the dotted path the refusal names)
CHANGES = {
    "ingest": ({"ingest": {"min_side": 65}}, "ingest.min_side 64 -> 65"),
    "dedupe": ({"dedupe": {"hamming_radius": 3}}, "dedupe.hamming_radius"),
    "filter": ({"models": {"filter": {"model": "other/filter"}}}, "models.filter.model"),
    "split": ({"split": {"seed": "other"}}, 'split.seed "lenses-sample" -> "other"'),
    "generate": ({"annotate": {"seed": 7}}, "annotate.seed"),
    "rules": ({"annotate": {"caption_words": {"min": 8, "max": 30}}}, "annotate.caption_words.max 22 -> 30"),
    "validate": ({"models": {"validator": {"model": "other/validator"}}}, "models.validator.model"),
    "visual-validate": (
        {"models": {"visual_validator": {"model": "other/visual"}}},
        "models.visual_validator.model",
    ),
    "export": ({"export": {"embed_images": True}}, "export.embed_images false -> true"),
}


def _snapshot(run: Path) -> dict[str, tuple[int, str]]:
    """Every file of the run with its modification time and content digest."""
    return {
        str(p.relative_to(run)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(run.rglob("*"))
        if p.is_file() and p.name != LOCK_NAME
    }


def test_every_command_recorded_its_stage_settings(built_run):
    run, _ = built_run
    for argv in COMMANDS:
        assert (io.stage_dir(run, argv[0].replace("-", "_")) / "_SETTINGS.json").exists(), argv


@pytest.mark.parametrize("argv", COMMANDS, ids=[argv[0] for argv in COMMANDS])
def test_a_command_with_changed_settings_refuses_and_writes_nothing(argv, run_copy, tmp_path, capsys):
    run, settings = run_copy
    change, named = CHANGES[argv[0]]
    if argv[0] == "rules":  # the example: one rules shard gone, then other caption word limits
        io.shard_path(run, "rules", 0).unlink()
    before = _snapshot(run)
    capsys.readouterr()
    config = write_config(tmp_path / "changed.yaml", deep_merge(settings, change))
    assert stage_command(argv, config, run) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    stage = argv[0].replace("-", "_")
    assert len(errors) == 1 and errors[0].startswith(f"error: stage {stage} in {run} "), errors
    assert named in errors[0] and "Use a new run directory" in errors[0]
    assert _snapshot(run) == before


def test_the_same_settings_redo_a_deleted_shard_byte_identical(run_copy, tmp_path):
    run, settings = run_copy
    shard = io.shard_path(run, "rules", 0)
    kept = shard.read_bytes()
    shard.unlink()
    assert stage_command(["rules"], write_config(tmp_path / "same.yaml", settings), run) == 0
    assert shard.read_bytes() == kept


def test_a_stage_alone_needs_only_its_own_settings(sample_pool, tmp_path):
    """`lenses dedupe --run R` after `lenses ingest --source S --run R`: the sources ingest
    recorded are not asked for again (the stages before a command are only read)."""
    from lenses_data.candidates.sample import sample_sources

    run = tmp_path / "run"
    sources = [arg for source in sample_sources(sample_pool) for arg in ("--source", source)]
    assert main(["ingest", *sources, "--run", str(run)]) == 0
    assert main(["dedupe", "--run", str(run)]) == 0


def test_a_command_on_a_run_in_use_is_refused_with_exit_3(run_copy, capsys):
    run, _ = run_copy
    before = _snapshot(run)
    with run_directory_lock(run):
        assert main(["split", "--run", str(run)]) == 3
    assert "in use by a live run" in capsys.readouterr().err
    assert _snapshot(run) == before
