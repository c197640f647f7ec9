"""An OpenAI-compatible chat-completions server that simulates the pipeline's models.

Answers are deterministic functions of the request: the pipeline's own requests are answered the
way the Lenses paper's models answered them (simlenses; rates and sources in
lenses_data.config.simulator), any other schema is filled in validly (simcontent). Faults are
injected by rate and are deterministic per (request hash, attempt number) given the seed, where
the attempt number is how many times this exact request was seen before; so retries can succeed
and tests are reproducible. Every answer is marked simulated (`system_fingerprint` and a
`simulated/` model prefix). GET /sim/stats reports calls per request hash; GET /sim/requests the
last request bodies when `record_requests` is set (images shortened to their size and hash).

Server faults (`SimServerFaults`, opt-in) reproduce what real OpenAI-compatible servers do to this
pipeline on every attempt, not by chance: HTTP 500 on `response_format` json_schema, a structured
choice ignored (free text), HTTP 500 on image input, JSON answers cut at max_tokens.

Latency model (opt-in): `replicas` servers, each working through one request at a time at
`prefill_tps` prompt tokens/s and `decode_tps` completion tokens/s (the usage the answer reports).
A request waits for the replica that frees first, so N concurrent requests against one replica take
about N times one request's service time and against N replicas about one. The queue is a virtual
clock (the time each replica becomes free), so delays depend only on arrival order and token counts.
`latency_s` (plus jitter) is added outside the queue, as network and fixed overhead.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import json
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from pydantic import ConfigDict, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lenses_data.config.models import INTERNVL, QWEN, STRUCTURED_OUTPUTS_SINCE, version_tuple
from lenses_data.config.simulator import SimulatorSettings
from lenses_data.models.types import KEY_HEADER, SIMULATED_MODEL_PREFIX
from lenses_data.simulator.asgi_thread import free_port, serve_in_thread
from lenses_data.simulator.simcontent import answer_content, completion_payload, request_texts
from lenses_data.simulator.simfaults import (
    SERVER_FAULT_ERRORS,
    DroppedResponse,
    context_refusal,
    faulty_content,
    server_fault,
    truncated_json,
)
from lenses_data.simulator.simrecord import recorded_body
from lenses_data.simulator.vllm_prompt import PrefixCache, prompt_units

FAULT_KINDS = (
    "http_500",
    "http_429",
    "hang",
    "drop",
    "malformed_json",
    "schema_invalid",
    "empty",
    "truncated",
)


class SimConfig(SimulatorSettings):
    """The simulator server's settings: the pipeline config's `simulator` section (what a dry run
    sets, declared once in `SimulatorSettings`) plus what only tests and benchmarks set."""

    model_config = ConfigDict(extra="forbid")

    latency_jitter_s: float = Field(default=0.0, ge=0)
    faults: dict[str, float] = Field(default_factory=dict, description="fault kind -> rate in [0, 1]")
    faults_until_attempt: int | None = Field(
        default=None, description="Attempts numbered >= this never fault (guarantees eventual success)"
    )
    hang_s: float = Field(default=30.0, description="How long a hang lasts (beyond the client timeout)")
    hold_until_in_flight: int | None = Field(
        default=None,
        description="Hold every answer until this many requests are in flight at once (or hold_timeout_s "
        "passes): proves a client's concurrency without depending on timing",
    )
    hold_timeout_s: float = 20.0
    record_requests: int = Field(
        default=0,
        ge=0,
        description="Keep the last N request bodies (image data replaced by its size and hash) for "
        "GET /sim/requests; 0 (the default) keeps none, so long benchmarks pay nothing",
    )
    models: tuple[str, ...] = (INTERNVL, QWEN)  # the default roles' models
    vllm_version: str | None = Field(
        default=None,
        description="Answer GET /version as this vLLM release and read only the constraint fields it "
        "reads (guided_choice before 0.11, structured_outputs from 0.11, no guided_* from 0.12); None: no "
        "/version route, every field read",
    )
    max_model_len: int | None = Field(
        default=None,
        gt=0,
        description="Served context: listed per model in /v1/models, and a request whose prompt (words) "
        "plus max_tokens exceeds it is refused with HTTP 400, as vLLM refuses it; None: unlimited, unlisted",
    )
    scripted: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="For tests: request key (the key header) -> its answers by attempt, the last repeated; "
        "a scripted request gets exactly these answers and no fault",
    )

    @classmethod
    def from_settings(cls, settings: SimulatorSettings) -> SimConfig:
        """The simulator of a dry run, from the `simulator` section of the pipeline config."""
        return cls(**settings.model_dump())

    def model_post_init(self, _context: Any) -> None:
        unknown = set(self.faults) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {FAULT_KINDS}")
        if sum(self.faults.values()) > 1.0:
            raise ValueError("fault rates add up to more than 1")


def _unit(*parts: object) -> float:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class ReplicaClock:
    """When each simulated replica becomes free: a request's answer is due when the replica that frees
    first has worked through it (the latency model; no replicas means no queueing)."""

    def __init__(self, replicas: int) -> None:
        self.free_at = [0.0] * replicas  # a heap of monotonic times

    def due(self, now: float, service_s: float) -> float:
        if not self.free_at:
            return now + service_s
        finish = max(now, heapq.heappop(self.free_at)) + service_s
        heapq.heappush(self.free_at, finish)
        return finish


def service_seconds(config: SimConfig, prompt_tokens: int, completion_tokens: int) -> float:
    """Time one replica spends on a request: prefill of the prompt, then decoding of the answer."""
    prefill = prompt_tokens / config.prefill_tps if config.prefill_tps else 0.0
    decode = completion_tokens / config.decode_tps if config.decode_tps else 0.0
    return prefill + decode


class SimState:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.calls: dict[str, int] = {}
        self.attempts: dict[str, int] = {}  # per request identity: re-asks count as later attempts
        self.answers: dict[str, int] = {}  # fault-free answers per request identity
        self.keys: dict[str, str] = {}  # request body digest -> key header (matches `calls`)
        self.answer_keys: dict[str, str] = {}  # request identity -> key header (matches `answers`)
        self.faults: dict[str, int] = dict.fromkeys(FAULT_KINDS, 0)
        self.server_faults: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.filled: asyncio.Event | None = None  # created in the server's loop on first use
        self.clock = ReplicaClock(config.replicas)
        self.recorded: deque[dict[str, Any]] = deque(maxlen=config.record_requests or None)
        # Which leading prompt tokens vLLM's prefix cache would serve (reported, not timed: the
        # latency model charges the whole prompt).
        self.prefix_cache = PrefixCache()

    def cached_tokens(self, body: dict[str, Any], prompt_tokens: int) -> int:
        return min(self.prefix_cache.lookup_and_insert(prompt_units(body)), max(0, prompt_tokens - 1))

    def record(self, key: str, body: dict[str, Any]) -> None:
        if self.config.record_requests:
            self.recorded.append({"key": key, "body": recorded_body(body)})

    def delay_for(self, digest: str, usage: dict[str, int], fault: str | None) -> float:
        """Seconds before this answer goes out: fixed latency and jitter, plus queueing and tokens."""
        cfg = self.config
        delay = cfg.latency_s + cfg.latency_jitter_s * _unit(cfg.seed, "latency", digest)
        service = service_seconds(cfg, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
        if service or self.clock.free_at:
            now = time.monotonic()
            delay += self.clock.due(now, service) - now
        return max(delay, cfg.hang_s) if fault == "hang" else delay

    def fault_for(self, digest: str, attempt: int) -> str | None:
        cfg = self.config
        if cfg.faults_until_attempt is not None and attempt >= cfg.faults_until_attempt:
            return None
        unit, edge = _unit(cfg.seed, "fault", digest, attempt), 0.0
        for kind in FAULT_KINDS:
            edge += cfg.faults.get(kind, 0.0)
            if unit < edge:
                return kind
        return None


def request_identity(body: dict[str, Any]) -> str:
    """Hash of a request up to its first user turn: a re-ask (which appends the bad answer and a
    correction) is the same item, so it gets the same answer and counts as a later attempt."""
    messages = body.get("messages") or []
    first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), len(messages) - 1)
    trimmed = {**body, "messages": messages[: first_user + 1]}
    return hashlib.sha256(json.dumps(trimmed, sort_keys=True).encode()).hexdigest()


def create_app(config: SimConfig | None = None) -> Starlette:
    state = SimState(config or SimConfig())

    async def models(_: Request) -> Response:
        listed = {"max_model_len": state.config.max_model_len} if state.config.max_model_len else {}
        data = [
            {"id": SIMULATED_MODEL_PREFIX + m, "object": "model", "owned_by": "lenses-simulator", **listed}
            for m in state.config.models
        ]
        return JSONResponse({"object": "list", "data": data})

    async def health(_: Request) -> Response:
        return Response(status_code=200)

    async def stats(_: Request) -> Response:
        return JSONResponse(
            {
                "total_calls": sum(state.calls.values()),
                "calls": state.calls,
                "answers": state.answers,
                "keys": state.keys,
                "answer_keys": state.answer_keys,
                "faults": state.faults,
                "server_faults": state.server_faults,
                "max_in_flight": state.max_in_flight,
            }
        )

    async def requests(_: Request) -> Response:
        """The recorded request bodies, oldest first (SimConfig.record_requests)."""
        return JSONResponse({"requests": list(state.recorded)})

    async def reset(_: Request) -> Response:
        """Forget calls and counters (benchmarks reuse one server across measurements)."""
        state.calls.clear()
        state.attempts.clear()
        state.answers.clear()
        state.keys.clear()
        state.answer_keys.clear()
        state.faults = dict.fromkeys(FAULT_KINDS, 0)
        state.server_faults.clear()
        state.recorded.clear()
        state.max_in_flight = state.in_flight
        state.prefix_cache = PrefixCache()  # as a restarted server: measurements start cold
        return JSONResponse({"reset": True})

    async def version(_: Request) -> Response:
        if state.config.vllm_version is None:
            return JSONResponse({"detail": "Not Found"}, 404)
        return JSONResponse({"version": state.config.vllm_version})

    async def chat(request: Request) -> Response:
        raw = await request.body()
        body = release_view(json.loads(raw), state.config.vllm_version)
        refused = context_refusal(state.config.max_model_len, body)
        if refused is not None:  # before any counting, as vLLM refuses it before scheduling
            return refused
        digest = hashlib.sha256(raw).hexdigest()
        identity = request_identity(body)
        state.calls[digest] = state.calls.get(digest, 0) + 1
        attempt = state.attempts.get(identity, 0)
        state.attempts[identity] = attempt + 1
        state.keys.setdefault(digest, request.headers.get(KEY_HEADER, ""))
        state.answer_keys.setdefault(identity, request.headers.get(KEY_HEADER, ""))
        state.record(request.headers.get(KEY_HEADER, ""), body)
        script = state.config.scripted.get(request.headers.get(KEY_HEADER, ""))
        scripted = script[min(attempt, len(script) - 1)] if script else None
        fault = None
        if scripted is None:
            fault = server_fault(state.config, body) or state.fault_for(identity, attempt)
        if fault in SERVER_FAULT_ERRORS:
            state.server_faults[fault] = state.server_faults.get(fault, 0) + 1
        elif fault:
            state.faults[fault] += 1
        else:
            state.answers[identity] = state.answers.get(identity, 0) + 1
        state.in_flight += 1
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            await _hold(state)
            return await _respond(state, body, identity, fault, scripted)
        finally:
            state.in_flight -= 1

    routes = [
        Route("/v1/models", models),
        Route("/health", health),
        Route("/version", version),
        Route("/sim/stats", stats),
        Route("/sim/requests", requests),
        Route("/sim/reset", reset, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    app.state.sim = state
    return app


async def _hold(state: SimState) -> None:
    target = state.config.hold_until_in_flight
    if target is None:
        return
    if state.filled is None:
        state.filled = asyncio.Event()
    if state.in_flight >= target:
        state.filled.set()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(state.filled.wait(), timeout=state.config.hold_timeout_s)


async def _respond(
    state: SimState, body: dict[str, Any], digest: str, fault: str | None, scripted: str | None = None
) -> Response:
    cfg = state.config
    error = _error_response(fault)
    if error is not None:  # rejected after reading the prompt: prefill only
        await _sleep(state.delay_for(digest, {"prompt_tokens": prompt_tokens(body)}, fault))
        return error
    n = int(body.get("n") or 1)
    if scripted is not None:
        contents = [(scripted, "stop")] * n
    else:
        contents = [(answer_content(body, digest, cfg, i), "stop") for i in range(n)]
    if fault in ("empty", "truncated", "malformed_json", "schema_invalid"):
        contents[0] = faulty_content(fault, contents[0][0], body)
    cut = [truncated_json(cfg, digest, c) for c in contents]
    if cut != contents:
        state.server_faults["truncate_json"] = state.server_faults.get("truncate_json", 0) + 1
        contents = cut
    completion = completion_payload(body, contents)
    usage = completion["usage"]
    cached = state.cached_tokens(body, usage["prompt_tokens"])
    await _sleep(state.delay_for(digest, usage, fault))
    if cached:
        # As vLLM reports it: with --enable-prompt-tokens-details, and only when something was
        # cached (0.10.1.1 serving_chat.py leaves the field out of a miss, it does not write 0).
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    payload = json.dumps(completion).encode()
    if fault == "drop":
        return DroppedResponse(payload)
    return Response(payload, media_type="application/json")


async def _sleep(delay: float) -> None:
    if delay > 0:
        await asyncio.sleep(delay)


def release_view(body: dict[str, Any], version: str | None) -> dict[str, Any]:
    """The request as a vLLM release reads it: fields it does not know are dropped (vLLM ignores an
    unknown field rather than refusing it)."""
    if version is None:
        return body
    release = version_tuple(version)
    unknown = set()
    if release < STRUCTURED_OUTPUTS_SINCE:
        unknown.add("structured_outputs")
    if release >= (0, 12, 0):
        unknown.update({"guided_choice", "guided_json"})
    return {k: v for k, v in body.items() if k not in unknown}


def prompt_tokens(body: dict[str, Any]) -> int:
    """The prompt size the simulator reports in `usage` (words of the first user turn)."""
    return sum(len(text.split()) for text in request_texts(body)[0])


def _error_response(fault: str | None) -> Response | None:
    if fault == "http_500":
        return JSONResponse({"error": {"message": "simulated server error", "type": "server_error"}}, 500)
    if fault in SERVER_FAULT_ERRORS:
        return JSONResponse({"error": {"message": SERVER_FAULT_ERRORS[fault], "type": "server_error"}}, 500)
    if fault == "http_429":
        return JSONResponse(
            {"error": {"message": "simulated rate limit", "type": "rate_limit"}},
            429,
            headers={"retry-after": "0"},
        )
    return None


@contextlib.contextmanager
def run_in_thread(config: SimConfig | None = None, port: int | None = None) -> Iterator[str]:
    """Serve the simulator on 127.0.0.1 in a background thread; yields the base URL (…/v1)."""
    port = port or free_port()
    with serve_in_thread(
        create_app(config),
        port,
        what="simulator",
        thread_name=f"lenses-sim-{port}",
        log_level=None,
        backlog=2048,
        timeout_keep_alive=120,
        timeout_graceful_shutdown=1,
    ) as url:
        yield url


def serve(config: SimConfig, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the simulator in the foreground (the `lenses simulate` command)."""
    import uvicorn

    # Long keep-alive: a client reusing a connection the server just closed gets a spurious error.
    uvicorn.run(
        create_app(config),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        backlog=2048,
        timeout_keep_alive=120,
    )
