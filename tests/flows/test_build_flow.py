"""The build-dataset flow on the sample pool against the simulator, in Prefect's test harness.

Besides the dataset: what a user sees on the build's own run page (funnel, stage tables,
progress, lenses_data log lines, one SIMULATED banner per model stage), shards of a resumed run
in a state named "Skipped", and a manifest whose counts agree with the funnel and the Parquet files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from flows.build import build_dataset
from flows.reporting import funnel_key, progress_key, stage_key
from lenses_data import io
from lenses_data.schemas import LENS_NAMES
from lenses_data.stages.registry import MODEL_STAGES
from tests.flows.prefect_api import run_artifacts, run_logs, stage_task_states

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_CONFIG = str(REPO_ROOT / "configs" / "sample.yaml")


def _export_frames(run: Path) -> dict[str, pd.DataFrame]:
    export = run / "export"
    return {
        name: pd.read_parquet(export / f"{name}.parquet")
        for name in ("images", "captions", "prompts", "rejections")
    }


@pytest.mark.slow
def test_sample_build_runs_every_stage_and_resumes_without_new_work(prefect_harness, tmp_path):
    run = tmp_path / "run"
    params = {"config_path": SAMPLE_CONFIG, "run_dir": str(run), "sample": True, "simulate": True}
    state = build_dataset(**params, return_state=True)
    first = state.result()
    _assert_the_run_page_shows_everything(state.state_details.flow_run_id, run, first["stages"])
    _assert_manifest_counts_match_funnel_and_parquet(run, first["stages"])

    stages = [s["stage"] for s in first["stages"]]
    assert stages == [
        "ingest",
        "dedupe",
        "filter",
        "split",
        "generate",
        "rules",
        "validate",
        "visual_validate",
        "export",
    ]
    for stage in stages:
        assert io.stage_is_complete(run, stage), stage
    frames = _export_frames(run)
    assert len(frames["captions"]) > 0 and len(frames["prompts"]) > 0
    assert list(frames["captions"].lens.cat.categories) == list(LENS_NAMES)
    assert frames["captions"].simulated.all()
    # Every candidate image is accounted for: exported, or rejected by some stage with a reason.
    ingest = first["stages"][0]
    assert ingest["records_in"] == ingest["records_out"] + ingest["rejected"]

    # The dataset card's Table-1 counts and the manifest equal the Parquet row counts.
    card = (run / "export" / "README.md").read_text()
    totals = [line for line in card.splitlines() if line.startswith("| Total |")]
    captions_total, prompts_total = (list(map(int, line.strip("| ").split(" | ")[1:])) for line in totals[:2])
    for total, frame in ((captions_total, frames["captions"]), (prompts_total, frames["prompts"])):
        assert total[0] == frame.image_id.nunique() and total[1] == len(frame)
        assert total[2:] == frame.lens.value_counts(sort=False).reindex(list(LENS_NAMES)).tolist()
    manifest = json.loads((run / "export" / "manifest.json").read_text())
    for name, frame in frames.items():
        assert manifest["tables"][f"{name}.parquet"] == len(frame)
    # Usage and the GPU-hour plan come from the per-shard journals (one line per answered request).
    journal_hashes = {
        json.loads(line)["hash"] for path in (run / "journal").glob("*/part-*.jsonl") for line in path.open()
    }
    assert sum(m["requests"] for m in manifest["usage"].values()) == len(journal_hashes) > 0
    plan = manifest["gpu_plan"]
    assert {s["stage"] for s in plan["stages"]} == {"filter", "generate", "validate", "visual_validate"}
    assert plan["total_gpu_hours"] == pytest.approx(sum(s["gpu_hours"] for s in plan["stages"]))
    assert "## Compute" in card

    # The export also loads with Hugging Face `datasets` (offline, local Parquet).
    datasets = pytest.importorskip("datasets")
    for name in ("images", "captions", "prompts", "rejections"):
        loaded = datasets.load_dataset(
            "parquet",
            data_files=str(run / "export" / f"{name}.parquet"),
            cache_dir=str(tmp_path / "hf-cache"),
        )["train"]
        assert loaded.num_rows == len(frames[name])
        assert set(loaded.column_names) == set(frames[name].columns)

    second_state = build_dataset(**params, return_state=True)
    second = second_state.result()
    assert all(s["shards_skipped"] == s["shards"] for s in second["stages"][:-1])
    shard_states = [
        st for name, st in stage_task_states(second_state.state_details.flow_run_id) if "-shard-" in name
    ]
    assert shard_states.count("Skipped") == sum(s["shards_skipped"] for s in second["stages"]) > 0
    assert "Skipped" not in [st for _, st in stage_task_states(state.state_details.flow_run_id)]
    again = _export_frames(run)
    for name in ("images", "captions", "prompts"):
        pd.testing.assert_frame_equal(frames[name], again[name])

    # Outputs on disk decide what is done: a deleted export is rebuilt, and so is a deleted run.
    import shutil

    shutil.rmtree(run / "export")
    third = build_dataset(**params)
    assert third["stages"][-1]["shards_skipped"] == 0
    rebuilt = _export_frames(run)
    for name in ("images", "captions", "prompts", "rejections"):
        pd.testing.assert_frame_equal(frames[name], rebuilt[name])
    shutil.rmtree(run)
    fourth = build_dataset(**params)
    assert all(s["shards_skipped"] == 0 for s in fourth["stages"])
    regenerated = _export_frames(run)
    for name in ("images", "captions", "prompts", "rejections"):
        pd.testing.assert_frame_equal(frames[name], regenerated[name])


def _assert_the_run_page_shows_everything(flow_run_id, run: Path, stages: list[dict]) -> None:
    artifacts = run_artifacts(flow_run_id)
    funnel = artifacts[funnel_key(str(run))].data
    report = (run / "export" / "report" / "index.html").resolve()
    assert f"**Build report:** [`{report}`]({report.as_uri()})" in funnel  # the page the export wrote
    for summary in stages:
        row = f"| {summary['stage']} | {summary['records_in']} | {summary['records_out']} | {summary['rejected']} |"
        assert row in funnel
        table = artifacts[stage_key(str(run), summary["stage"])].data
        assert f"| {summary['records_in']} | {summary['records_out']} | {summary['rejected']} |" in table
        for reason, count in (summary.get("reasons") or {}).items():
            assert f"| {reason} | {count} |" in table
    for stage in MODEL_STAGES:
        assert float(artifacts[progress_key(str(run), stage)].data) == 100.0
    logs = run_logs(flow_run_id)
    messages = [log.message for log in logs]
    # lenses_data lines (the ingest summary, per-shard model progress) reach the build's own run
    assert any(log.name.startswith("lenses_data.stages.ingest") for log in logs)
    assert any(log.name.startswith("lenses_data.models") and log.task_run_id for log in logs)
    banners = [m for m in messages if "SIMULATED ANSWERS" in m]
    assert sorted(m.split(":")[0] for m in banners) == sorted(MODEL_STAGES)


def _assert_manifest_counts_match_funnel_and_parquet(run: Path, stages: list[dict]) -> None:
    import pyarrow.parquet as pq

    manifest = json.loads((run / "export" / "manifest.json").read_text())
    counts = {c["stage"]: c for c in manifest["counts"]}
    funnel = {s["stage"]: s for s in stages if s["stage"] != "export"}
    assert set(counts) == set(funnel)
    for stage, summary in funnel.items():
        assert {k: counts[stage][k] for k in ("records_in", "records_out", "rejected")} == {
            k: summary[k] for k in ("records_in", "records_out", "rejected")
        }, stage

    def rows(pattern: str) -> int:
        return sum(pq.read_metadata(p).num_rows for p in run.glob(pattern))

    for stage, count in counts.items():
        assert count["rejected"] == rows(f"rejections/{stage}-part-*.parquet"), stage
        assert count["records_in"] == count["records_out"] + count["rejected"] or stage == "generate"
    assert counts["ingest"]["records_out"] == rows("ingest/part-*.parquet")
    assert counts["split"]["records_out"] == rows("split/part-*.parquet") == rows("export/images.parquet")
    assert counts["generate"]["records_out"] == rows("generate/part-*.parquet")
    assert counts["generate"]["records_in"] == counts["split"]["records_out"]
    exported_texts = rows("export/captions.parquet") + rows("export/prompts.parquet")
    assert counts["visual_validate"]["records_out"] == exported_texts
