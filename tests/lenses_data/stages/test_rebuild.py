"""Regeneration's parts without a build: how a run directory is judged (kept, extended, changed),
the move aside that survives a kill, a global stage losing only its commit point, the answers found
again in moved journals, and a split that keeps its earlier assignments.

The end-to-end scenarios (real Parquet, real HTTP to a counting simulator) are
tests/flows/test_rebuild_changed.py."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from lenses_data import io
from lenses_data.config import config_from_dict
from lenses_data.config.dedupe import SplitConfig
from lenses_data.models.journal import JournalEntry
from lenses_data.models.reuse import AnswerIndex, replaced_runs
from lenses_data.stages.rebuild import (
    EARLIER_OUTPUT,
    EARLIER_REJECTIONS,
    PENDING,
    finish_pending,
    replace_stages,
    uncommit,
)
from lenses_data.stages.registry import pipeline_order
from lenses_data.stages.settings_guard import assess_run, expected_settings, record_stage_settings
from lenses_data.stages.split import assign_splits, extend_splits

BUILT = ["ingest", "dedupe", "filter", "split", "generate"]


def _config(run: Path, sources: list[str], **settings):
    return config_from_dict({"run_dir": str(run), "ingest": {"sources": sources}, **settings}, environ={})


def _built(run: Path, config) -> list[str]:
    order = pipeline_order(config)
    for stage in BUILT:
        record_stage_settings(run, expected_settings(config, order)[stage])
        (run / stage / "part-00000.parquet").write_bytes(b"rows")
    return order


def test_sources_appended_extend_every_stage_and_other_changes_still_count(tmp_path: Path):
    a, b, c = (str(tmp_path / name) for name in "abc")
    order = _built(tmp_path, _config(tmp_path, [a, b]))
    grown = assess_run(tmp_path, _config(tmp_path, [a, b, c]), order)
    assert (grown.extend, grown.changed) == (BUILT, None)
    same = assess_run(tmp_path, _config(tmp_path, [a, b]), order)
    assert (same.extend, same.changed) == ([], None)
    for other in ([b, a, c], [a], [a, c], [c, a, b]):  # reordered, removed, replaced, put first
        judged = assess_run(tmp_path, _config(tmp_path, other), order)
        assert (judged.extend, judged.changed, judged.replaced) == ([], "ingest", order), other
    both = assess_run(tmp_path, _config(tmp_path, [a, b, c], split={"seed": "other"}), order)
    assert both.extend == ["ingest", "dedupe", "filter"] and both.changed == "split"
    assert both.replaced == order[order.index("split") :] and "split.seed" in both.change


def _stage_files(run: Path, stage: str) -> list[Path]:
    files = [run / stage / "part-00000.parquet", run / "journal" / stage / "part-00000.jsonl"]
    files += [run / io.REJECTIONS_DIR / f"{stage}-part-{i:05d}.parquet" for i in range(2)]
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(stage)
    return [p.relative_to(run) for p in files]


def test_a_move_killed_half_way_is_finished_by_the_next_run(tmp_path: Path):
    stages = ["rules", "validate", "export"]
    files = {stage: _stage_files(tmp_path, stage) for stage in [*stages, "generate"]}
    into = replace_stages(tmp_path, stages, "abc123")
    assert into == tmp_path / io.REPLACED_DIR / "abc123" and not (into.parent / PENDING).exists()
    for stage in stages:
        assert all((into / f).read_text() == stage and not (tmp_path / f).exists() for f in files[stage])
    assert all((tmp_path / f).exists() for f in files["generate"])  # the stage before is kept
    # Killed after the plan and the first rename: the next run finishes the same plan.
    files = {stage: _stage_files(tmp_path, stage) for stage in stages}
    plan = {"into": "abc123-2", "stages": stages}
    io.atomic_write_json(tmp_path / io.REPLACED_DIR / PENDING, plan)
    (tmp_path / io.REPLACED_DIR / "abc123-2").mkdir()
    (tmp_path / "rules").rename(tmp_path / io.REPLACED_DIR / "abc123-2" / "rules")
    finish_pending(tmp_path)
    again = tmp_path / io.REPLACED_DIR / "abc123-2"
    assert not (tmp_path / io.REPLACED_DIR / PENDING).exists()
    for stage in stages:
        assert all((again / f).read_text() == stage and not (tmp_path / f).exists() for f in files[stage])


def test_a_grown_global_stage_loses_its_commit_point_only(tmp_path: Path):
    for stage in ("dedupe", "ingest", "filter"):
        io.atomic_write_json(io.stage_dir(tmp_path, stage) / io.SUCCESS_MARKER, {})
        io.shard_path(tmp_path, stage, 0).write_text(f"{stage} rows")
        io.rejection_path(tmp_path, stage, 0).parent.mkdir(exist_ok=True)
        io.rejection_path(tmp_path, stage, 0).write_text(f"{stage} rejections")
        uncommit(tmp_path, stage)
        assert not (io.stage_dir(tmp_path, stage) / io.SUCCESS_MARKER).exists()
    folder = io.stage_dir(tmp_path, "dedupe")
    assert (folder / EARLIER_OUTPUT).read_text() == "dedupe rows"
    assert (folder / EARLIER_REJECTIONS).read_text() == "dedupe rejections"
    assert not io.shard_path(tmp_path, "dedupe", 0).exists()
    for stage in ("ingest", "filter"):  # ingest appends; a sharded stage skips its finished shards
        assert io.shard_path(tmp_path, stage, 0).exists() and io.rejection_path(tmp_path, stage, 0).exists()


def _entry(digest: str, status: str, raw: str) -> JournalEntry:
    return JournalEntry(
        hash=digest, key=f"validate:{digest}", role="validator", model="m", status=status, raw=raw
    )


def test_a_rebuilt_stage_finds_moved_answers_by_request(tmp_path: Path):
    """The folders a rebuild moved a stage's journals to are sources of reused answers, like an
    earlier run's (models.reuse): found by request over the whole stage, successes only, newest wins."""
    moved = tmp_path / io.REPLACED_DIR / "d1" / "journal" / "validate"
    moved.mkdir(parents=True)
    lines = [_entry("h1", "ok", "old"), _entry("h1", "ok", "newer"), _entry("h2", "failed", None)]
    (moved / "part-00003.jsonl").write_text("".join(json.dumps(vars(e)) + "\n" for e in lines) + '{"torn')
    runs = replaced_runs(tmp_path, "validate")
    assert runs == [tmp_path / io.REPLACED_DIR / "d1"] and replaced_runs(tmp_path, "generate") == []
    index = AnswerIndex(runs, "validate")
    found = index.get("h1", None)
    assert found is not None and found.raw == "newer" and found.source_run == str(runs[0].resolve())
    assert index.get("h2", None) is None and index.get("h3", None) is None  # a failure is asked again
    assert index.get("h1", '{"id":"another-model"}') is None  # another served model: asked again


