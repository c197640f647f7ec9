"""Shard tasks are not cached; the run parameters and markdown of the flows."""

from __future__ import annotations

import pytest

from flows.common import RunParameters, artifact_key, funnel_markdown, summary_markdown
from lenses_data.config import ConfigError


def test_shard_tasks_use_no_prefect_cache():
    """Outputs on disk decide what is done: a cached result must never stand in for a deleted file."""
    from prefect.cache_policies import NO_CACHE

    from flows.stages import process_shard_task

    assert process_shard_task.cache_policy is NO_CACHE
    assert process_shard_task.persist_result is False


def test_run_parameters_merge_overrides_and_run_dir(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("shard_size: 10\ndedupe:\n  hamming_radius: 4\n")
    params = RunParameters(
        config_path=str(cfg), run_dir=str(tmp_path / "r"), overrides={"dedupe": {"hamming_radius": 6}}
    )
    config = params.load()
    assert config.shard_size == 10
    assert config.dedupe.hamming_radius == 6
    assert config.run_dir == str(tmp_path / "r")


def test_run_parameters_reject_unknown_override(tmp_path):
    with pytest.raises(ConfigError, match="shard_sise"):
        RunParameters(overrides={"shard_sise": 3}).load()


def test_markdown_tables_show_counts_and_reasons():
    summary = {
        "stage": "ingest",
        "records_in": 5,
        "records_out": 3,
        "rejected": 2,
        "shards": 1,
        "shards_skipped": 0,
        "reasons": {"truncated_image": 1, "zero_bytes": 1},
    }
    text = summary_markdown(summary)
    assert "| 5 | 3 | 2 | 1 | 0 |" in text
    assert "| truncated_image | 1 |" in text
    assert "| ingest | 5 | 3 | 2 |" in funnel_markdown([summary])
    assert artifact_key("stage-visual_validate") == "stage-visual-validate"
