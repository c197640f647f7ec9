"""One request's calls over real HTTP to a scripted server: the exact bodies and headers sent, the
re-ask cut to the served context, usage summed over calls, and how transport failures are retried,
backed off (the server's Retry-After honoured), reported whole, and how an outage ends a request."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from lenses_data.models import calls
from lenses_data.models import types as codes
from lenses_data.models.calls import CallOutcome, RoleRuntime, _answer, _call, run_one
from lenses_data.models.endpoints import Endpoint, EndpointPool, make_endpoint
from lenses_data.models.journal import JournalEntry
from lenses_data.models.messages import (
    IMAGE_SLOT,
    build_messages,
    fit_repeated_answer,
    load_image,
    reask_messages,
    render_body,
    request_fields,
    request_hash,
)
from lenses_data.models.types import AnswerError, ModelRequest, ModelResult
from lenses_data.simulator.asgi_thread import serve_in_thread
from lenses_data.simulator.testing import sim_models_config

Reply = tuple[int, dict[str, Any], dict[str, str]]


class ScriptedServer:
    """Answers each chat request with the next scripted reply and keeps what it was sent."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = list(replies)
        self.bodies: list[dict[str, Any]] = []
        self.keys: list[str | None] = []

    def app(self) -> Starlette:
        async def chat(request: Request) -> JSONResponse:
            self.bodies.append(json.loads(await request.body()))
            self.keys.append(request.headers.get(codes.KEY_HEADER))
            status, payload, headers = self.replies.pop(0)
            return JSONResponse(payload, status, headers=headers)

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def _ok(content: str, usage: dict[str, int], **payload: Any) -> Reply:
    choice = {"message": {"content": content}, "finish_reason": "stop"}
    return 200, {"choices": [choice], "usage": usage, **payload}, {}  # no "model": the role's is kept


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    return status, {"error": {"message": message, "type": "error"}}, headers or {}


class RecordingPool(EndpointPool):
    """The real pool, noting each acquire's affinity and avoided endpoint and each release."""

    def __init__(self, endpoints: list[Endpoint], retry: Any) -> None:
        super().__init__(endpoints, retry)
        self.acquired: list[tuple[str | None, Endpoint | None]] = []
        self.released: list[tuple[bool | None, str | None]] = []

    async def acquire(self, affinity: str | None = None, avoid: Endpoint | None = None) -> Endpoint:
        self.acquired.append((affinity, avoid))
        return await super().acquire(affinity, avoid)

    async def release(self, endpoint: Endpoint, healthy: bool | None, affinity: str | None = None) -> None:
        self.released.append((healthy, affinity))
        await super().release(endpoint, healthy, affinity)


@pytest.fixture
def delays(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, float | None]]:
    """Each backoff asked for, as (attempt, Retry-After hint); the wait itself is skipped."""
    asked: list[tuple[int, float | None]] = []

    def no_wait(attempt: int, retry: Any, rng: random.Random, hint: float | None = None) -> float:
        asked.append((attempt, hint))
        return 0.0

    monkeypatch.setattr(calls, "backoff_delay", no_wait)
    return asked


@pytest.fixture
def scripted() -> Iterator[Any]:
    opened: list[Any] = []

    def start(replies: list[Reply]) -> tuple[ScriptedServer, str]:
        server = ScriptedServer(replies)
        context = serve_in_thread(server.app(), what="scripted server")
        opened.append(context)
        return server, context.__enter__()

    yield start
    for context in opened:
        context.__exit__(None, None, None)


def _runtime(url: str, journaled: list[JournalEntry], **retry: Any) -> RoleRuntime:
    config = sim_models_config([url], timeout_s=5.0, **retry)
    role = config.filter.model_copy(update={"image_placeholder": "<image>", "image_affinity": True})
    pool = RecordingPool([make_endpoint(url, "key", 5.0, 4)], config.retry)

    async def put(entry: JournalEntry) -> None:
        journaled.append(entry)

    return RoleRuntime(
        "filter",
        role,
        pool,
        "structured_outputs",
        config.retry,
        None,
        False,
        random.Random(0),
        journal_put=put,
    )


