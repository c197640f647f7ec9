"""The settings guard on a run directory, without building one: what `_SETTINGS.json` holds, which
rerun it stops (and with which words), which it lets through.

The invariants: each stage's record is its inputs plus the previous stage's digest, and its digest is
the SHA-256 of exactly that (compact, key-sorted JSON), so an earlier release's run directory reads
the same; a rerun stops at the first stage on disk whose digest differs, naming the changed setting
and every folder to delete; stages not started, or started without outputs, are never judged.
Written against the survivors of `make mutation MODULE=lenses_data/stages/settings_guard.py`
(docs/testing.md); the slow end-to-end version is tests/flows/test_settings_guard.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path

import pytest

from lenses_data.annotation.prompts import get_template
from lenses_data.config import config_from_dict
from lenses_data.stages.registry import pipeline_order
from lenses_data.stages.settings_guard import (
    SETTINGS_FILE,
    SettingsChanged,
    check_run_settings,
    check_stage_settings,
    expected_settings,
    record_stage_settings,
    settings_path,
    stage_inputs,
)


def _config(run: Path, **settings):
    return config_from_dict({"run_dir": str(run), **settings}, environ={})


def _record(run: Path, stage: str, config, order: list[str]) -> None:
    """What a whole build records for `stage` (the stage entry checks, then records, this)."""
    record_stage_settings(run, expected_settings(config, order)[stage])


def _finish(run: Path, config, stages: list[str]) -> list[str]:
    """Record each stage's settings and give it one output file, as a run that got that far."""
    order = pipeline_order(config)
    for stage in stages:
        _record(run, stage, config, order)
        (run / stage / "part-00000.parquet").write_bytes(b"rows")
    return order


def test_each_record_is_its_inputs_and_the_previous_digest_hashed_as_compact_sorted_json(tmp_path: Path):
    config = _config(tmp_path)
    order = _finish(tmp_path, config, pipeline_order(_config(tmp_path)))
    upstream = ""
    for stage in order:
        recorded = json.loads(settings_path(tmp_path, stage).read_text())
        assert set(recorded) == {"stage", "digest", "upstream", "inputs"}
        assert (recorded["stage"], recorded["upstream"]) == (stage, upstream)
        assert recorded["inputs"] == stage_inputs(stage, config)
        payload = json.dumps(
            {"inputs": recorded["inputs"], "upstream": upstream}, sort_keys=True, separators=(",", ":")
        )
        assert recorded["digest"] == hashlib.sha256(payload.encode()).hexdigest()[:16]
        upstream = recorded["digest"]
    assert expected_settings(config, order) == {
        stage: json.loads(settings_path(tmp_path, stage).read_text()) for stage in order
    }
    assert stage_inputs("filter", config)["prompt:filter"] == get_template("filter").hash


def test_unchanged_settings_pass_and_recording_again_leaves_every_file_alone(tmp_path: Path, caplog):
    config = _config(tmp_path)
    order = _finish(tmp_path, config, ["ingest", "dedupe", "filter"])
    files = {stage: settings_path(tmp_path, stage) for stage in ("ingest", "dedupe", "filter")}
    before = {stage: (path.read_bytes(), path.stat().st_mtime_ns) for stage, path in files.items()}
    with caplog.at_level(logging.WARNING):
        check_run_settings(tmp_path, config, order)
        for stage in files:
            _record(tmp_path, stage, config, order)
    assert {stage: (path.read_bytes(), path.stat().st_mtime_ns) for stage, path in files.items()} == before
    assert not caplog.records


def test_a_changed_setting_stops_at_its_stage_naming_old_new_and_every_folder_to_delete(tmp_path: Path):
    old = _config(tmp_path, split={"seed": "a"})
    order = _finish(tmp_path, old, ["ingest", "dedupe", "filter", "split", "generate"])
    with pytest.raises(SettingsChanged) as stopped:
        check_run_settings(tmp_path, _config(tmp_path, split={"seed": "b"}), order)
    assert str(stopped.value) == (
        f'stage split in {tmp_path} was produced with other settings: split.seed "a" -> "b". '
        "Use a new run directory, rerun with --rebuild-changed (flow parameter rebuild_changed) to redo it "
        f"and the stages after it here (the old outputs are moved to {tmp_path / '_replaced'}), or delete "
        f"{tmp_path / 'split'} {tmp_path / 'generate'} to redo it with the new settings"
    )
    _record(tmp_path, "split", _config(tmp_path, split={"seed": "b"}), order)
    assert json.loads(settings_path(tmp_path, "split").read_text())["inputs"]["split.seed"] == "b"


def test_a_stage_whose_earlier_stage_was_redone_with_other_settings_says_so(tmp_path: Path):
    """dedupe deleted and to be redone with another setting: filter's own inputs are the same, its
    upstream digest is not."""
    old = _config(tmp_path)
    order = _finish(tmp_path, old, ["ingest", "dedupe", "filter"])
    for path in (tmp_path / "dedupe").iterdir():
        path.unlink()
    (tmp_path / "dedupe").rmdir()
    with pytest.raises(SettingsChanged) as stopped:
        check_run_settings(tmp_path, _config(tmp_path, dedupe={"clip_k": 17}), order)
    assert str(stopped.value).startswith(
        f"stage filter in {tmp_path} was produced with other settings: the settings of an earlier stage. "
    )


