"""Split stage: deterministic, Table-1 sizes, whole groups per split, zero cross-split pairs."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lenses_app.cli import main
from lenses_data import io
from lenses_data.config import config_from_dict
from lenses_data.config.dedupe import PRODUCTION_SPLIT, TABLE1_IMAGES, SplitConfig
from lenses_data.dedupe.pairs import PAIRS
from lenses_data.schemas import DedupePair, DedupeRecord, FilterDecision, SplitAssignment
from lenses_data.stages.base import ColumnMismatch, run_stage
from lenses_data.stages.dedupe import DedupeStage
from lenses_data.stages.split import SplitStage, assign_splits, leakage_report


def units(n: int, seed: int = 0, max_group: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ids = [f"{i:016x}" for i in rng.permutation(10 * n)[:n]]
    sizes = rng.integers(1, max_group + 1, n)
    unit, start = [], 0
    while start < n:
        unit += [ids[start]] * int(sizes[start])
        start += int(sizes[start])
    return pd.DataFrame({"image_id": ids, "unit": unit[:n]})


def test_table1_sizes_are_reproduced() -> None:
    frame = units(TABLE1_IMAGES)
    counts = assign_splits(frame, PRODUCTION_SPLIT)["split"].value_counts()
    assert (counts["train"], counts["valid"], counts["test"]) == (99_069, 1_100, 5_500)


def test_groups_never_straddle_and_result_is_deterministic() -> None:
    frame = units(5000, max_group=6)
    config = SplitConfig(valid=0.1, test=0.2, seed="s1")
    first = assign_splits(frame, config)
    assert (first.groupby("group_id")["split"].nunique() == 1).all()
    shuffled = assign_splits(frame.sample(frac=1.0, random_state=1), config)
    pd.testing.assert_frame_equal(first, shuffled)
    counts = first["split"].value_counts()
    assert abs(counts["test"] - 1000) <= 6 and abs(counts["valid"] - 500) <= 6  # whole groups of <= 6
    other_seed = assign_splits(frame, SplitConfig(valid=0.1, test=0.2, seed="s2"))
    assert not first["split"].equals(other_seed["split"])


def test_leakage_report_counts_cross_split_pairs() -> None:
    assignment = pd.DataFrame(
        {"image_id": ["a", "b", "c"], "group_id": ["a", "b", "c"], "split": ["train", "test", "test"]}
    )
    pairs = pd.DataFrame(
        {"image_a": ["a", "b", "a"], "image_b": ["b", "c", "x"], "signal": ["clip", "phash", "phash"],
         "tier": ["leakage", "duplicate", "duplicate"]}
    )  # fmt: skip
    report = leakage_report(assignment, pairs)
    assert report["total_cross_split"] == 1 and report["cross_split"]["leakage/clip"] == 1
    assert report["pairs_checked"] == 2  # x was removed: not in any split


def write_dedupe(run: Path, records: list[dict], pairs: list[dict]) -> None:
    io.write_shard(run, "dedupe", 0, pd.DataFrame(records), DedupeRecord)
    io.write_table(run / "dedupe" / PAIRS, io.to_table(pd.DataFrame(pairs), DedupePair))
    io.mark_stage_complete(run, "dedupe", [0])


def record(image_id: str, split_group: str, kept: bool = True) -> dict:
    return {
        "image_id": image_id,
        "phash": 0,
        "group_id": image_id,
        "kept": kept,
        "split_group_id": split_group,
    }


def test_stage_keeps_leakage_neighbours_together_and_prefers_filter(tmp_path) -> None:
    run = tmp_path / "run"
    ids = [f"{i:04d}" for i in range(400)]
    # every 4 consecutive images are CLIP neighbours above the leakage threshold: one split group
    records = [record(i, ids[k - k % 4]) for k, i in enumerate(ids)]
    pairs = [{"image_a": ids[k], "image_b": ids[k + 1], "signal": "clip", "cosine": 0.93, "tier": "leakage"}
             for k in range(0, 400, 4)]  # fmt: skip
    write_dedupe(run, records, pairs)
    config = config_from_dict({"run_dir": str(run), "split": {"valid": 0.1, "test": 0.2}}, environ={})
    summary = run_stage(SplitStage(config), run)
    assert summary["input_stage"] == "dedupe" and summary["leakage"]["total_cross_split"] == 0
    assignment = io.read_stage(run, "split", SplitAssignment)
    assert len(assignment) == 400
    assert (assignment.groupby("group_id", observed=True)["split"].nunique() == 1).all()
    # once the filter is complete, only the images it passed are split
    shutil.rmtree(run / "split")
    shutil.rmtree(run / "rejections", ignore_errors=True)
    decisions = [{"image_id": i, "decision": "YES" if k % 2 else "NO", "passed": bool(k % 2), "raw": "",
                  "model": "m", "prompt_hash": "h", "simulated": True} for k, i in enumerate(ids)]  # fmt: skip
    io.write_shard(run, "filter", 0, pd.DataFrame(decisions), FilterDecision)
    io.mark_stage_complete(run, "filter", [0])
    summary = run_stage(SplitStage(config), run)
    assert summary["input_stage"] == "filter" and summary["images"] == 200


def test_split_after_dedupe_on_sample_pool_via_cli(ingested_run, tmp_path, capsys) -> None:
    run = tmp_path / "run"
    shutil.copytree(ingested_run / "ingest", run / "ingest")
    config = config_from_dict({"run_dir": str(run), "dedupe": {"hamming_radius": 4, "leakage_hamming_radius": 16,
                                                             "crop_signal": False}},
                              environ={})  # fmt: skip
    run_stage(DedupeStage(config), run)
    assert main(["split", "--run", str(run), "--input", "dedupe"]) == 0
    assert "leakage: 0 cross-split pairs" in capsys.readouterr().out
    dedupe = io.read_stage(run, "dedupe", DedupeRecord)
    assignment = io.read_stage(run, "split", SplitAssignment)
    assert set(assignment["image_id"]) == set(dedupe.loc[dedupe["kept"], "image_id"])
    split_of = dict(zip(assignment["image_id"], assignment["split"], strict=True))
    pairs = io.read_shard(run / "dedupe" / PAIRS, DedupePair)
    leak = pairs[pairs["tier"] == "leakage"]
    assert len(leak) >= 1  # the crops: kept (beyond 4 bits) but tied to their originals
    assert all(split_of[a] == split_of[b] for a, b in zip(leak["image_a"], leak["image_b"], strict=True))


def test_missing_dedupe_is_a_clear_error(tmp_path, capsys) -> None:
    assert main(["split", "--run", str(tmp_path)]) == 2
    assert "dedupe" in capsys.readouterr().err
    with pytest.raises(ValueError, match="exceed"):
        assign_splits(units(10), PRODUCTION_SPLIT)


def test_split_checks_its_declared_columns(tmp_path, monkeypatch) -> None:
    run = tmp_path / "run"
    ids = [f"{i:04d}" for i in range(20)]
    write_dedupe(run, [record(i, i) for i in ids], [])
    config = config_from_dict({"run_dir": str(run)}, environ={})
    monkeypatch.setattr(SplitStage, "reads", (*SplitStage.reads, "not_in_dedupe"))
    with pytest.raises(ColumnMismatch, match=r"stage split: input \(dedupe\) .*missing \['not_in_dedupe'\]"):
        run_stage(SplitStage(config), run)
    monkeypatch.undo()
    monkeypatch.setattr(SplitStage, "writes", ("image_id", "split"))
    with pytest.raises(ColumnMismatch, match=r"stage split: output shard 0 .*unexpected \['group_id'\]"):
        run_stage(SplitStage(config), run)
    assert not io.shard_path(run, "split", 0).exists()  # nothing written


def test_dedupe_checks_its_declared_columns(ingested_run, tmp_path, monkeypatch) -> None:
    run = tmp_path / "run"
    shutil.copytree(ingested_run / "ingest", run / "ingest")
    config = config_from_dict({"run_dir": str(run), "dedupe": {"crop_signal": False}}, environ={})
    monkeypatch.setattr(DedupeStage, "writes", (*DedupeStage.writes, "declared_only"))
    with pytest.raises(ColumnMismatch, match=r"stage dedupe: output shard 0 .*missing \['declared_only'\]"):
        run_stage(DedupeStage(config), run)
    assert not io.shard_path(run, "dedupe", 0).exists()
