"""The build-dataset flow on the sample pool against the simulator, in Prefect's test harness."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from flows.build import BuildParameters, build_dataset
from lenses_data import io
from lenses_data.schemas import LENS_NAMES

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
    params = BuildParameters(config_path=SAMPLE_CONFIG, run_dir=str(run), sample=True, simulate=True)
    first = build_dataset(params)

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

    second = build_dataset(params)
    assert all(s["shards_skipped"] == s["shards"] for s in second["stages"][:-1])
    again = _export_frames(run)
    for name in ("images", "captions", "prompts"):
        pd.testing.assert_frame_equal(frames[name], again[name])

    # Outputs on disk decide what is done: a deleted export is rebuilt, and so is a deleted run.
    import shutil

    shutil.rmtree(run / "export")
    third = build_dataset(params)
    assert third["stages"][-1]["shards_skipped"] == 0
    rebuilt = _export_frames(run)
    for name in ("images", "captions", "prompts", "rejections"):
        pd.testing.assert_frame_equal(frames[name], rebuilt[name])
    shutil.rmtree(run)
    fourth = build_dataset(params)
    assert all(s["shards_skipped"] == 0 for s in fourth["stages"])
    regenerated = _export_frames(run)
    for name in ("images", "captions", "prompts", "rejections"):
        pd.testing.assert_frame_equal(frames[name], regenerated[name])
