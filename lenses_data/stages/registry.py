"""Stage names, their classes (imported lazily) and the pipeline order."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from lenses_data.config.roles import ROLE_OF_STAGE

if TYPE_CHECKING:
    from lenses_data.config import PipelineConfig
    from lenses_data.stages.base import Stage

# The stages, written here only, in run order (with dedupe before the filter, the default):
# name -> "module:Class"; modules are imported only when the stage is built.
STAGES: dict[str, str] = {
    "ingest": "lenses_data.stages.ingest:IngestStage",
    "dedupe": "lenses_data.stages.dedupe:DedupeStage",
    "filter": "lenses_data.stages.filter:FilterStage",
    "split": "lenses_data.stages.split:SplitStage",
    "generate": "lenses_data.stages.generate:GenerateStage",
    "rules": "lenses_data.stages.rules:RulesStage",
    "validate": "lenses_data.stages.validate:ValidateStage",
    "visual_validate": "lenses_data.stages.visual_validate:VisualValidateStage",
    "export": "lenses_data.stages.export:ExportStage",
}

# The stages that ask a model: those a model role names (lenses_data.config.roles).
MODEL_STAGES = frozenset(ROLE_OF_STAGE)


def pipeline_order(config: PipelineConfig) -> list[str]:
    """Stages in run order. Dedupe goes before the VLM filter unless the config restores the paper's order."""
    order = list(STAGES)
    if not config.dedupe_before_filter:  # the paper's order: the filter sees every candidate
        dedupe, vlm_filter = order.index("dedupe"), order.index("filter")
        order[dedupe], order[vlm_filter] = order[vlm_filter], order[dedupe]
    return order


def stage_class(name: str) -> type:
    if name not in STAGES:
        raise KeyError(f"unknown stage {name!r}; known: {', '.join(STAGES)}")
    module_name, _, class_name = STAGES[name].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def build_stage(name: str, config: PipelineConfig, *, with_client: bool = True) -> Stage:
    """Construct a stage; model stages get a client built from the config (journal in the run dir).

    `with_client=False` builds a model stage without one, for work that makes no model call
    (listing shards, finishing); the caller closes a client it asked for (see `open_stage`).
    """
    cls = stage_class(name)
    if name not in MODEL_STAGES or not with_client:
        return cls(config)
    from lenses_data.models.client import ModelClient

    client = ModelClient.from_config(config.models, journal_dir=Path(config.run_dir) / "journal")
    return cls(config, client=client)


@contextlib.contextmanager
def open_stage(name: str, config: PipelineConfig, *, with_client: bool = True) -> Iterator[Stage]:
    """A stage set up for the block and closed when it ends (its model client and journal released)."""
    stage = build_stage(name, config, with_client=with_client)
    try:
        stage.setup()
        yield stage
    finally:
        stage.close()