def _run(rt: RoleRuntime, work: Any) -> Any:
    """Run one coroutine and close the pool in the same event loop (its clients belong to it)."""

    async def run() -> Any:
        try:
            return await work
        finally:
            await rt.pool.close()

    return asyncio.run(run())


def _good(text: str) -> str:
    if text != "GOOD":
        raise AnswerError(codes.INVALID_CHOICE, "not good")
    return text


def _image(tmp_path: Path) -> Any:
    path = tmp_path / "a.png"
    Image.new("RGB", (8, 8), (10, 120, 200)).save(path)
    return load_image(str(path))


def test_reask_repeats_the_answer_cut_to_the_context_and_sums_usage(scripted, tmp_path: Path) -> None:
    bad, first_usage = "BAD " * 200, {"prompt_tokens": 300, "completion_tokens": 200}
    server, url = scripted(
        [_ok(bad, first_usage), _ok("GOOD", {"prompt_tokens": 310, "completion_tokens": 1})]
    )
    journaled: list[JournalEntry] = []
    rt = _runtime(url, journaled, max_reasks=1)
    image = _image(tmp_path)
    request = ModelRequest(key="k-é", role="filter", text="Is it good?", image_path="a.png")
    fields = request_fields(request, rt.role, rt.choice_style, rt.json_mode)
    rt.context_tokens = int(fields["max_tokens"]) + 400  # room for part of the bad answer only
    result = _run(rt, _answer(rt, request, _good, image, "h"))

    usage = {"prompt_tokens": 610, "completion_tokens": 201}
    expected = ModelResult(
        key="k-é",
        ok=True,
        value="GOOD",
        raw="GOOD",
        attempts=2,
        model=rt.role.model,
        usage=usage,
        request_hash="h",
    )
    assert result == expected
    messages = build_messages(request, IMAGE_SLOT, rt.json_mode, "<image>")
    problem = f"{codes.INVALID_CHOICE}: not good"
    repeated = fit_repeated_answer(bad, first_usage, problem, int(fields["max_tokens"]), rt.context_tokens)
    assert repeated is not None and len(repeated) < len(bad)  # the case under test: a cut answer
    sent = [render_body(fields, messages, image.data_uri)]
    sent.append(render_body(fields, reask_messages(messages, repeated, problem), image.data_uri))
    assert server.bodies == [json.loads(body) for body in sent]
    assert server.keys == ["k-?", "k-?"]  # the key header in ASCII, whatever the key holds
    assert rt.pool.acquired == [(image.sha256, None)] * 2  # one endpoint for the image's answers
    assert rt.pool.released == [(True, image.sha256)] * 2
    assert [(e.status, e.raw, e.usage) for e in journaled] == [("ok", "GOOD", usage)]


def test_answer_with_no_room_to_reask_is_a_journaled_failure(scripted) -> None:
    usage = {"prompt_tokens": 300, "completion_tokens": 2}
    server, url = scripted([_ok("BAD", usage, system_fingerprint=codes.SIMULATOR_FINGERPRINT)])
    journaled: list[JournalEntry] = []
    rt = _runtime(url, journaled, max_reasks=2)
    rt.context_tokens = 300  # the prompt fills it: no re-ask fits
    request = ModelRequest(key="k", role="filter", text="Is it good?")
    result = _run(rt, _answer(rt, request, _good, None, "h"))

    expected = ModelResult(
        key="k",
        ok=False,
        raw="BAD",
        error_code=codes.INVALID_CHOICE,
        error_message="not good",
        attempts=1,
        model=rt.role.model,
        simulated=True,
        usage=usage,
        request_hash="h",
    )
    assert result == expected
    assert len(server.bodies) == 1
    [entry] = journaled
    assert (entry.status, entry.error_code, entry.attempts) == ("failed", codes.INVALID_CHOICE, 1)