def test_settings_added_or_removed_since_the_record_are_named_unset_even_when_none(tmp_path: Path):
    config = _config(tmp_path)
    order = _finish(tmp_path, config, ["ingest", "dedupe"])
    path = settings_path(tmp_path, "dedupe")
    recorded = json.loads(path.read_text())
    del recorded["inputs"]["dedupe.clip_k"], recorded["inputs"]["dedupe.clip_checkpoint"]  # 16 and None now
    recorded["inputs"].update({"dedupe.retired": 1, "dedupe.retired_unset": None})
    recorded["digest"] = "0" * 16
    path.write_text(json.dumps(recorded))
    changes = (
        'dedupe.clip_checkpoint "<unset>" -> null; dedupe.clip_k "<unset>" -> 16; '
        'dedupe.retired 1 -> "<unset>"; dedupe.retired_unset null -> "<unset>"'
    )
    with pytest.raises(SettingsChanged, match=f": {re.escape(changes)}\\. Use"):
        check_run_settings(tmp_path, config, order)
    path.write_text(json.dumps({"digest": "0" * 16}))  # a record with no inputs: all of them are new
    with pytest.raises(SettingsChanged, match=r': dedupe.clip_checkpoint "<unset>" -> null; .*-> 16;'):
        check_run_settings(tmp_path, config, order)


def test_the_first_record_creates_the_run_directory(tmp_path: Path):
    run = tmp_path / "not" / "yet"
    config = _config(run)
    _record(run, "ingest", config, pipeline_order(config))
    assert json.loads(settings_path(run, "ingest").read_text())["stage"] == "ingest"


def test_a_run_from_before_the_guard_warns_once_and_a_stage_without_outputs_is_not_judged(
    tmp_path: Path, caplog
):
    config = _config(tmp_path)
    order = _finish(tmp_path, config, ["ingest", "dedupe", "filter"])
    for stage in ("ingest", "filter"):
        settings_path(tmp_path, stage).unlink()
    started = _config(tmp_path, split={"seed": "other"})  # split started with other settings, no shard yet
    _record(tmp_path, "split", started, order)
    assert [p.name for p in (tmp_path / "split").iterdir()] == [SETTINGS_FILE]
    with caplog.at_level(logging.WARNING, logger="lenses_data.stages.settings_guard"):
        check_run_settings(tmp_path, config, order)
    assert [record.getMessage() for record in caplog.records] == [
        f"run directory {tmp_path} predates the settings guard (no {SETTINGS_FILE} in ingest, filter): "
        "its outputs are kept unchecked"
    ]


def test_the_run_directory_is_recognised_by_its_given_absolute_and_resolved_paths(
    tmp_path: Path, monkeypatch
):
    """run_dir given relative, through a symlink: each of its three spellings in a setting is RUN."""
    real = tmp_path / "disk" / "run"
    real.mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    monkeypatch.chdir(tmp_path)
    sources = ["link/a", f"{tmp_path}/link/b", f"{real}/c", "/pool"]
    config = _config(Path("link"), ingest={"sources": sources})
    assert stage_inputs("ingest", config)["ingest.sources"] == ["RUN/a", "RUN/b", "RUN/c", "/pool"]


def test_only_paths_inside_the_run_directory_are_recorded_relative_to_it(tmp_path: Path):
    run = tmp_path / "run"
    sources = [str(run), f"{run}/sample", f"{run}-other/sample", "/pool"]
    config = _config(run, ingest={"sources": sources})
    assert stage_inputs("ingest", config)["ingest.sources"] == [
        "RUN",
        "RUN/sample",
        f"{run}-other/sample",
        "/pool",
    ]


# One stage on its own (a stage command, a stage flow): `check_stage_settings`. Its invariants: the
# stages before it are only read, so its upstream is the digest recorded by the stage before it
# (else the config's); it stops when its own outputs, or the next stage's, were made otherwise.


def test_a_stage_alone_takes_its_upstream_from_the_record_of_the_stage_before_it(tmp_path: Path, caplog):
    ingested = _config(tmp_path, split={"seed": "a"})
    order = _finish(tmp_path, ingested, ["ingest", "dedupe"])
    recorded = json.loads(settings_path(tmp_path, "dedupe").read_text())
    recorded["digest"] = "d" * 16  # as if dedupe had been made with settings this config lacks
    settings_path(tmp_path, "dedupe").write_text(json.dumps(recorded))
    with caplog.at_level(logging.WARNING):
        entry = check_stage_settings(tmp_path, _config(tmp_path, split={"seed": "b"}), order, "filter")
    chain = expected_settings(_config(tmp_path, split={"seed": "b"}), order)
    payload = {"inputs": chain["filter"]["inputs"], "upstream": "d" * 16}
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert entry == {
        "stage": "filter",
        "digest": digest[:16],
        "upstream": "d" * 16,
        "inputs": payload["inputs"],
    }
    assert not caplog.records
    first = check_stage_settings(tmp_path / "empty", ingested, order, "ingest")
    assert first == expected_settings(ingested, order)["ingest"]  # nothing recorded: the config's chain


