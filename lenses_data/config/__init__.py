"""Pipeline configuration: one pydantic model, resolved once per run and immutable after.

Sections live in their own modules (ingest, dedupe, models, annotate, export); this module composes them.
One precedence, lowest first (`resolve_config`): the built-in defaults, the YAML file, the
`LENSES__<SECTION>__<FIELD>=value` environment (values parsed as YAML scalars, e.g.
`LENSES__DEDUPE__HAMMING_RADIUS=6` or `LENSES__SHARD_SIZE=500`), then explicit overrides (a flow's
`overrides` and `run_dir` parameters, a command's flags). Every model is frozen, all the way down
(`config/frozen.py`: lists are tuples, dicts `FrozenDict`s): a changed setting is a new config
(`model_copy(update=...)`), so what a run checked is what its stages use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError

from lenses_data.config.annotate import AnnotateConfig
from lenses_data.config.dedupe import DedupeConfig, SplitConfig
from lenses_data.config.export import ExportConfig
from lenses_data.config.extra_stages import PipelineSection
from lenses_data.config.frozen import FrozenModel
from lenses_data.config.ingest import IngestConfig
from lenses_data.config.models import ModelsConfig
from lenses_data.config.orchestration import OrchestrationConfig
from lenses_data.config.simulator import SimulatorSettings
from lenses_data.config.yields import YieldsConfig
from lenses_data.merge import deep_merge

ENV_PREFIX = "LENSES__"


class ConfigError(ValueError):
    """A configuration problem, worded for the person who wrote the file."""


class PipelineConfig(FrozenModel):
    run_dir: str = Field("runs/sample", description="Run directory: one folder per stage")
    shard_size: int = Field(
        2000, ge=1, description="Images per shard: the unit of work, resume and parallelism"
    )
    dedupe_before_filter: bool = Field(
        True, description="Dedupe before the VLM filter (saves GPU calls); False restores the paper's order"
    )
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    dedupe: DedupeConfig = Field(default_factory=DedupeConfig)
    split: SplitConfig = Field(default_factory=SplitConfig)
    models: ModelsConfig = Field(default_factory=ModelsConfig)
    annotate: AnnotateConfig = Field(default_factory=AnnotateConfig)
    export: ExportConfig = Field(default_factory=ExportConfig)
    orchestration: OrchestrationConfig = Field(default_factory=OrchestrationConfig)
    simulator: SimulatorSettings = Field(default_factory=SimulatorSettings)
    yields: YieldsConfig = Field(default_factory=YieldsConfig)
    pipeline: PipelineSection = Field(default_factory=PipelineSection)


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for key, raw in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        path = [part.lower() for part in key[len(ENV_PREFIX) :].split("__") if part]
        node = overrides
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = yaml.safe_load(raw)
    return overrides


def _describe_errors(error: ValidationError, origin: str) -> str:
    lines = [f"invalid configuration in {origin}:"]
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"]) or "(top level)"
        lines.append(f"  {field}: {item['msg']} (got {item.get('input')!r})")
    return "\n".join(lines)


def config_from_dict(
    data: Mapping[str, Any],
    origin: str = "<dict>",
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> PipelineConfig:
    """`data` (a file's settings), then the `LENSES__` environment, then `overrides`, validated once."""
    env = _env_overrides(os.environ if environ is None else environ)
    merged = deep_merge(deep_merge(dict(data), env), dict(overrides or {}))
    try:
        return PipelineConfig.model_validate(merged)
    except ValidationError as error:
        where = origin + (" (with LENSES__ environment overrides)" if env else "")
        where += " (with explicit overrides)" if overrides else ""
        raise ConfigError(_describe_errors(error, where)) from None


def _read_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of settings")
    return data


def resolve_config(
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> PipelineConfig:
    """The one precedence, lowest first: defaults, the YAML file at `path` (None: none), the
    `LENSES__` environment (`environ`, default `os.environ`), then `overrides` (nested as in the
    YAML). Errors name the field and where it came from."""
    if path is None:
        return config_from_dict({}, "<defaults>", environ, overrides)
    return config_from_dict(_read_file(Path(path)), str(path), environ, overrides)


def load_config(path: str | Path | None, environ: Mapping[str, str] | None = None) -> PipelineConfig:
    """A YAML config file (None: the built-in defaults) with the environment; no explicit overrides."""
    return resolve_config(path, None, environ)


__all__ = [
    "AnnotateConfig",
    "ConfigError",
    "DedupeConfig",
    "ExportConfig",
    "IngestConfig",
    "ModelsConfig",
    "OrchestrationConfig",
    "PipelineConfig",
    "SimulatorSettings",
    "SplitConfig",
    "config_from_dict",
    "deep_merge",
    "load_config",
    "resolve_config",
]
