"""Is any stage's yield absurd? The build's funnel judged against the `yields` bands.

The share judged is distinct records rejected over records in, as each stage's summary counts
them (`lenses_data.stages.base.rejected_records`: a text failing two rules is one record). A
share is out of band only when its whole Wilson interval (z = `yields.confidence_z`) lies outside
the band: 281 of 281 texts rejected is out of a 25% band (the interval starts at 96%), 3 of 3 is
not (it starts at 22%), so small test and sample builds are not failed by chance.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lenses_data.config.yields import Band, YieldsConfig

# The exit code of `lenses run` and of every stage command whose stage ended outside its band (not accepted).
YIELD_EXIT = 5


@dataclass(frozen=True)
class YieldBreach:
    """A stage whose rejection share left its band, with what it rejected and why."""

    stage: str
    records_in: int
    rejected: int
    interval: tuple[float, float]
    band: Band
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def share(self) -> float:
        return self.rejected / self.records_in

    def describe(self) -> str:
        low, high = self.interval
        limit = (
            f"at most {self.band.max_rejected:.1%}"
            if self.band.max_rejected is not None and low > self.band.max_rejected
            else f"at least {self.band.min_rejected or 0:.1%}"
        )
        reasons = (
            ", ".join(f"{reason} {count}" for reason, count in _by_count(self.reasons)) or "none recorded"
        )
        return (
            f"stage {self.stage} rejected {self.rejected} of {self.records_in} records ({self.share:.1%}; "
            f"{low:.1%}-{high:.1%} allowing for sampling noise), outside its band ({limit} rejected); "
            f"reasons: {reasons}"
        )


class YieldOutOfBand(Exception):
    """A build whose funnel has a stage outside its band: the dataset was written, but is suspect.
    `result` is the build's result (run_dir, stages, ...), so a caller can still show the funnel."""

    def __init__(self, breaches: list[YieldBreach], result: dict[str, Any]) -> None:
        self.breaches, self.result = breaches, result
        stages = ", ".join(b.stage for b in breaches)
        super().__init__(
            f"yield out of band in {stages}: {breaches[0].describe()}"
            + (f" (and {len(breaches) - 1} more stage(s))" if len(breaches) > 1 else "")
            + ". Look at the rejections (RUN/<stage>/rejections-*.parquet, the build report); "
            "accept with --accept-yield (`lenses run` or the stage's command), the stage flow's "
            "accept_yield parameter or `yields.accept: true`"
        )


def judge_yields(
    result: dict[str, Any], config: YieldsConfig, bands: Mapping[str, Band] | None = None
) -> list[str]:
    """Judge the stages of `result["stages"]` (a build's funnel, or the one stage a command or a
    stage flow ran): raise `YieldOutOfBand` when one left its band, unless `config.accept`; then
    the breaches' descriptions, also kept in the result as `accepted_yields`, for the caller to
    report (stderr, the Prefect run's log). `bands`: every stage's of the run (`bands_of_run`: a
    user stage's too); default `config.bands`."""
    breaches = out_of_band(result["stages"], config, bands)
    if breaches and not config.accept:
        raise YieldOutOfBand(breaches, result)
    accepted = [breach.describe() for breach in breaches]
    if accepted:
        result["accepted_yields"] = accepted
    return accepted


def wilson_interval(hits: int, n: int, z: float) -> tuple[float, float]:
    """The Wilson score interval of a share `hits / n` (n > 0)."""
    p = hits / n
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    centre, scale = p + z * z / (2 * n), 1 + z * z / n
    return max(0.0, (centre - spread) / scale), min(1.0, (centre + spread) / scale)


def judge_stage(
    summary: dict[str, Any], config: YieldsConfig, bands: Mapping[str, Band] | None = None
) -> YieldBreach | None:
    """The breach of one stage's summary, or None (in band, no band, or no records in). `bands`:
    every stage's of the run (`bands_of_run`, a user stage's too); default `config.bands`."""
    stage = str(summary.get("stage", ""))
    band = bands.get(stage) if bands is not None else config.bands.of(stage)
    records_in, rejected = int(summary.get("records_in") or 0), int(summary.get("rejected") or 0)
    if band is None or records_in <= 0 or (band.min_rejected is None and band.max_rejected is None):
        return None
    low, high = wilson_interval(min(rejected, records_in), records_in, config.confidence_z)
    above = band.max_rejected is not None and low > band.max_rejected
    below = band.min_rejected is not None and high < band.min_rejected
    if not (above or below):
        return None
    return YieldBreach(stage, records_in, rejected, (low, high), band, dict(summary.get("reasons") or {}))


def out_of_band(
    summaries: Iterable[dict[str, Any]], config: YieldsConfig, bands: Mapping[str, Band] | None = None
) -> list[YieldBreach]:
    """Every stage of the funnel whose rejection share left its band, in pipeline order."""
    return [breach for summary in summaries if (breach := judge_stage(summary, config, bands)) is not None]


def _by_count(reasons: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
