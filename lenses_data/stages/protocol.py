"""The one protocol every stage implements: `Stage`, the base of the row stages
(`base.ShardedStage`, and its model stages `annotation_base.AnnotationStage`) and of the global
stages (`global_base.GlobalStage`).

A stage declares its `name`, the stage it reads (`input_stage`), the columns it `reads` and
`writes` (checked on every shard by the row stages' base), and `output_settings`: the config paths
(and `prompt:<template>` hashes) that decide its output, which the settings guard records and
compares on a rerun (`settings_guard.py`). The last three are required: a stage that does not
declare its settings would run unguarded, so constructing it, or guarding a run with it, fails with
`StageDeclarationError` naming the stage; so does building one that declares no columns. An empty
tuple is a declaration too (a stage whose output no setting changes, ingest's input that is no
table), but it must be written.

The work: `input_shards` lists the shard indices, an idempotent `process_shard` does one (skipping
a shard whose output and rejections exist) and `finish` writes the success marker and returns the
summary. `setup`/`close` (or `with stage:`) open and release what the stage holds.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lenses_data.config import ConfigError, PipelineConfig


@dataclass
class ShardStats:
    """What one shard of one stage did: every input record is either out or rejected."""

    stage: str
    shard: int
    records_in: int = 0
    records_out: int = 0
    rejected: int = 0
    skipped: bool = False
    reasons: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "shard": self.shard,
            "records_in": self.records_in,
            "records_out": self.records_out,
            "rejected": self.rejected,
            "skipped": self.skipped,
            "reasons": dict(self.reasons),
            "extra": dict(self.extra),
        }


class StageDeclarationError(ConfigError):
    """A stage class lacks part of the protocol's declaration (e.g. `output_settings`)."""


def _label(cls: type) -> str:
    return f"stage {getattr(cls, 'name', '') or '?'} ({cls.__module__}.{cls.__qualname__})"


def declared_output_settings(cls: type) -> tuple[str, ...]:
    """The class's `output_settings`; a clear error naming the stage when it declares none.

    Read from the class, so the settings guard can check a stage before building it."""
    settings = getattr(cls, "output_settings", None)
    if settings is None:
        raise StageDeclarationError(
            f"{_label(cls)} declares no `output_settings`: every stage names the config paths (and "
            "`prompt:<template>` hashes) that decide its output, so a rerun with other settings is "
            "refused instead of mixing outputs; declare e.g. output_settings = ('annotate',)"
        )
    if not isinstance(settings, tuple) or not all(isinstance(p, str) and p for p in settings):
        raise StageDeclarationError(
            f"{_label(cls)}: `output_settings` must be a tuple of config paths (non-empty strings), "
            f"got {settings!r}"
        )
    return settings


def check_declaration(cls: type) -> None:
    """Everything the protocol asks a stage class to declare: `output_settings`, and the columns it
    `reads` and `writes` (a tuple each, empty for a stage whose input or output is no table)."""
    declared_output_settings(cls)
    for attribute in ("reads", "writes"):
        columns = getattr(cls, attribute, None)
        if not isinstance(columns, tuple) or not all(isinstance(c, str) and c for c in columns):
            raise StageDeclarationError(
                f"{_label(cls)}: `{attribute}` must be declared as a tuple of column names, got {columns!r}"
            )


class Stage(abc.ABC):
    """The stage protocol; a subclass declares the class attributes below and writes the work."""

    name: str = ""
    input_stage: str | None = None
    # Required, with no default here (`check_declaration`, when the stage is built).
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    output_settings: tuple[str, ...]

    def __init__(self, config: PipelineConfig) -> None:
        check_declaration(type(self))
        self.config = config

    @abc.abstractmethod
    def input_shards(self, run: Path) -> list[int]:
        """The shard indices this stage runs over (a clear error when its input is not finished)."""

    @abc.abstractmethod
    def process_shard(self, run: Path, shard: int) -> ShardStats:
        """Do one shard (skipped when its outputs exist) and return what it did."""

    @abc.abstractmethod
    def finish(self, run: Path, shards: list[int], stats: list[ShardStats]) -> dict[str, Any]:
        """Write the success marker once every shard is done; return the stage's summary."""

    # Optional hooks: no-ops unless a stage holds something (not abstract, on purpose).
    def setup(self) -> None:  # noqa: B027
        """Open what the stage needs before its first shard (nothing by default)."""

    def close(self) -> None:  # noqa: B027
        """Release what the stage holds (nothing by default; a model stage closes its client)."""

    def __enter__(self) -> Stage:
        self.setup()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
