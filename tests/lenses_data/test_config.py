"""Config loading: YAML + environment overrides, errors that name the field and the file."""

from __future__ import annotations

import pytest

from lenses_data.config import ConfigError, PipelineConfig, load_config


def test_defaults_load_without_a_file():
    config = load_config(None, environ={})
    assert isinstance(config, PipelineConfig)
    assert config.dedupe_before_filter is True


def test_yaml_values_and_env_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("run_dir: runs/x\nshard_size: 50\ndedupe:\n  hamming_radius: 5\n")
    config = load_config(path, environ={"LENSES__DEDUPE__HAMMING_RADIUS": "7", "LENSES__SHARD_SIZE": "9"})
    assert config.run_dir == "runs/x"
    assert config.dedupe.hamming_radius == 7
    assert config.shard_size == 9


def test_unknown_field_names_field_and_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("dedupe:\n  hamming_raduis: 5\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert "dedupe.hamming_raduis" in str(info.value)
    assert str(path) in str(info.value)


def test_out_of_range_value_names_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("shard_size: 0\n")
    with pytest.raises(ConfigError, match="shard_size"):
        load_config(path, environ={})


def test_bad_env_override_says_it_came_from_the_environment(tmp_path):
    with pytest.raises(ConfigError, match="environment"):
        load_config(None, environ={"LENSES__SHARD_SIZE": "-3"})


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml", environ={})
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken, environ={})


@pytest.mark.parametrize("name", ["sample.yaml", "production.yaml"])
def test_shipped_configs_load(name):
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "configs" / name
    config = load_config(path, environ={})
    assert config.shard_size >= 1


def test_production_config_reproduces_table_1_split_sizes():
    from pathlib import Path

    config = load_config(Path(__file__).resolve().parents[2] / "configs" / "production.yaml", environ={})
    assert (config.split.valid, config.split.test) == (1100, 5500)
    assert config.dedupe.clip_checkpoint  # production never runs CLIP dedupe with random weights


def test_a_roles_processor_settings_replace_the_default_not_merge_into_it() -> None:
    from lenses_data.config.models import ModelsConfig

    models = ModelsConfig.model_validate({"filter": {"mm_processor_kwargs": {"max_patches": 1}}})
    assert models.filter.mm_processor_kwargs == {"max_patches": 1}
    assert ModelsConfig.model_validate({"filter": {"model": "m"}}).filter.mm_processor_kwargs == {
        "max_dynamic_patch": 1
    }


def test_shard_batches_group_consecutive_shards_and_cap_the_task_runs_of_a_stage():
    from lenses_data.config.orchestration import OrchestrationConfig

    shards = list(range(10))
    assert OrchestrationConfig().shard_batches(shards) == [[s] for s in shards]
    fours = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert OrchestrationConfig(shards_per_task=4).shard_batches(shards) == fours
    assert OrchestrationConfig(max_tasks_per_stage=3).shard_batches(shards) == fours  # ceil(10 / 3)
    # The cap only ever enlarges groups: a stage with fewer shards keeps shards_per_task.
    assert OrchestrationConfig(shards_per_task=2, max_tasks_per_stage=50).shard_batches(shards)[0] == [0, 1]
    assert OrchestrationConfig(max_tasks_per_stage=3).shard_batches([]) == []
    with pytest.raises(ValueError, match="shards_per_task"):
        OrchestrationConfig(shards_per_task=0)


def test_a_stages_own_orchestration_values_fall_back_to_the_global_ones(tmp_path):
    from lenses_data.config import ConfigError, config_from_dict
    from lenses_data.stages.entry import guarded_stage

    settings = config_from_dict(
        {
            "orchestration": {
                "shards_per_task": 2,
                "stages": {"generate": {"shards_per_task": 5, "max_workers": 1}},
            }
        },
        environ={},
    ).orchestration
    own, other = settings.for_stage("generate"), settings.for_stage("rules")
    assert (own.shards_per_task, own.max_workers, own.task_retries) == (5, 1, settings.task_retries)
    assert own.shard_batches(list(range(6))) == [[0, 1, 2, 3, 4], [5]]
    assert other == settings and other.shard_batches(list(range(3))) == [[0, 1], [2]]
    typo = {"run_dir": str(tmp_path / "run"), "orchestration": {"stages": {"valdate": {"task_retries": 1}}}}
    with pytest.raises(ConfigError, match=r"unknown stage\(s\) \['valdate'\]"):  # refused on entering a run
        with guarded_stage("split", config_from_dict(typo, environ={})):
            pass
    assert not (tmp_path / "run" / "split").exists()
    with pytest.raises(ConfigError, match="retries"):  # and so is a field a stage cannot set
        config_from_dict({"orchestration": {"stages": {"rules": {"retries": 1}}}}, environ={})


