"""A small OpenAI-compatible server with the habits of a llama-cpp-python server, for the probe and
outage tests: HTTP 500 on `response_format: json_schema` and on image parts, `json_object` honoured,
choice constraints ignored (free text), an optional outage after N answered requests, an optional
HTTP 400 on every work request (a field this server refuses), and an optional gate that holds every
work request until the test opens it.

Validator requests (Listing 4) are answered by echoing their input items, so two runs against it
produce the same dataset; the client's probe requests get what such a server would say.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from lenses_data.models.types import KEY_HEADER


class FakeServer:
    def __init__(
        self,
        *,
        reject_json_schema: bool = False,
        ignore_choice: bool = False,
        reject_images: bool = False,
        fail_after: int | None = None,
        served: tuple[str, ...] = ("test/validator",),
        refuse_work: str | None = None,
        hold_work: threading.Event | None = None,
    ) -> None:
        self.reject_json_schema = reject_json_schema
        self.ignore_choice = ignore_choice
        self.reject_images = reject_images
        self.fail_after = fail_after
        self.served = served
        self.refuse_work = refuse_work  # HTTP 400 with this message on every work (non-probe) request
        self.hold_work = hold_work  # work requests wait until it is set (the server keeps serving)
        self.holding = threading.Event()  # set once a work request is being held
        self.answered = 0  # pipeline (non-probe) requests answered
        self.calls: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self.listing_headers: list[dict[str, str]] = []  # headers of each GET /v1/models

    def app(self) -> Starlette:
        async def models(request: Request) -> JSONResponse:
            self.listing_headers.append(dict(request.headers))
            data = [{"id": m, "object": "model", "owned_by": "fake"} for m in self.served]
            return JSONResponse({"object": "list", "data": data})

        async def chat(request: Request) -> JSONResponse:
            body = json.loads(await request.body())
            probe = request.headers.get(KEY_HEADER, "").startswith("probe:")
            self.calls["probe" if probe else "work"] += 1
            if not probe:
                self.bodies.append(body)
                if self.hold_work is not None:
                    self.holding.set()
                    await asyncio.to_thread(self.hold_work.wait, 30)
            status, content = self.answer(body, probe)
            if status != 200:
                kind = "BadRequestError" if status < 500 else "server_error"
                return JSONResponse({"error": {"message": content, "type": kind}}, status)
            if not probe:
                self.answered += 1
            return JSONResponse(_completion(body, content))

        routes = [Route("/v1/models", models), Route("/v1/chat/completions", chat, methods=["POST"])]
        return Starlette(routes=routes)

    def answer(self, body: dict[str, Any], probe: bool) -> tuple[int, str]:
        texts, has_image = _texts(body)
        fmt = (body.get("response_format") or {}).get("type")
        if not probe and self.fail_after is not None and self.answered >= self.fail_after:
            return 500, "the model crashed"
        if not probe and self.refuse_work is not None:
            return 400, self.refuse_work
        if has_image and self.reject_images:
            return 500, "image input is not supported by this model"
        if fmt == "json_schema" and self.reject_json_schema:
            return 500, "unsupported response_format type json_schema"
        choices = (body.get("structured_outputs") or {}).get("choice") or body.get("guided_choice")
        if choices and not self.ignore_choice:
            return 200, choices[0]
        if not probe and "[" in texts[-1]:  # a validator request: keep every item unchanged
            items = json.loads(texts[-1][texts[-1].index("[") :])
            return 200, json.dumps(items)
        if fmt in ("json_schema", "json_object"):
            return 200, json.dumps({"answer": "ok"})
        return 200, "Yes, it is." if not choices else "Hello! How can I help you today?"


def _texts(body: dict[str, Any]) -> tuple[list[str], bool]:
    user = next(m for m in body["messages"] if m["role"] == "user")
    content = user["content"]
    if isinstance(content, str):
        return content.split("\n\n"), False
    texts = [p["text"] for p in content if p.get("type") == "text"]
    return texts, any(p.get("type") == "image_url" for p in content)


def _completion(body: dict[str, Any], content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model")),
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


@contextlib.contextmanager
def serving(server: FakeServer) -> Iterator[str]:
    """Serve `server` on 127.0.0.1 in a thread; yields its base URL (…/v1)."""
    from lenses_data.simulator.asgi_thread import serve_in_thread

    with serve_in_thread(server.app(), what="fake server") as url:
        yield url
