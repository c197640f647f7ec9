"""Shard tasks are not cached; flat run parameters; which errors are retried; the UI markdown."""

from __future__ import annotations

import typing

import pytest

from flows.common import artifact_key, load_run_config, run_slug
from flows.failures import ParameterError, explain, is_transient, mark_stage
from flows.reporting import funnel_markdown, stage_key, summary_markdown
from lenses_data.config import ConfigError
from lenses_data.models.types import CapabilityMissing, EndpointUnavailable
from lenses_data.runlock import RunDirectoryInUse


def test_shard_tasks_use_no_prefect_cache():
    """Outputs on disk decide what is done: a cached result must never stand in for a deleted file."""
    from prefect.cache_policies import NO_CACHE

    from flows.stages import process_shard_task

    assert process_shard_task.cache_policy is NO_CACHE
    assert process_shard_task.persist_result is False


def test_shard_task_retries_are_written_only_in_the_config():
    """The decorator names no retries or delay (they would be dead: every submission sets both)."""
    from prefect import task

    from flows.stages import process_shard_batch_task, process_shard_task, shard_task_options
    from lenses_data.config import OrchestrationConfig

    prefect_defaults = task(lambda: None)
    for shard_task in (process_shard_task, process_shard_batch_task):
        assert shard_task.retries == prefect_defaults.retries, shard_task.name
        assert shard_task.retry_delay_seconds == prefect_defaults.retry_delay_seconds, shard_task.name
    options = shard_task_options(OrchestrationConfig(task_retries=5, retry_delay_s=3.5))
    assert options == {"retries": 5, "retry_delay_seconds": 3.5}
    configured = process_shard_task.with_options(**options)
    assert (configured.retries, configured.retry_delay_seconds) == (5, 3.5)


def test_run_config_merges_overrides_and_run_dir(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("shard_size: 10\ndedupe:\n  hamming_radius: 4\n")
    config = load_run_config(str(cfg), str(tmp_path / "r"), {"dedupe": {"hamming_radius": 6}})
    assert config.shard_size == 10
    assert config.dedupe.hamming_radius == 6
    assert config.run_dir == str(tmp_path / "r")


def test_flow_overrides_and_run_dir_beat_the_environment(tmp_path, monkeypatch):
    """As the flows' docstrings say: the `overrides` and `run_dir` parameters are the last word."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("split:\n  seed: file\n  test: 0.3\n")
    monkeypatch.setenv("LENSES__SPLIT__SEED", "env")
    monkeypatch.setenv("LENSES__SPLIT__TEST", "0.2")
    monkeypatch.setenv("LENSES__RUN_DIR", str(tmp_path / "env-run"))
    config = load_run_config(str(cfg), str(tmp_path / "r"), {"split": {"seed": "override"}})
    assert config.split.seed == "override"
    assert config.run_dir == str(tmp_path / "r")
    assert config.split.test == 0.2  # the environment still beats the file


def test_run_config_is_resolved_once_per_parameters(tmp_path, monkeypatch):
    """`lenses run`, the flow-run name and the flow body share one frozen config; a changed file
    or environment resolves anew."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("shard_size: 10\n")
    first = load_run_config(str(cfg), None, {"split": {"seed": "a"}})
    assert load_run_config(str(cfg), None, {"split": {"seed": "a"}}) is first
    monkeypatch.setenv("LENSES__SHARD_SIZE", "11")
    assert load_run_config(str(cfg), None, {"split": {"seed": "a"}}).shard_size == 11
    monkeypatch.delenv("LENSES__SHARD_SIZE")
    cfg.write_text("shard_size: 120\n")
    assert load_run_config(str(cfg), None, {"split": {"seed": "a"}}).shard_size == 120


def test_run_config_rejects_unknown_override():
    with pytest.raises(ConfigError, match="shard_sise"):
        load_run_config(overrides={"shard_sise": 3})


def test_flow_parameters_are_flat_typed_and_described():
    """One UI field per parameter, each with a description; stop_after accepts stage names only."""
    from prefect.utilities.callables import parameter_schema

    from flows.build import StageName, build_dataset
    from flows.stages import ingest_flow
    from flows.train import train_retriever
    from lenses_data.stages.registry import STAGES

    assert set(typing.get_args(StageName)) == set(STAGES)
    for flow, expected in (
        (build_dataset, {"config_path", "run_dir", "sample", "simulate", "stop_after", "overrides"}),
        (ingest_flow, {"config_path", "run_dir", "overrides"}),
        (train_retriever, {"config_path", "export_dir", "out_dir", "max_steps", "overrides"}),
    ):
        properties = parameter_schema(flow).model_dump()["properties"]
        assert expected <= set(properties), flow.name
        assert all(p.get("description") for p in properties.values()), flow.name
    stop_after = parameter_schema(build_dataset).model_dump()["properties"]["stop_after"]
    assert stop_after["anyOf"][0]["enum"][0] == "ingest"


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (ConfigError("config file not found: x.yaml"), False),
        (ValueError("no sources: pass --source"), False),
        (RunDirectoryInUse("runs/x", None), False),
        (CapabilityMissing("no image input", role="filter"), False),
        (FileNotFoundError("gone"), False),
        (EndpointUnavailable("filter endpoint down", role="filter"), True),
        (ConnectionError("reset"), True),
        (RuntimeError("worker crashed"), True),
    ],
)
def test_only_transient_errors_are_retried(error, transient):
    assert is_transient(error) is transient


