"""The probe report's own words: the error a failed probe raises names the role, every URL and
every failed check, and `describe` lists every check as `lenses check` prints it; what `lenses check`
reports for a missing key, a dead endpoint and a real server's model list."""

from __future__ import annotations

import pytest

from lenses_data.models import probe
from lenses_data.models.messages import default_json_mode
from lenses_data.models.probe import ProbeReport
from lenses_data.models.probe_requests import Check
from lenses_data.simulator.simulator import free_port
from lenses_data.simulator.testing import sim_models_config


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


def test_check_reports_a_missing_key_and_goes_on_to_the_next_role(sim_url: str, monkeypatch) -> None:
    monkeypatch.delenv("LENSES_TEST_UNSET_KEY", raising=False)
    roles = list(probe.ROLE_NEEDS)
    config = sim_models_config([sim_url, f"{sim_url}/"]).with_role(
        roles[0], api_key_env="LENSES_TEST_UNSET_KEY"
    )
    reports = probe.check_roles(config, roles[:2])
    missing = f"models.{roles[0]}.api_key_env names 'LENSES_TEST_UNSET_KEY', which is not set or empty"
    role = config.role(roles[0])
    assert reports[0] == probe.ProbeReport(
        roles[0],
        (sim_url, f"{sim_url}/"),
        f"test/{roles[0]}",
        default_json_mode(role),
        "",
        checks=[probe.Check("endpoint", "fail", missing)],
    )
    assert str(reports[0].error()).startswith(f"model role {roles[0]!r} at {sim_url}, {sim_url}/ cannot")
    assert [r.role for r in reports] == roles[:2] and reports[1].ok  # the next role is still probed


def test_check_reports_a_dead_endpoint_with_its_error_class_and_message() -> None:
    roles = list(probe.ROLE_NEEDS)
    dead = [f"http://127.0.0.1:{free_port()}/v1", f"http://127.0.0.1:{free_port()}/v1"]
    (report,) = probe.check_roles(sim_models_config(dead, max_attempts=2), roles[:1])
    assert [(c.capability, c.status) for c in report.checks] == [("endpoint", "fail")]
    assert report.checks[0].detail == (
        f"model role {roles[0]!r}: endpoint {dead[0]}, {dead[1]} is unavailable "
        "(transport_error: APIConnectionError: Connection error.). Nothing was sent; start or fix the server and rerun."
    )


@pytest.mark.parametrize(
    ("served", "detail"),
    [
        (("test/{role}",), "test/{role} is served"),
        (
            ("a", "b", "c", "d", "e"),
            "test/{role} not in /models (a, b, c, d), but the server answers with it",
        ),
    ],
)
def test_a_real_server_s_model_check_says_whether_it_lists_the_model(served, detail) -> None:
    from tests.lenses_data.models.fakeserver import FakeServer, serving

    role = list(probe.ROLE_NEEDS)[0]
    with serving(FakeServer(served=tuple(m.format(role=role) for m in served))) as url:
        (report,) = probe.check_roles(sim_models_config([url]), [role])
    assert report.simulated is False
    assert [c for c in report.checks if c.capability == "model"] == [
        probe.Check("model", "ok", detail.format(role=role))
    ]
