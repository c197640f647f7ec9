"""Config section `pipeline`: a user's own stages, placed into the declared pipeline without a fork.

    pipeline:
      extra_stages:
        - name: banned_words
          cls: my_stages:BannedWordStage     # module:Class, the module on PYTHONPATH
          after: rules                       # reads rules' rows; validate then reads this stage's
          settings: {word: harbor}           # the stage's own settings (its class's `Settings`)
          max_rejected: 0.5                  # its yield band (default: not judged)

The class is imported when the config is read, so a stage that cannot be imported, declares no
settings (`output_settings`) or no columns (`reads`, `writes`) stops the run before anything is
written (a config error: exit code 2). Its `settings` are checked against the class's pydantic
`Settings` model when it has one. The stage runs through the same entry as the built-in stages
(`lenses_data.stages.registry`, `lenses_data.stages.entry`): lock, settings guard (its `settings`
and `cls` recorded with its `output_settings`), journal and model client when it names a `role`,
retries and its yield band; it shows in the funnel, the build report, the card and the Prefect UI.
Its module must import wherever the stage runs: the workers of a Dask or Ray cluster too.
"""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lenses_data.config.pipeline import EXPORT, FunnelStep, StageSpec, builtin
from lenses_data.config.roles import ROLES

NAME_PATTERN = r"^[a-z][a-z0-9_]*$"  # a directory under RUN/ and a Prefect task name


def import_stage_class(path: str) -> type:
    """`module:Class` imported; a clear `ValueError` when it cannot be."""
    module_name, _, class_name = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"cannot import {module_name!r} ({error}); is its folder on PYTHONPATH?") from None
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise ValueError(f"module {module_name!r} has no class {class_name!r}")
    return cls


class ExtraStage(BaseModel):
    """One user stage: its class, where it goes, its own settings and its yield band."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN, description="The stage's name: RUN/<name>, the funnel's row")
    cls: str = Field(pattern=r"^[\w.]+:\w+$", description="The stage's class as module:Class")
    after: str = Field(description="The stage it follows and whose rows it reads")
    role: str | None = Field(None, description="The model role it asks (models.<role>); empty: a CPU stage")
    settings: dict[str, Any] = Field(
        default_factory=dict, description="Its own settings (the class's Settings)"
    )
    max_rejected: float | None = Field(None, ge=0, le=1, description="Largest share it may reject")
    min_rejected: float | None = Field(None, ge=0, le=1, description="Smallest share it may reject")
    help: str = Field("", description="One line on what it does (default: its class's docstring)")
    retries: int | None = Field(None, ge=0, description="Its shard tasks' retries; empty: the global ones")

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str | None) -> str | None:
        if role is not None and role not in ROLES:
            raise ValueError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
        return role

    @model_validator(mode="after")
    def _importable(self) -> ExtraStage:
        stage_cls = import_stage_class(self.cls)
        missing = [
            attr for attr in ("output_settings", "reads", "writes") if not getattr(stage_cls, attr, ())
        ]
        if missing:
            raise ValueError(
                f"stage class {self.cls} declares no {' / '.join(missing)}: a stage names the settings "
                "that decide its rows (output_settings) and the columns it reads and writes"
            )
        model = getattr(stage_cls, "Settings", None)
        if isinstance(model, type) and issubclass(model, BaseModel):
            try:
                model.model_validate(self.settings)
            except ValidationError as error:
                raise ValueError(f"settings of {self.name}: {error.errors()[0]['msg']}") from None
        return self

    def stage_class(self) -> type:
        return import_stage_class(self.cls)

    def spec(self) -> StageSpec:
        """This stage as the declaration writes one (its input placed by `run_specs`)."""
        stage_cls = self.stage_class()
        doc = (stage_cls.__doc__ or "").strip().splitlines()
        writes = set(getattr(stage_cls, "writes", ()))
        count = "texts" if {"kind", "image_id"} <= writes else "rows"
        return StageSpec(
            self.name,
            self.cls,
            self.after,
            self.help or (doc[0] if doc else f"user stage {self.cls}"),
            role=self.role,
            max_rejected=self.max_rejected,
            min_rejected=self.min_rejected,
            funnel=(FunnelStep("kept", count),),
            retries=self.retries,
            settings=dict(self.settings),
            user=True,
        )


class PipelineSection(BaseModel):
    """The run's own stages, in the order given (each placed after its `after`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    extra_stages: tuple[ExtraStage, ...] = Field(
        (), description="User stages: name, cls (module:Class), after, settings, role, band"
    )

    @model_validator(mode="after")
    def _placeable(self) -> PipelineSection:
        known = [name for name in builtin() if name != EXPORT]
        for stage in self.extra_stages:
            if stage.name in builtin() or stage.name in known:
                raise ValueError(f"extra_stages: stage name {stage.name!r} is taken; choose another")
            if stage.after not in known:
                raise ValueError(
                    f"extra_stages: {stage.name}: after={stage.after!r} is not a stage before export; "
                    f"known: {', '.join(known)}"
                )
            known.append(stage.name)
        return self