def test_failure_line_names_stage_kind_and_problem():
    error = mark_stage(
        EndpointUnavailable("http://gpu-3:8000/v1 refused 12 requests", role="filter"), "filter"
    )
    line = explain(error)
    assert line.startswith("stage filter: model endpoint unavailable")
    assert "gpu-3:8000" in line and "\n" not in line
    assert (
        explain(ConfigError("config file not found: nope.yaml"))
        == "config error: config file not found: nope.yaml"
    )
    assert explain(ParameterError("stop_after='dedup' is not a stage")).startswith("parameter error: ")


def test_markdown_tables_show_counts_shards_and_reasons():
    summary = {
        "stage": "ingest",
        "records_in": 5,
        "records_out": 3,
        "rejected": 2,
        "shards": 4,
        "shards_skipped": 1,
        "reasons": {"truncated_image": 1, "zero_bytes": 1},
    }
    text = summary_markdown(summary)
    assert "| 5 | 3 | 2 | 4 | 3 | 1 |" in text
    assert "| truncated_image | 1 |" in text
    assert "| ingest | 5 | 3 | 2 | 4 | 1 |" in funnel_markdown([summary])
    assert artifact_key("stage-visual_validate") == "stage-visual-validate"


def test_the_run_page_shows_calls_sent_and_answers_reused_with_their_runs():
    summary = {
        "stage": "validate",
        "records_in": 9,
        "records_out": 9,
        "rejected": 0,
        "shards": 2,
        "shards_skipped": 0,
        "calls_sent": 3,
        "answers_reused": {"/runs/v1": 6},
    }
    funnel = funnel_markdown([summary]).splitlines()
    assert "| validate | 9 | 9 | 0 | 2 | 0 | 3 | 6 |" in funnel
    assert funnel[-1] == "answers reused from /runs/v1 (validate 6)"
    assert "Model calls sent: 3; answers reused: 6. Answers reused from /runs/v1 (validate 6)." in (
        summary_markdown(summary)
    )


def test_artifact_keys_are_per_run_directory(tmp_path):
    a, b = tmp_path / "a" / "nightly", tmp_path / "b" / "nightly"
    assert run_slug(a).startswith("nightly-") and run_slug(a) != run_slug(b)
    assert stage_key(str(a), "visual_validate") == f"{run_slug(a)}-stage-visual-validate"
    assert artifact_key(stage_key(str(a), "visual_validate")) == stage_key(str(a), "visual_validate")
