"""The one line a build whose yield left its band ends with (the Prefect UI, `--watch`, the log)."""

from __future__ import annotations

from flows.failures import explain, is_transient
from lenses_data.config.yields import YieldsConfig
from lenses_data.publish.yields import YieldOutOfBand, out_of_band


def test_the_failure_line_names_the_stage_its_counts_and_how_to_accept():
    funnel = [
        {"stage": "validate", "records_in": 281, "rejected": 281, "reasons": {"fixed_field_changed": 281}}
    ]
    error = YieldOutOfBand(out_of_band(funnel, YieldsConfig()), {"stages": funnel})
    line = explain(error)
    assert line.startswith("built, but a stage's yield is absurd")
    assert "stage validate rejected 281 of 281 records" in line and "fixed_field_changed 281" in line
    assert "--accept-yield" in line and "\n" not in line
    assert not is_transient(error)  # the same funnel on every attempt
