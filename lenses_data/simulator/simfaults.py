"""Faults of the simulator: injected by rate (transient: a retry can succeed) or, as server
faults, always (what some real servers do to this pipeline's requests, on every attempt)."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse, Response

from lenses_data.simulator.simcontent import request_choices, request_texts
from lenses_data.simulator.simlenses import unit


def faulty_content(kind: str, content: str, body: dict[str, Any]) -> tuple[str, str]:
    if kind == "empty":
        return "", "stop"
    if kind == "truncated":
        return content[: max(1, len(content) // 2)], "length"
    if kind == "malformed_json":
        return ("MAYBE?" if request_choices(body) else content.rstrip("}]") + ', "oops'), "stop"
    return (
        "PERHAPS" if request_choices(body) else json.dumps({"unexpected": [1, 2, 3]})
    ), "stop"  # schema_invalid


SERVER_FAULT_ERRORS = {
    "reject_json_schema": "simulated: this server fails on response_format json_schema (internal error)",
    "reject_images": "simulated: this server cannot take image input (internal error)",
}


def server_fault(config: Any, body: dict[str, Any]) -> str | None:
    """A request the configured server always fails with HTTP 500, whatever the attempt."""
    faults = config.server_faults
    if faults.reject_images and request_texts(body)[1]:
        return "reject_images"
    fmt = body.get("response_format") or {}
    if faults.reject_json_schema and fmt.get("type") == "json_schema":
        return "reject_json_schema"
    return None


def truncated_json(config: Any, identity: str, answer: tuple[str, str]) -> tuple[str, str]:
    """A JSON answer cut where a too-small max_tokens would cut it: the same on every attempt."""
    content, finish = answer
    rate = config.server_faults.truncate_json
    if not rate or not content.lstrip().startswith(("{", "[")):
        return answer
    if unit(config.seed, "truncate_json", identity) >= rate:
        return answer
    return content[: max(1, len(content) * 3 // 5)], "length"


class DroppedResponse(Response):
    """Sends headers and half the body, then fails: the server closes the connection mid-answer."""

    def __init__(self, payload: bytes) -> None:
        super().__init__(payload, media_type="application/json")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        await send(
            {"type": "http.response.body", "body": self.body[: len(self.body) // 2], "more_body": True}
        )
        raise ConnectionAbortedError("simulated dropped connection")


def context_refusal(max_model_len: int | None, body: dict[str, Any]) -> Response | None:
    """HTTP 400 for a request whose prompt plus `max_tokens` exceeds the served context, worded as
    vLLM words it (its serving layer checks this before anything is scheduled, on every attempt).
    The prompt is counted as the simulator counts it: words of the first user turn."""
    if not max_model_len:
        return None
    prompt = sum(len(text.split()) for text in request_texts(body)[0])
    asked = int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
    if prompt + asked <= max_model_len:
        return None
    message = (
        f"This model's maximum context length is {max_model_len} tokens. However, you requested "
        f"{prompt + asked} tokens ({prompt} in the messages, {asked} in the completion). Please reduce "
        "the length of the messages or completion."
    )
    return JSONResponse({"error": {"message": message, "type": "BadRequestError", "code": 400}}, 400)
