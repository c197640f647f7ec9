"""What goes into a stage's settings digest: the declared settings, and the previous stage's digest."""

from __future__ import annotations

from lenses_data.config import config_from_dict
from lenses_data.stages.registry import STAGES, pipeline_order, stage_class
from lenses_data.stages.settings_guard import expected_settings, stage_inputs


def _digests(**settings) -> dict[str, str]:
    config = config_from_dict({"run_dir": "/data/run", **settings}, environ={})
    return {
        name: entry["digest"] for name, entry in expected_settings(config, pipeline_order(config)).items()
    }


def test_every_stage_declares_settings_that_exist_in_the_config():
    config = config_from_dict({}, environ={})
    for name in STAGES:
        assert stage_class(name).output_settings, name
        assert stage_inputs(name, config), name  # every declared path resolves


def test_a_changed_setting_changes_its_stage_and_every_later_one_only():
    base = _digests()
    assert _digests() == base
    changed = _digests(split={"seed": "other"})
    order = list(base)
    first = order.index("split")
    assert all(changed[s] == base[s] for s in order[:first])
    assert all(changed[s] != base[s] for s in order[first:])


def test_speed_only_settings_leave_every_digest_alone():
    fast = _digests(
        ingest={"workers": 8},
        dedupe={"hash_workers": 8, "clip_device": "cpu"},
        orchestration={"max_workers": 9},
    )
    assert fast == _digests()


def test_paths_inside_the_run_directory_are_recorded_relative_to_it():
    def sources(run: str) -> list[str]:
        config = config_from_dict(
            {"run_dir": run, "ingest": {"sources": [f"{run}/sample", "/pool"]}}, environ={}
        )
        return stage_inputs("ingest", config)["ingest.sources"]

    assert sources("/a/run") == sources("/b/moved") == ["RUN/sample", "/pool"]
