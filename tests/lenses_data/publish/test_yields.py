"""The yield bands: which funnels end a build (lenses_data.publish.yields, config `yields`)."""

from __future__ import annotations

import pytest

from lenses_data.config import config_from_dict
from lenses_data.config.paper import PAPER
from lenses_data.config.yields import FILTER_MAX_REJECTED, YieldsConfig
from lenses_data.publish.yields import YieldOutOfBand, out_of_band, wilson_interval


def _stage(stage: str, records_in: int, rejected: int, **reasons: int) -> dict:
    return {"stage": stage, "records_in": records_in, "records_out": records_in - rejected,
            "rejected": rejected, "reasons": reasons}  # fmt: skip


def test_a_validator_that_rejects_every_text_is_out_of_band_and_named_with_its_reasons():
    funnel = [
        _stage("rules", 289, 8),
        _stage("validate", 281, 281, fixed_field_changed=273, validator_discarded=8),
    ]
    [breach] = out_of_band(funnel, YieldsConfig())
    assert breach.stage == "validate" and breach.interval[0] > 0.95
    line = breach.describe()
    assert "rejected 281 of 281 records (100.0%" in line and "at most 25.0%" in line
    assert line.endswith("reasons: fixed_field_changed 273, validator_discarded 8")
    error = YieldOutOfBand([breach], {"stages": funnel})
    assert "validate" in str(error) and "--accept-yield" in str(error)


def test_the_sample_builds_funnel_is_in_band():
    # `lenses run --sample` (configs/sample.yaml), as measured on this branch.
    funnel = [_stage("ingest", 50, 20), _stage("dedupe", 30, 8), _stage("filter", 22, 3), _stage("split", 19, 0),
              _stage("generate", 19, 0), _stage("rules", 289, 8), _stage("validate", 281, 8),
              _stage("visual_validate", 273, 0), _stage("export", 273, 0)]  # fmt: skip
    assert out_of_band(funnel, YieldsConfig()) == []


def test_a_handful_of_records_is_never_out_of_band():
    assert out_of_band([_stage("validate", 3, 3), _stage("filter", 5, 5)], YieldsConfig()) == []
    assert out_of_band([_stage("validate", 40, 40)], YieldsConfig()) != []


def test_the_filter_band_comes_from_the_papers_pass_share():
    paper_rejected = PAPER["candidates"] - PAPER["images"]
    assert FILTER_MAX_REJECTED == pytest.approx(1 - 0.10 / 5, abs=1e-3)  # 001 Sec. 3.1: "approximately 10%"
    assert out_of_band([_stage("filter", PAPER["candidates"], paper_rejected)], YieldsConfig()) == []
    [breach] = out_of_band([_stage("filter", 10_000, 9_950, filter_no=9_950)], YieldsConfig())
    assert breach.stage == "filter"


def test_a_lower_bound_catches_a_stage_that_rejects_nothing():
    config = YieldsConfig.model_validate({"bands": {"filter": {"min_rejected": 0.5}}})
    [breach] = out_of_band([_stage("filter", 1000, 0)], config)
    assert "at least 50.0% rejected" in breach.describe()
    assert config.bands.of("filter").max_rejected is None  # a stage's band is taken whole


def test_stages_without_a_band_are_not_judged():
    funnel = [_stage("ingest", 1000, 1000), _stage("generate", 10, 40), _stage("export", 0, 0)]
    assert out_of_band(funnel, YieldsConfig()) == []


def test_wilson_interval_brackets_the_share():
    low, high = wilson_interval(281, 281, 3.29)
    assert 0.96 < low < 0.97 and high == pytest.approx(1.0)
    low, high = wilson_interval(50, 100, 1.96)
    assert low == pytest.approx(0.404, abs=1e-3) and high == pytest.approx(0.596, abs=1e-3)


def test_the_yields_section_merges_and_survives_a_round_trip():
    config = config_from_dict({"yields": {"bands": {"validate": {"max_rejected": 0.5}}}}, environ={})
    assert config.yields.bands.of("validate").max_rejected == 0.5
    assert config.yields.bands.of("rules").max_rejected == 0.25  # the other defaults stay
    again = config_from_dict(config.model_dump(mode="json"), environ={})
    assert again.yields == config.yields
    with pytest.raises(ValueError, match="min_rejected"):
        YieldsConfig.model_validate({"bands": {"rules": {"min_rejected": 0.5, "max_rejected": 0.1}}})
