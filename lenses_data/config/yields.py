"""Config section `yields`: the share of its input each stage may reject before the build says so.

A build whose filter keeps nothing, or whose validator discards every text, still writes a dataset
(an empty one); without a check it exits 0 and hands off to training. So each judged stage has a
band for its rejection share (distinct records rejected / records in, from the build's funnel),
and a build with a stage outside its band ends with exit code 5 and the reasons' counts, unless
`accept` is set (`lenses run --accept-yield`). How the share is judged against the band, with
room for the sampling noise of small builds: `lenses_data.publish.yields`.

The stages and their default bands are declared with the pipeline (`lenses_data.config.pipeline`,
where each default's source is given); this section has one field per declared stage, so an unknown
stage name is refused. A user's own stage (`pipeline.extra_stages`) carries its band in its entry.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from lenses_data.config.frozen import FrozenModel
from lenses_data.config.pipeline import BUILTIN_STAGES, FILTER_MAX_REJECTED, TEXT_MAX_REJECTED, StageSpec

__all__ = ["FILTER_MAX_REJECTED", "TEXT_MAX_REJECTED", "Band", "YieldBands", "YieldsConfig"]


class Band(FrozenModel):
    """The rejection shares a stage may have; None: that side is not judged."""

    min_rejected: float | None = Field(None, ge=0, le=1, description="Smallest share it may reject")
    max_rejected: float | None = Field(None, ge=0, le=1, description="Largest share it may reject")

    @model_validator(mode="after")
    def _ordered(self) -> Band:
        low, high = self.min_rejected, self.max_rejected
        if low is not None and high is not None and low > high:
            raise ValueError(f"min_rejected {low} is above max_rejected {high}")
        return self


def _field_name(stage: str) -> str:
    """A stage's field: its name, or `<name>_` where that is a BaseModel attribute (`validate`)."""
    return f"{stage}_" if hasattr(BaseModel, stage) else stage


def _band_field(spec: StageSpec) -> Any:
    band = Band(min_rejected=spec.min_rejected, max_rejected=spec.max_rejected)
    alias = spec.name if _field_name(spec.name) != spec.name else None
    return (Band, Field(default_factory=lambda: band, alias=alias))


class _BandsBase(FrozenModel):
    # `validate` is a BaseModel method: the field is `validate_`, read and written as `validate`.
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    def of(self, stage: str) -> Band | None:
        """The band of a stage by its pipeline name; None for a stage this section does not know."""
        return getattr(self, _field_name(stage), None)


# One band per declared stage (the stage's name); a stage without limits is not judged.
YieldBands = create_model(
    "YieldBands",
    __base__=_BandsBase,
    __doc__="One band per stage (the stage's name); a stage without limits is not judged.",
    **{_field_name(spec.name): _band_field(spec) for spec in BUILTIN_STAGES},
)


class YieldsConfig(FrozenModel):
    accept: bool = Field(
        False,
        description="Accept a stage whose rejection share left its band: the build reports it and exits "
        "0 (as `lenses run --accept-yield`); false: the build ends with exit code 5",
    )
    confidence_z: float = Field(
        3.29,
        gt=0,
        description="z of the interval around a stage's rejection share (3.29: 99.9%, two-sided); only a "
        "share whose whole interval lies outside the band counts, so a handful of records never does",
    )
    bands: YieldBands = Field(default_factory=YieldBands)


def bands_of_run(config: Any) -> dict[str, Band]:
    """The band of every stage of a run of `config` (a `PipelineConfig`): a built-in stage's from
    `yields.bands`, a user stage's from its entry in `pipeline.extra_stages`."""
    from lenses_data.config.pipeline import run_specs

    bands: dict[str, Band] = {}
    for spec in run_specs(config):
        own = Band(min_rejected=spec.min_rejected, max_rejected=spec.max_rejected)
        bands[spec.name] = own if spec.user else (config.yields.bands.of(spec.name) or own)
    return bands