def test_call_retries_elsewhere_with_the_servers_hint_then_reports_a_refusal_whole(scripted, delays) -> None:
    refusal = "x" * 500
    server, url = scripted([_error(503, "busy", {"Retry-After": "7"}), _error(400, refusal)])
    rt = _runtime(url, [], max_attempts=3, unhealthy_after=5)
    outcome = _run(rt, _call(rt, b'{"model": "m", "messages": []}', {codes.KEY_HEADER: "k"}, None))
    [endpoint] = rt.pool.endpoints

    assert (outcome.completion, outcome.calls, outcome.error_code) == (None, 2, codes.CLIENT_ERROR)
    assert outcome.error_message == "BadRequestError: " + f"Error code: 400 - {refusal}"[:300]
    assert delays == [(1, 7.0)]  # one backoff, between the two attempts, at the server's hint
    assert rt.pool.acquired == [(None, None), (None, endpoint)]  # the retry avoids the failed one
    assert rt.pool.released == [(False, None), (None, None)]
    assert server.keys == ["k", "k"]


def test_call_that_runs_out_of_attempts_says_how_many(scripted, delays) -> None:
    server, url = scripted([_error(500, "boom"), _error(500, "boom")])
    rt = _runtime(url, [], max_attempts=2, unhealthy_after=5)
    outcome = _run(rt, _call(rt, b'{"model": "m", "messages": []}', {}, None))

    assert (outcome.completion, outcome.calls, outcome.error_code) == (None, 2, codes.SERVER_ERROR)
    assert outcome.error_message == "InternalServerError: Error code: 500 - boom (after 2 attempts)"
    assert delays == [(1, None)]  # no backoff after the last attempt


def test_call_ends_in_an_outage_naming_the_last_failure(scripted, delays) -> None:
    server, url = scripted([_error(500, "boom")])
    rt = _runtime(url, [], max_attempts=3, unhealthy_after=1, down_grace_s=0.0, unhealthy_cooldown_s=60.0)

    async def twice() -> tuple[CallOutcome, CallOutcome]:
        first = await _call(rt, b'{"model": "m", "messages": []}', {}, None)
        again = await _call(rt, b'{"model": "m", "messages": []}', {}, None)  # already down
        await rt.pool.close()
        return first, again

    first, again = asyncio.run(twice())
    down = f"every endpoint ({url}) out of rotation for 0s, past retry.down_grace_s=0: none passed a health check"
    assert (first.completion, first.calls, first.error_code) == (None, 1, codes.TRANSPORT_ERROR)
    assert first.error_message == f"{down} (last failure: InternalServerError: Error code: 500 - boom)"
    assert again == CallOutcome(None, 0, codes.TRANSPORT_ERROR, down)
    assert len(server.bodies) == 1


def test_run_one_sends_the_image_and_keys_the_answer_by_its_whole_request(scripted, tmp_path: Path) -> None:
    server, url = scripted([_ok("GOOD", {"prompt_tokens": 3, "completion_tokens": 1})])
    rt = _runtime(url, [])
    image = _image(tmp_path)
    path = str(tmp_path / "a.png")
    request = ModelRequest(
        key="k", role="filter", text="Is it good?", image_path=path, choice=["GOOD", "BAD"]
    )
    inflight: dict[str, Any] = {}
    result = _run(rt, run_one(rt, request, _good, inflight))

    digest = request_hash(request, rt.role, image.sha256, rt.choice_style, rt.json_mode)
    assert (result.ok, result.value, result.request_hash) == (True, "GOOD", digest)
    fields = request_fields(request, rt.role, rt.choice_style, rt.json_mode)
    messages = build_messages(request, IMAGE_SLOT, rt.json_mode, "<image>")
    assert server.bodies == [json.loads(render_body(fields, messages, image.data_uri))]
    assert inflight == {}  # nothing left for later requests to wait on


def test_run_one_passes_a_parser_crash_through_and_leaves_nothing_in_flight(scripted) -> None:
    server, url = scripted([_ok("GOOD", {"prompt_tokens": 3, "completion_tokens": 1})])
    rt = _runtime(url, [])
    inflight: dict[str, Any] = {}

    def crash(text: str) -> str:
        raise RuntimeError("a bug in the stage's parser")

    request = ModelRequest(key="k", role="filter", text="Is it good?")
    with pytest.raises(RuntimeError, match="a bug in the stage's parser"):
        _run(rt, run_one(rt, request, crash, inflight))
    assert inflight == {}
