"""Every stage has one face: `reads`/`writes` name table columns only, and each stage derives from one
of the two bases, whose `setup`/`close` release what it holds."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from lenses_data import schemas
from lenses_data.config import PipelineConfig
from lenses_data.stages.base import ShardedStage
from lenses_data.stages.global_base import GlobalStage
from lenses_data.stages.registry import STAGES, open_stage, stage_class

GLOBAL_STAGES = {"ingest", "dedupe", "split", "export"}


def schema_columns() -> set[str]:
    models = [v for v in vars(schemas).values() if isinstance(v, type) and issubclass(v, BaseModel)]
    return {name for model in models for name in model.model_fields}


@pytest.mark.parametrize("name", list(STAGES))
def test_reads_and_writes_name_columns_only(name):
    cls = stage_class(name)
    columns = schema_columns()
    assert set(cls.reads) <= columns, f"{name}.reads: {set(cls.reads) - columns}"
    assert set(cls.writes) <= columns, f"{name}.writes: {set(cls.writes) - columns}"


@pytest.mark.parametrize("name", list(STAGES))
def test_each_stage_derives_from_its_base(name):
    base = GlobalStage if name in GLOBAL_STAGES else ShardedStage
    assert issubclass(stage_class(name), base)


class RecordingClient:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_close_releases_the_model_client_once_per_close():
    client = RecordingClient()
    with stage_class("filter")(PipelineConfig(), client=client) as stage:  # type: ignore[arg-type]
        assert client.closed == 0
        assert stage.client is client
    assert client.closed == 1


def test_open_stage_closes_a_global_stage_without_a_client():
    with open_stage("split", PipelineConfig()) as stage:
        assert isinstance(stage, GlobalStage)
    stage.close()  # closing twice is harmless: nothing is held


def test_open_stage_closes_a_stage_whose_setup_failed(monkeypatch):
    from lenses_data.stages.split import SplitStage

    closed = []

    def failing_setup(self):
        raise OSError("could not open")

    monkeypatch.setattr(SplitStage, "setup", failing_setup)
    monkeypatch.setattr(SplitStage, "close", lambda self: closed.append(self.name))
    with pytest.raises(OSError, match="could not open"), open_stage("split", PipelineConfig()):
        pass
    assert closed == ["split"]
