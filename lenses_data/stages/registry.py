"""The stages of a run, built from the declaration (`lenses_data.config.pipeline`): their classes
(imported lazily), the run order, and each stage placed on the input the run gives it."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from lenses_data.config.pipeline import BUILTIN_STAGES, StageSpec, run_specs, spec_of
from lenses_data.config.roles import ROLE_OF_STAGE

if TYPE_CHECKING:
    from lenses_data.config import PipelineConfig
    from lenses_data.stages.base import Stage

# The built-in stages in declared order: name -> "module:Class" (`lenses_data.config.pipeline`);
# modules are imported only when the stage is built.
STAGES: dict[str, str] = {spec.name: spec.cls for spec in BUILTIN_STAGES}

# The built-in stages that ask a model: those a model role names.
MODEL_STAGES = frozenset(ROLE_OF_STAGE)


def pipeline_order(config: PipelineConfig) -> list[str]:
    """Stages of a run in order: the declared ones (dedupe before the VLM filter unless the config
    restores the paper's order) with the config's own stages placed (`pipeline.extra_stages`)."""
    return [spec.name for spec in run_specs(config)]


def _import(path: str) -> type:
    module_name, _, class_name = path.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def stage_class(name: str, config: PipelineConfig | None = None) -> type:
    """A stage's class: a declared one, or one of `config`'s own stages."""
    return _import(spec_of(name, config).cls)


def build_stage(name: str, config: PipelineConfig, *, with_client: bool = True) -> Stage:
    """Construct a stage; model stages get a client built from the config (journal in the run dir).

    `with_client=False` builds a model stage without one, for work that makes no model call
    (listing shards, finishing); the caller closes a client it asked for (see `open_stage`).
    """
    spec = spec_of(name, config)
    cls = stage_class(name, config)  # the one way from a stage's name to its class
    if spec.role is None or not with_client:
        stage = cls(config)
    else:
        from lenses_data.models.client import ModelClient

        client = ModelClient.from_config(config.models, journal_dir=Path(config.run_dir) / "journal")
        stage = cls(config, client=client)
    return placed(stage, spec)


def placed(stage: Stage, spec: StageSpec) -> Stage:
    """The stage as the run places it: the input it reads (a user stage placed before it changes
    that); a user stage gets its name and its own settings (validated by its class's `Settings`)."""
    stage.input_stage = spec.input
    if spec.user:
        stage.name = spec.name
        model = getattr(type(stage), "Settings", None)
        stage.settings = model.model_validate(spec.settings) if model is not None else dict(spec.settings)
    return stage


@contextlib.contextmanager
def open_stage(name: str, config: PipelineConfig, *, with_client: bool = True) -> Iterator[Stage]:
    """A stage set up for the block and closed when it ends (its model client and journal released)."""
    stage = build_stage(name, config, with_client=with_client)
    try:
        stage.setup()
        yield stage
    finally:
        stage.close()
