"""The probe's own decisions against a small scripted OpenAI-compatible server over real HTTP
(models/probeserver.py): the model check when /models does not list the model (one plain request
tells "answers anyway", "not served" and "down" apart), the server line, the context check's
requests, and what `lenses check` reports for a hung or down role."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from lenses_data.models import probe
from lenses_data.models.dialect import ServerInfo
from lenses_data.models.endpoints import make_endpoint
from lenses_data.models.messages import default_json_mode
from lenses_data.models.probe_requests import Check
from lenses_data.models.types import EndpointUnavailable
from lenses_data.simulator.testing import sim_models_config
from tests.lenses_data.models.probeserver import (
    FAST_RETRY,
    MODEL,
    ROLE,
    Scripted,
    down_message,
    probe_validator,
    serving,
    silent_server,
)

pytestmark = pytest.mark.usefixtures("fresh_probe_cache")


NO_VERSION = "no GET /version: the config's vllm_version decides (choice constraint as structured_outputs)"


@pytest.mark.parametrize(
    ("served", "chat_status", "expected"),
    [
        ((), 200, Check("model", "ok", f"{MODEL} not in /models (none), but the server answers with it")),
        (
            ("a", "b", "c", "d", "e"),
            404,
            Check("model", "fail", f"{MODEL} is not served (served: a, b, c, d)"),
        ),
        ((), 401, Check("model", "fail", f"{MODEL} is not served (served: none)")),
    ],
)
def test_an_unlisted_model_is_asked_once_and_judged_by_the_answer(served, chat_status, expected) -> None:
    # Nothing else was asked (no needs): the model check sends the one plain request itself. An
    # answer means the server takes the name; a 401/404 (refused for every request) means it
    # does not serve it; the report says which, with up to four of the names it does list. The
    # modes the report hands the client are the ones asked for (no capability check changed them).
    server = Scripted(served=served, chat_status=chat_status)
    with serving(server) as urls:
        report = probe_validator(urls, FAST_RETRY, json_mode="json_object", choice_style="guided_choice")
    server_line = Check("server", "ok", NO_VERSION.replace("structured_outputs", "guided_choice"))
    assert report == probe.ProbeReport(
        ROLE,
        tuple(urls),
        MODEL,
        "json_object",
        "guided_choice",
        simulated=False,
        server=ServerInfo(None, None),
        checks=[server_line, expected],
    )
    assert report.ok is (expected.status == "ok")
    assert server.calls == Counter(models=1, chat=1)


def test_an_unlisted_model_on_a_failing_server_is_an_unavailable_endpoint() -> None:
    # A 500 to the plain request is not "model not served": the endpoint is down (exit 4 upstream).
    server = Scripted(served=("other/model",), chat_status=500, message="engine dead")
    with serving(server) as urls, pytest.raises(EndpointUnavailable) as raised:
        probe_validator(urls, FAST_RETRY)
    error = raised.value
    assert (error.role, error.urls, error.code) == (ROLE, (urls[0],), "server_error")
    assert error.message == (
        f"model role {ROLE!r}: endpoint {urls[0]} is unavailable (server_error: InternalServerError: "
        "Error code: 500 - engine dead). Nothing was sent; start or fix the "
        "server and rerun."
    )


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (None, f"{NO_VERSION}; serves 4096 tokens of context (re-asks are cut to fit)"),
        (
            "0.11.0",
            "vLLM 0.11.0: choice constraint sent as structured_outputs; serves 4096 tokens of context (re-asks are cut to fit)",
        ),
    ],
)
def test_the_server_line_names_the_release_and_the_served_context(version, expected) -> None:
    with serving(Scripted(served=(MODEL,), version=version, max_model_len=4096)) as urls:
        report = probe_validator(urls, FAST_RETRY)
    assert report.checks == [Check("server", "ok", expected), Check("model", "ok", f"{MODEL} is served")]
    assert report.server is not None and (report.server.version, report.server.max_model_len) == (
        version,
        4096,
    )


def test_check_gives_a_hung_endpoint_the_role_s_timeout(monkeypatch) -> None:
    # `lenses check` must not hang on a server that accepts and never answers: the role's timeout_s
    # bounds each request, and the role is reported with its settings and the timeout.
    with silent_server(hold_s=5.0) as url:
        config = sim_models_config([url], timeout_s=0.2, max_attempts=1)
        (report,) = probe.check_roles(config, [ROLE])
    role = config.role(ROLE)
    detail = (
        f"model role {ROLE!r}: endpoint {url} is unavailable (timeout: APITimeoutError: Request timed out.). "
        "Nothing was sent; start or fix the server and rerun."
    )
    assert report == probe.ProbeReport(
        ROLE,
        (url,),
        MODEL,
        default_json_mode(role),
        config.choice_style(ROLE),
        checks=[Check("endpoint", "fail", detail)],
    )


def test_check_reports_a_down_role_at_once_without_the_down_grace() -> None:
    # `lenses check` is asked by an operator now: a role whose server is down is reported after the
    # run's retries, not waited for (the config's down_grace_s is 600 s).
    server = Scripted(models_status=503, message="loading")
    with serving(server) as (url,):
        config = sim_models_config([url], max_attempts=2)
        (report,) = probe.check_roles(config, [ROLE])
    assert config.retry.down_grace_s == 600.0 and server.calls == Counter(models=2)
    assert report.checks == [
        Check(
            "endpoint",
            "fail",
            f"model role {ROLE!r}: endpoint {url} is unavailable (server_error: {down_message('loading')}). "
            "Nothing was sent; start or fix the server and rerun.",
        )
    ]


def test_the_context_check_sends_the_role_s_requests_in_the_json_mode_the_probe_chose() -> None:
    # A server refusing json_schema gets the role's requests as json_object, with the schema in the
    # prompt: the context check must measure those prompts (the longer ones), not the bare ones.
    from lenses_data.config import config_from_dict
    from lenses_data.models.messages import build_messages
    from lenses_data.stages.sample_requests import representative_requests

    samples = representative_requests(config_from_dict({}, environ={}))[ROLE]
    server = Scripted(served=(MODEL,), max_model_len=100_000)
    with serving(server) as (url,):
        models = sim_models_config([url])
        role = models.role(ROLE)

        async def run() -> probe.ProbeReport:
            endpoints = [make_endpoint(url, "key", role.timeout_s, 1)]
            try:
                needs = ("json",)
                return await probe.probe_role(
                    ROLE,
                    role,
                    endpoints,
                    models.retry,
                    needs,
                    "json_schema",
                    "structured_outputs",
                    samples=samples,
                )
            finally:
                await endpoints[0].close()

        report = asyncio.run(run())
    assert report.json_mode == "json_object" and report.ok
    assert [(c.capability, c.status) for c in report.checks] == [
        ("server", "ok"),
        ("model", "ok"),
        ("json", "fallback"),
        ("context", "ok"),
    ]
    sent = [body["messages"] for body in server.bodies if body["max_tokens"] == 1]
    assert sent == [
        build_messages(request, None, "json_object", role.image_placeholder) for _, request in samples
    ]
    assert samples and all(request.json_schema for _, request in samples)
