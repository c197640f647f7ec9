"""The probe report's own words: the error a failed probe raises names the role, every URL and
every failed check, and `describe` lists every check as `lenses check` prints it."""

from __future__ import annotations

from lenses_data.models.probe import ProbeReport
from lenses_data.models.probe_requests import Check


def _report(*checks: Check) -> ProbeReport:
    urls = ("http://a:1/v1", "http://b:2/v1")
    return ProbeReport("vision", urls, "m", "json_schema", "choice", checks=list(checks))


def test_a_report_with_no_failed_check_raises_nothing():
    report = _report(Check("endpoint", "ok", "up"), Check("json", "fallback", "json_object"))
    assert report.ok and report.error() is None


def test_the_error_names_the_role_every_url_and_every_failed_check():
    report = _report(
        Check("endpoint", "ok", "up"),
        Check("image", "fail", "image parts refused"),
        Check("choice", "fail", "no constraint works"),
    )
    error = report.error()
    assert error is not None and not report.ok
    assert str(error) == (
        "model role 'vision' at http://a:1/v1, http://b:2/v1 cannot do what it needs "
        "(image: image parts refused; choice: no constraint works). Nothing was sent; fix the "
        "server or the role's settings (`lenses check` shows the probe)."
    )
    assert (error.role, error.urls, error.capability) == (
        "vision",
        ("http://a:1/v1", "http://b:2/v1"),
        "image",
    )


def test_describe_lists_every_check_with_its_status_and_detail():
    report = _report(Check("endpoint", "ok", "up"), Check("json", "fallback", "json_object"))
    assert report.describe() == "endpoint ok (up); json fallback (json_object)"