def test_a_grown_split_keeps_every_earlier_assignment():
    config = SplitConfig(valid=0.2, test=0.3, seed="s")
    earlier_frame = pd.DataFrame(
        {"image_id": [f"i{n:02d}" for n in range(20)], "unit": [f"u{n}" for n in range(20)]}
    )
    earlier = assign_splits(earlier_frame, config)
    test_unit = earlier.loc[earlier["split"] == "test", "group_id"].iloc[0]
    new = pd.DataFrame(
        {"image_id": [f"n{n:02d}" for n in range(10)], "unit": [test_unit] + [f"v{n}" for n in range(9)]}
    )
    grown = extend_splits(pd.concat([earlier_frame, new], ignore_index=True), earlier, config)
    merged = grown.merge(earlier, on="image_id", suffixes=("", "_before"))
    assert len(merged) == 20 and (merged["split"] == merged["split_before"]).all()
    assert (merged["group_id"] == merged["group_id_before"]).all()
    assert grown.set_index("image_id").loc["n00", "split"] == "test"  # joins its unit's split
    no_room = extend_splits(
        pd.concat([earlier_frame, new]), earlier, SplitConfig(valid=0.0, test=0.0, seed="s")
    )
    assert no_room.set_index("image_id").loc["n00", "split"] == "test"  # even with no room left there
    assert (no_room.set_index("image_id").loc[new["image_id"][1:], "split"] == "train").all()
    counts = grown["split"].value_counts()
    assert counts["test"] <= round(0.3 * 30) and counts["valid"] <= round(0.2 * 30)
    assert set(grown["image_id"]) == set(earlier_frame["image_id"]) | set(new["image_id"])