def test_one_precedence_defaults_file_environment_overrides(tmp_path):
    """Lowest first: defaults, the file, the LENSES__ environment, then explicit overrides."""
    from lenses_data.config import resolve_config

    path = tmp_path / "c.yaml"
    path.write_text("shard_size: 50\nsplit:\n  seed: file\n  test: 0.3\ndedupe:\n  hamming_radius: 5\n")
    environ = {"LENSES__SPLIT__SEED": "env", "LENSES__SPLIT__TEST": "0.2"}
    config = resolve_config(path, {"split": {"seed": "override"}}, environ)
    assert config.split.seed == "override"  # an override beats the environment
    assert config.split.test == 0.2  # the environment beats the file
    assert config.dedupe.hamming_radius == 5 and config.shard_size == 50  # the file beats the defaults
    assert config.split.valid == PipelineConfig().split.valid  # the defaults fill the rest


def test_a_resolved_config_is_immutable():
    from pydantic import ValidationError

    config = load_config(None, environ={})
    with pytest.raises(ValidationError, match="frozen"):
        config.run_dir = "elsewhere"
    with pytest.raises(ValidationError, match="frozen"):
        config.annotate.caption_words.max = 30
    changed = config.model_copy(update={"run_dir": "elsewhere"})  # a change is a new config
    assert (changed.run_dir, config.run_dir) == ("elsewhere", PipelineConfig().run_dir)


def _mutable_values(value, where: str = "config"):
    """Every list, dict or set reachable from `value` that is not frozen (a FrozenDict is)."""
    from pydantic import BaseModel

    from lenses_data.config.frozen import FrozenDict

    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _mutable_values(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, dict):
        if type(value) is not FrozenDict:
            yield where
        for key, item in value.items():
            yield from _mutable_values(item, f"{where}[{key!r}]")
    elif isinstance(value, list | set | bytearray):
        yield where
    elif isinstance(value, tuple):
        for i, item in enumerate(value):
            yield from _mutable_values(item, f"{where}[{i}]")


def test_a_resolved_config_is_frozen_all_the_way_down(tmp_path):
    """Lists and dicts too, from the defaults, the file and the overrides: the cache shares the object
    across the process, so `base_urls.append(...)` must raise, not change every stage's config."""
    import copy
    import pickle

    import yaml

    from lenses_data.config import resolve_config

    path = tmp_path / "c.yaml"
    path.write_text(
        "models:\n  filter:\n    base_urls: [http://a:1/v1, http://b:2/v1]\n"
        "    sampling: {extra: {top_k: 5, stop: [x, y]}}\n"
        "orchestration: {runner_options: {n_workers: 2}}\n"
    )
    config = resolve_config(path, {"ingest": {"sources": ["a", "b"]}}, environ={})
    assert list(_mutable_values(config)) == []
    urls = config.models.filter.base_urls
    assert urls == ("http://a:1/v1", "http://b:2/v1")
    with pytest.raises(AttributeError):
        urls.append("http://c:3/v1")
    with pytest.raises(TypeError, match="frozen"):
        config.models.filter.sampling.extra["top_k"] = 6
    with pytest.raises(TypeError, match="frozen"):
        config.orchestration.runner_options.update(n_workers=3)
    assert config.models.filter.sampling.extra["stop"] == ("x", "y")
    # A change is a new config, frozen too; serialised it is lists and dicts again.
    changed = config.model_copy(update={"ingest": config.ingest.model_copy(update={"sources": ["c"]})})
    assert changed.ingest.sources == ("c",) and list(_mutable_values(changed)) == []
    moved = config.models.with_role("filter", base_urls=["http://d:4/v1"])
    assert moved.filter.base_urls == ("http://d:4/v1",)
    dumped = config.model_dump()
    assert type(dumped["models"]["filter"]["base_urls"]) is tuple  # python mode keeps tuples
    text = yaml.safe_dump(config.model_dump(mode="json"))
    assert "- http://a:1/v1" in text and PipelineConfig.model_validate(yaml.safe_load(text)) == config
    for copied in (pickle.loads(pickle.dumps(config)), copy.deepcopy(config)):
        assert copied == config and list(_mutable_values(copied)) == []
