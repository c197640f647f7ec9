"""Shards grouped into fewer task runs (`orchestration.shards_per_task`) build the same dataset.

A batched build must write exactly the shards, rejections and funnel of an unbatched one, with
fewer task runs, and a rerun must skip every batch (each shard is still done or not on its own).

The rerun is decided by the files on disk, never by a Prefect cache: no shard task stores a
result under a cache key, so Prefect 3.9's new cache keys (DataFrame inputs; no entry for a task
that returned Failed) change nothing a rerun reads (docs/deploy.md, upgrading to Prefect 3.9).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from flows.build import build_dataset
from lenses_data import io
from tests.flows.prefect_api import stage_task_states

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_CONFIG = str(REPO_ROOT / "configs" / "sample.yaml")
# Up to rules: a model stage (filter, generate) and a local one (rules) are enough, at half the cost.
STOP_AFTER = "rules"
SHARDED = ("filter", "generate", "rules")


def _build(run: Path, orchestration: dict):
    overrides = {"shard_size": 5, "orchestration": orchestration}
    params = {"config_path": SAMPLE_CONFIG, "run_dir": str(run), "sample": True, "simulate": True}
    params["stop_after"] = STOP_AFTER
    state = build_dataset(**params, overrides=overrides, return_state=True)
    return state.result(), state.state_details.flow_run_id


def _files(run: Path) -> dict[str, pd.DataFrame]:
    """Every shard and rejections file, by path relative to the run, with the run directory
    written as RUN (the two builds live in different directories)."""
    frames = {}
    for path in sorted(run.rglob("*.parquet")):
        relative = path.relative_to(run)
        if relative.parts[0] == "sample":
            continue
        frame = pd.read_parquet(path)
        for column in frame.columns:
            if pd.api.types.is_object_dtype(frame[column]) or pd.api.types.is_string_dtype(frame[column]):
                frame[column] = frame[column].map(
                    lambda v: v.replace(str(run), "RUN") if isinstance(v, str) else v
                )
        frames[str(relative)] = frame
    return frames


def _result_records() -> set[Path]:
    """Files in Prefect's local result store (where a cached or persisted task result would go)."""
    from prefect.settings import get_current_settings

    store = get_current_settings().results.local_storage_path
    return {path for path in store.rglob("*") if path.is_file()} if store.exists() else set()


def _journal_lines(run: Path) -> int:
    """Answered model requests in the run's journals (one line each)."""
    return sum(len(path.read_text().splitlines()) for path in (run / "journal").glob("*/part-*.jsonl"))


def _funnel(summaries: list[dict]) -> list[tuple]:
    return [(s["stage"], s["shards"], s["records_in"], s["records_out"], s["rejected"]) for s in summaries]


@pytest.mark.slow
def test_batched_build_writes_the_same_shards_and_funnel_with_fewer_task_runs(prefect_harness, tmp_path):
    single_run, batched_run = tmp_path / "single", tmp_path / "batched"
    records_before = _result_records()
    single, single_id = _build(single_run, {"shards_per_task": 1})
    batched, batched_id = _build(batched_run, {"shards_per_task": 3})

    assert _funnel(batched["stages"]) == _funnel(single["stages"])
    shards = {s["stage"]: s["shards"] for s in single["stages"]}
    assert all(shards[stage] >= 4 for stage in SHARDED), shards  # enough shards to form groups
    single_files, batched_files = _files(single_run), _files(batched_run)
    assert sorted(batched_files) == sorted(single_files)
    assert any(name.startswith(f"{io.REJECTIONS_DIR}/") for name in single_files)
    for name, frame in single_files.items():
        pd.testing.assert_frame_equal(batched_files[name], frame, obj=name)
    assert [s["stage"] for s in single["stages"]][-1] == STOP_AFTER

    single_tasks, batched_tasks = stage_task_states(single_id), stage_task_states(batched_id)
    for stage in SHARDED:
        groups = [name for name, _ in batched_tasks if name.startswith(f"{stage}-shards-")]
        assert len(groups) == -(-shards[stage] // 3), (stage, groups)
        assert sum(name.startswith(f"{stage}-shard-") for name, _ in single_tasks) == shards[stage]
    assert len(batched_tasks) < len(single_tasks)

    answered = _journal_lines(batched_run)
    assert answered > 0
    rerun, rerun_id = _build(batched_run, {"shards_per_task": 3})
    assert _funnel(rerun["stages"]) == _funnel(batched["stages"])
    states = [state for name, state in stage_task_states(rerun_id) if "-shards-" in name]
    assert states and set(states) == {"Skipped"}
    assert _journal_lines(batched_run) == answered  # no model request asked again
    for name, frame in _files(batched_run).items():
        pd.testing.assert_frame_equal(frame, batched_files[name], obj=name)
    assert _result_records() == records_before  # Prefect stored no task result a rerun could read
