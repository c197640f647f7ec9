"""A small scripted OpenAI-compatible server for the probe's tests (models/test_probe_units.py,
test_probe_waits.py): what /v1/models lists and answers, GET /version, one status for every chat
request, JSON only under `json_object` (HTTP 500 under `json_schema`, as llama.cpp-like servers
answer it); and a server that accepts connections and answers nothing."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from lenses_data.config.models import RetryConfig
from lenses_data.models import probe
from lenses_data.models.endpoints import make_endpoint
from lenses_data.simulator.asgi_thread import serve_in_thread
from lenses_data.simulator.testing import sim_models_config

ROLE = "validator"
MODEL = f"test/{ROLE}"  # the model sim_models_config gives the role
FAST_RETRY = RetryConfig(max_attempts=1, backoff_base_s=0.001, backoff_max_s=0.002)


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


def probe_validator(
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


def down_message(text: str) -> str:
    """The listing's error text for a 503: the exception's class, then its text cut to 200."""
    return f"InternalServerError: {('Error code: 503 - ' + text)[:200]}"


@contextlib.contextmanager
def silent_server(hold_s: float) -> Iterator[str]:
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
