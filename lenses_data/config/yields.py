"""Config section `yields`: the share of its input each stage may reject before the build says so.

A build whose filter keeps nothing, or whose validator discards every text, still writes a dataset
(an empty one); without a check it exits 0 and hands off to training. So each judged stage has a
band for its rejection share (distinct records rejected / records in, from the build's funnel),
and a build with a stage outside its band ends with exit code 5 and the reasons' counts, unless
`accept` is set (`lenses run --accept-yield`). How the share is judged against the band, with
room for the sampling noise of small builds: `lenses_data.publish.yields`.

Where the defaults come from (001 = main paper, in shared/seeds):
- filter: 001 Sec. 3.1 and Table 1, about 10% of the candidates pass (`FILTER_PASS_SHARE`). Out of band
  when fewer than a fifth of that pass: a constraint or parser that turns answers into NO.
- rules, validate, visual_validate: 001 says failing texts "are either revised or discarded" and
  gives no rate; the project's assumptions are a few percent (`SimContentSettings`: 3% text, 1%
  visual discards; the rules kept 97% of the simulator's texts with the word limits rejecting, more
  now that they only flag by default, docs/benchmarks.md). A quarter of
  the texts is several times that: a model that garbles the fixed Focus field, or a validator
  prompt it misreads, ends far above it.
- ingest, dedupe: no band (their share is the source's: broken files, duplicate-heavy crawls);
  generate: none either (its input is images, its output texts: the shares do not compare).
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from lenses_data.config.frozen import FrozenModel
from lenses_data.config.paper import FILTER_PASS_SHARE

# A fifth of the paper's filter pass share (10%): the largest share a filter may reject.
FILTER_MAX_REJECTED = round(1 - FILTER_PASS_SHARE / 5, 3)
TEXT_MAX_REJECTED = 0.25


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


class YieldBands(FrozenModel):
    """One band per stage (the stage's name); a stage without limits is not judged."""

    # `validate` is a BaseModel method: the field is `validate_`, read and written as `validate`.
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    ingest: Band = Field(default_factory=Band)
    dedupe: Band = Field(default_factory=Band)
    filter: Band = Field(default_factory=lambda: Band(max_rejected=FILTER_MAX_REJECTED))
    split: Band = Field(default_factory=Band)
    generate: Band = Field(default_factory=Band)
    rules: Band = Field(default_factory=lambda: Band(max_rejected=TEXT_MAX_REJECTED))
    validate_: Band = Field(default_factory=lambda: Band(max_rejected=TEXT_MAX_REJECTED), alias="validate")
    visual_validate: Band = Field(default_factory=lambda: Band(max_rejected=TEXT_MAX_REJECTED))
    export: Band = Field(default_factory=Band)

    def of(self, stage: str) -> Band | None:
        """The band of a stage by its pipeline name; None for a stage this section does not know."""
        return getattr(self, "validate_" if stage == "validate" else stage, None)


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
