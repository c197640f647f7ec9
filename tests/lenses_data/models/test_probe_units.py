"""The probe's own decisions against a small scripted OpenAI-compatible server over real HTTP: the
model check when /models does not list the model (one plain request tells "answers anyway", "not
served" and "down" apart), the server line, the listing's retry and down-wait schedule (on a fake
clock: no test waits for real), the report cache's lifetime, and `lenses check`'s own timeout."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from lenses_data.config.models import RetryConfig
from lenses_data.models import probe
from lenses_data.models.dialect import ServerInfo
from lenses_data.models.endpoints import make_endpoint
from lenses_data.models.messages import default_json_mode
from lenses_data.models.probe_requests import Check
from lenses_data.models.types import EndpointUnavailable
from lenses_data.simulator.asgi_thread import serve_in_thread
from lenses_data.simulator.testing import sim_models_config

ROLE = "validator"
MODEL = f"test/{ROLE}"  # the model sim_models_config gives the role


@pytest.fixture(autouse=True)
def _fresh_probe_cache():
    probe.forget()
    yield
    probe.forget()


class Scripted:
    """/v1/models lists `served` (with `max_model_len` for the role's model when given), GET
    /version answers `version` (404 when None), and every chat request gets `chat_status` (200: a
    short answer; a JSON object under `json_object`, HTTP 500 under `json_schema` as llama.cpp-like
    servers answer it). /v1/models answers `models_status` with `message` when that is not 200.
    Every chat body is kept."""

    def __init__(
        self,
        served: tuple[str, ...] = (),
        chat_status: int = 200,
        models_status: int = 200,
        message: str = "refused",
        version: str | None = None,
        max_model_len: int | None = None,
    ) -> None:
        self.served, self.chat_status, self.models_status = served, chat_status, models_status
        self.message, self.version, self.max_model_len = message, version, max_model_len
        self.calls: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []

    def app(self) -> Starlette:
        async def models(_: Request) -> JSONResponse:
            self.calls["models"] += 1
            if self.models_status != 200:
                return JSONResponse({"error": {"message": self.message}}, self.models_status)
            data = [{"id": m, "object": "model", "owned_by": "scripted"} for m in self.served]
            for entry in data:
                if entry["id"] == MODEL and self.max_model_len:
                    entry["max_model_len"] = self.max_model_len
            return JSONResponse({"object": "list", "data": data})

        async def version(_: Request) -> JSONResponse:
            if self.version is None:
                return JSONResponse({"detail": "Not Found"}, 404)
            return JSONResponse({"version": self.version})

        async def chat(request: Request) -> JSONResponse:
            self.calls["chat"] += 1
            body = await request.json()
            self.bodies.append(body)
            fmt = (body.get("response_format") or {}).get("type")
            if self.chat_status != 200 or fmt == "json_schema":
                status = 500 if fmt == "json_schema" else self.chat_status
                return JSONResponse({"error": {"message": self.message}}, status)
            choice = {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": '{"answer": "ok"}' if fmt == "json_object" else "Yes.",
                },
                "finish_reason": "stop",
            }
            usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
            return JSONResponse(
                {
                    "id": "c",
                    "object": "chat.completion",
                    "created": 0,
                    "model": MODEL,
                    "choices": [choice],
                    "usage": usage,
                }
            )

        routes = [
            Route("/v1/models", models),
            Route("/version", version),
            Route("/v1/chat/completions", chat, methods=["POST"]),
        ]
        return Starlette(routes=routes)


@contextlib.contextmanager
def serving(*servers: Scripted) -> Iterator[list[str]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(serve_in_thread(s.app(), what="scripted server")) for s in servers]


def _probe(
    urls: list[str],
    retry: RetryConfig,
    down_wait_s: float = 0.0,
    json_mode: str = "json_schema",
    choice_style: str = "structured_outputs",
) -> probe.ProbeReport:
    """`probe_role` for the validator with no capability needs: the model check alone."""
    role = sim_models_config(urls).role(ROLE)

    async def run() -> probe.ProbeReport:
        endpoints = [make_endpoint(url, "key", role.timeout_s, 1) for url in urls]
        try:
            return await probe.probe_role(
                ROLE, role, endpoints, retry, (), json_mode, choice_style, down_wait_s
            )
        finally:
            for endpoint in endpoints:
                await endpoint.close()

    return asyncio.run(run())


FAST_RETRY = RetryConfig(max_attempts=1, backoff_base_s=0.001, backoff_max_s=0.002)
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
        report = _probe(urls, FAST_RETRY, json_mode="json_object", choice_style="guided_choice")
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
        _probe(urls, FAST_RETRY)
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
        report = _probe(urls, FAST_RETRY)
    assert report.checks == [Check("server", "ok", expected), Check("model", "ok", f"{MODEL} is served")]
    assert report.server is not None and (report.server.version, report.server.max_model_len) == (
        version,
        4096,
    )


class FakeClock:
    """probe's `time.monotonic` and `asyncio.sleep`: a sleep moves the clock and is recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, now: float = 0.0) -> None:
        self.now, self.sleeps = now, []
        monkeypatch.setattr(probe, "time", SimpleNamespace(monotonic=lambda: self.now))
        monkeypatch.setattr(probe, "asyncio", SimpleNamespace(sleep=self.sleep))

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _down_message(text: str) -> str:
    """The listing's error text for a 503: the exception's class, then its text cut to 200."""
    return f"InternalServerError: {('Error code: 503 - ' + text)[:200]}"


LONG = "B restarting: " + "weights loading, " * 20  # past the 200 characters kept of an error


@pytest.mark.parametrize(
    ("wait_s", "sleeps", "warned"),
    [
        (0.0, [0.25, 0.5], None),  # no down-wait: the retries alone
        (10.0, [0.25, 0.5, 4.0, 4.0, 1.25], "9"),  # cooldown steps, the last one cut to the deadline
        (0.755, [0.25, 0.5, 0.01], "0"),  # never a busy loop: at least 10 ms a step
    ],
)
def test_a_role_whose_endpoints_are_all_down_is_retried_then_waited_for(
    monkeypatch, caplog, wait_s, sleeps, warned
) -> None:
    clock = FakeClock(monkeypatch)
    caplog.set_level("WARNING", logger="lenses_data.models.probe")
    retry = RetryConfig(
        max_attempts=3, backoff_base_s=0.25, backoff_max_s=30, jitter=0.0, unhealthy_cooldown_s=4.0
    )
    first, second = (
        Scripted(models_status=503, message="A restarting"),
        Scripted(models_status=503, message=LONG),
    )
    with serving(first, second) as urls, pytest.raises(EndpointUnavailable) as raised:
        _probe(urls, retry, down_wait_s=wait_s)
    # Every attempt asks every endpoint, in order; the error is the last endpoint's last answer.
    assert clock.sleeps == sleeps
    assert first.calls == second.calls == Counter(models=len(sleeps) + 1)
    last = _down_message(LONG)
    assert raised.value.message == (
        f"model role {ROLE!r}: endpoint {urls[0]}, {urls[1]} is unavailable (server_error: {last[:200]}). "
        "Nothing was sent; start or fix the server and rerun."
    )
    assert (raised.value.urls, raised.value.code) == (tuple(urls), "server_error")
    warnings = [r.getMessage() for r in caplog.records if r.name == "lenses_data.models.probe"]
    expected = [
        f"every endpoint of role {ROLE} is down ({last}); waiting up to {warned}s for one to answer (retry.down_grace_s)"
    ]
    assert warnings == (expected if warned else [])


def test_the_listing_recovers_when_an_endpoint_answers_during_the_wait(monkeypatch) -> None:
    clock = FakeClock(monkeypatch)
    down = Scripted(models_status=503)
    retry = RetryConfig(max_attempts=2, backoff_base_s=0.25, jitter=0.0, unhealthy_cooldown_s=4.0)

    async def recovering(seconds: float) -> None:  # the second replica is back after the first wait
        await FakeClock.sleep(clock, seconds)
        down.models_status, down.served = (200, (MODEL,)) if len(clock.sleeps) > 1 else (503, ())

    monkeypatch.setattr(probe, "asyncio", SimpleNamespace(sleep=recovering))
    with serving(down) as urls:
        report = _probe(urls, retry, down_wait_s=60.0)
    assert clock.sleeps == [0.25, 4.0] and down.calls["models"] == 3
    assert report.checks[1] == Check("model", "ok", f"{MODEL} is served")


def test_the_listing_s_backoff_is_the_seeded_jitter_every_run_repeats(monkeypatch) -> None:
    # Probe retries draw their jitter from a generator seeded with 0 (as Prober's requests do), so
    # a probe's waits are the same on every run: no run-to-run timing drift in the probe logs.
    import random

    clock = FakeClock(monkeypatch)
    retry = RetryConfig(max_attempts=4, backoff_base_s=1.0, backoff_max_s=30, jitter=0.5)
    with serving(Scripted(models_status=503)) as urls, pytest.raises(EndpointUnavailable):
        _probe(urls, retry)
    rng = random.Random(0)
    assert clock.sleeps == [2 ** (attempt - 1) * (1.0 - 0.5 * rng.random()) for attempt in (1, 2, 3)]


def _cached(url: str, retry: RetryConfig, json_mode: str = "json_schema") -> probe.ProbeReport:
    """`cached_probe` of the validator at `url` (no capability needs), on its own event loop as a
    shard's client would."""
    role = sim_models_config([url]).role(ROLE)

    async def run() -> probe.ProbeReport:
        endpoints = [make_endpoint(url, "key", role.timeout_s, 1)]
        try:
            return await probe.cached_probe(ROLE, role, endpoints, retry, (), json_mode, "structured_outputs")
        finally:
            await endpoints[0].close()

    return asyncio.run(run())


def test_a_cached_report_lives_exactly_the_ttl_for_the_same_settings(monkeypatch) -> None:
    clock = FakeClock(monkeypatch, now=1000.0)
    server = Scripted(served=(MODEL,))
    with serving(server) as (url,):
        first = _cached(url, FAST_RETRY)
        clock.now = 1000.0 + probe.CACHE_TTL_S - 0.001
        assert _cached(url, FAST_RETRY) is first and server.calls["models"] == 1
        other = _cached(url, FAST_RETRY, json_mode="json_object")  # other settings: probed for them
        assert other.json_mode == "json_object" and server.calls["models"] == 2
        clock.now = 1000.0 + probe.CACHE_TTL_S  # expired: probed again
        again = _cached(url, FAST_RETRY)
    assert again is not first and again == first and server.calls["models"] == 3


def test_a_probe_before_work_waits_the_down_grace_and_never_caches_an_outage(monkeypatch) -> None:
    # The shards of a build wait for a restarting replica (retry.down_grace_s) as their requests
    # would; a probe that found the role down is not kept, so the next shard asks again.
    clock = FakeClock(monkeypatch)
    retry = RetryConfig(max_attempts=1, jitter=0.0, unhealthy_cooldown_s=2.0, down_grace_s=5.0)
    server = Scripted(models_status=503)
    with serving(server) as (url,):
        for shard in (1, 2):
            with pytest.raises(EndpointUnavailable):
                _cached(url, retry)
            assert server.calls["models"] == 4 * shard
    assert clock.sleeps == [2.0, 2.0, 1.0] * 2


@contextlib.contextmanager
def _silent_server(hold_s: float) -> Iterator[str]:
    """Accepts connections and answers nothing (a hung server); each is closed after `hold_s`."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def hold(conn: socket.socket) -> None:
        stop.wait(hold_s)
        conn.close()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                conn, _ = listener.accept()
                threading.Thread(target=hold, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join()
        listener.close()


def test_check_gives_a_hung_endpoint_the_role_s_timeout(monkeypatch) -> None:
    # `lenses check` must not hang on a server that accepts and never answers: the role's timeout_s
    # bounds each request, and the role is reported with its settings and the timeout.
    with _silent_server(hold_s=5.0) as url:
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
            f"model role {ROLE!r}: endpoint {url} is unavailable (server_error: {_down_message('loading')}). "
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