def test_a_stage_alone_with_changed_settings_stops_at_itself_naming_the_change(tmp_path: Path):
    order = _finish(tmp_path, _config(tmp_path, split={"seed": "a"}), ["ingest", "dedupe", "filter", "split"])
    unchanged = check_stage_settings(tmp_path, _config(tmp_path, split={"seed": "a"}), order, "split")
    assert unchanged == json.loads(settings_path(tmp_path, "split").read_text())
    with pytest.raises(SettingsChanged) as stopped:
        check_stage_settings(tmp_path, _config(tmp_path, split={"seed": "b"}), order, "split")
    assert str(stopped.value) == (
        f'stage split in {tmp_path} was produced with other settings: split.seed "a" -> "b". '
        f"Use a new run directory, or delete {tmp_path / 'split'} to redo it with the new settings"
    )


def test_a_stage_alone_is_stopped_by_the_next_stage_that_read_other_outputs(tmp_path: Path):
    """split's own folder deleted, generate's outputs kept: a split with another seed would leave
    generate's texts made from the old split; the stop names generate."""
    order = _finish(
        tmp_path, _config(tmp_path, split={"seed": "a"}), ["ingest", "dedupe", "filter", "split", "generate"]
    )
    for path in (tmp_path / "split").iterdir():
        path.unlink()
    with pytest.raises(SettingsChanged) as stopped:
        check_stage_settings(tmp_path, _config(tmp_path, split={"seed": "b"}), order, "split")
    assert str(stopped.value) == (
        f"stage generate in {tmp_path} was produced with other settings: the settings of split its "
        f"outputs were read from. Use a new run directory, or delete {tmp_path / 'generate'} to redo it "
        "with the new settings"
    )
    assert (
        check_stage_settings(tmp_path, _config(tmp_path, split={"seed": "a"}), order, "split")["stage"]
        == "split"
    )


def test_a_stage_alone_with_outputs_but_no_record_warns_and_goes_on(tmp_path: Path, caplog):
    order = _finish(tmp_path, _config(tmp_path), ["ingest", "dedupe"])
    settings_path(tmp_path, "dedupe").unlink()
    with caplog.at_level(logging.WARNING, logger="lenses_data.stages.settings_guard"):
        entry = check_stage_settings(tmp_path, _config(tmp_path, dedupe={"clip_k": 17}), order, "dedupe")
    assert entry["inputs"]["dedupe.clip_k"] == 17
    assert [record.getMessage() for record in caplog.records] == [
        f"run directory {tmp_path} predates the settings guard (no {SETTINGS_FILE} in dedupe): "
        "its outputs are kept unchecked"
    ]


def test_a_stage_alone_at_either_end_of_a_finished_run_records_what_it_recorded(tmp_path: Path):
    config = _config(tmp_path)
    order = _finish(tmp_path, config, pipeline_order(config))
    for stage in (order[0], order[-1]):  # no stage before the first; no stage after the last
        assert check_stage_settings(tmp_path, config, order, stage) == json.loads(
            settings_path(tmp_path, stage).read_text()
        )


def _started_only(run: Path, stage: str) -> None:
    """Keep a stage's settings record, drop its outputs: started, no shard written yet."""
    for path in (run / stage).iterdir():
        if path.name != SETTINGS_FILE:
            path.unlink()


def test_a_next_stage_started_without_outputs_is_not_judged(tmp_path: Path):
    order = _finish(
        tmp_path, _config(tmp_path, split={"seed": "a"}), ["ingest", "dedupe", "filter", "split", "generate"]
    )
    _started_only(tmp_path, "split")
    _started_only(tmp_path, "generate")
    entry = check_stage_settings(tmp_path, _config(tmp_path, split={"seed": "b"}), order, "split")
    assert entry["inputs"]["split.seed"] == "b"


def test_a_stage_alone_started_with_other_settings_names_its_change_at_the_next_stage(tmp_path: Path):
    """split started (its record, no shard) and generate made from it; split alone with another
    seed would leave generate's texts made from the old split: the stop names generate and the seed."""
    order = _finish(
        tmp_path, _config(tmp_path, split={"seed": "a"}), ["ingest", "dedupe", "filter", "split", "generate"]
    )
    _started_only(tmp_path, "split")
    with pytest.raises(SettingsChanged) as stopped:
        check_stage_settings(tmp_path, _config(tmp_path, split={"seed": "b"}), order, "split")
    assert str(stopped.value) == (
        f'stage generate in {tmp_path} was produced with other settings: split.seed "a" -> "b". '
        f"Use a new run directory, or delete {tmp_path / 'generate'} to redo it with the new settings"
    )
