"""One protocol for every stage (`lenses_data.stages.protocol.Stage`): every registered stage
implements it, and a stage that does not declare `output_settings` (which the settings guard
records and compares on a rerun) is refused with an error naming it, when it is built and when a
run is guarded with it, before anything is written; so is one that does not declare its columns."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from lenses_data.config import ConfigError, PipelineConfig
from lenses_data.stages import registry
from lenses_data.stages.base import ShardedStage
from lenses_data.stages.global_base import GlobalStage
from lenses_data.stages.protocol import ShardStats, Stage, StageDeclarationError, declared_output_settings
from lenses_data.stages.settings_guard import check_run_settings


class Unguarded(ShardedStage):
    """A row stage that forgot its settings."""

    name = "unguarded"
    input_stage = "rules"

    def transform(self, run: Path, shard: int, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        return frame, frame.iloc[:0]


class UnguardedGlobal(GlobalStage):
    """A global stage that forgot its settings."""

    name = "unguarded_global"

    def run_shard(self, run: Path, shard: int) -> ShardStats:
        return ShardStats(self.name, shard)

    def finish(self, run: Path, shards: list[int], stats: list[ShardStats]) -> dict:
        return {}


class OneString(Unguarded):
    """The classic slip: a string, not a tuple of paths."""

    name = "one_string"
    output_settings = "annotate"  # type: ignore[assignment]


def test_every_registered_stage_implements_the_one_protocol_and_declares_its_settings():
    for name in registry.STAGES:
        cls = registry.stage_class(name)
        assert issubclass(cls, Stage), name
        assert declared_output_settings(cls), name  # every built-in stage names at least one path
        stage = cls(PipelineConfig())
        assert stage.name == name and stage.input_shards and stage.process_shard and stage.finish


@pytest.mark.parametrize("cls", [Unguarded, UnguardedGlobal])
def test_a_stage_without_output_settings_is_refused_when_built_naming_it(cls: type[Stage]):
    with pytest.raises(StageDeclarationError) as raised:
        cls(PipelineConfig())
    message = str(raised.value)
    assert f"stage {cls.name} ({__name__}.{cls.__qualname__}) declares no `output_settings`" in message
    assert isinstance(raised.value, ConfigError)  # the commands' exit code 2


class NoColumns(ShardedStage):
    """Declares its settings but not the columns it writes."""

    name = "no_columns"
    input_stage = "rules"
    output_settings = ("annotate",)
    reads = ("text_id",)


def test_a_stage_without_its_columns_is_refused_when_built_naming_it():
    with pytest.raises(
        StageDeclarationError, match=r"stage no_columns \(.*NoColumns\): `writes` must be declared"
    ):
        NoColumns(PipelineConfig())


def test_output_settings_must_be_a_tuple_of_paths():
    with pytest.raises(StageDeclarationError, match=r"stage one_string .* must be a tuple of config paths"):
        OneString(PipelineConfig())


def test_a_run_guarded_with_an_unguarded_stage_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    real = registry.stage_class  # the declared rules stage's class swapped for one without settings
    monkeypatch.setattr(
        registry,
        "stage_class",
        lambda name, config=None: Unguarded if name == "rules" else real(name, config),
    )
    run = tmp_path / "run"
    config = PipelineConfig(run_dir=str(run))
    with pytest.raises(StageDeclarationError, match="stage unguarded .* declares no `output_settings`"):
        check_run_settings(run, config, ["ingest", "rules"])
    assert not run.exists()


def test_the_abstract_protocol_cannot_be_built_half_written():
    class NoWork(GlobalStage):  # declares its settings but not its work
        name = "no_work"
        output_settings = ()

    with pytest.raises(TypeError, match="abstract"):
        NoWork(PipelineConfig())  # type: ignore[abstract]
