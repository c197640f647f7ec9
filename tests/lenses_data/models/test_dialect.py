"""What each vLLM release gets, at the release boundaries the dialect names: the serve flags, the
JSON layout, the refusal it recognises, the version a server reports over real HTTP and the context
a /v1/models listing gives. Written against the survivors of `make mutation
MODULE=lenses_data/models/dialect.py` (docs/testing.md)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from openai.types import Model

from lenses_data.models.dialect import (
    is_mm_kwargs_refusal,
    json_layout,
    listed_context,
    serve_flags,
    server_version,
)

STRUCTURED = ["--structured-outputs-config", '{"backend":"xgrammar","disable_any_whitespace":true}']
GUIDED = ["--guided-decoding-backend", "xgrammar", "--guided-decoding-disable-any-whitespace"]
TRUST = ["--trust-request-mm-kwargs"]


@pytest.mark.parametrize(
    ("version", "wants_kwargs", "compact", "flags"),
    [
        ("0.30.9", True, False, []),
        ("0.31.0", True, False, TRUST),
        ("0.31.0", False, False, []),
        ("0.32.0", True, True, TRUST + STRUCTURED),
        ("0.11.0", False, True, STRUCTURED),
        ("0.10.2", True, True, GUIDED),
    ],
)
def test_serve_flags_per_release(version, wants_kwargs, compact, flags):
    assert serve_flags(version, wants_kwargs, compact) == flags


def test_serve_flags_leave_compact_json_off_unless_asked():
    assert serve_flags("0.32.0", True) == TRUST


FREE = "free whitespace between JSON tokens (the grammar allows any)"
COMPACT = 'compact JSON (separators "," and ":")'
SPACED = (
    'no free whitespace, but not compact: the grammar forces separators ", " and ": " '
    "(xgrammar's default when vLLM passes none)"
)


@pytest.mark.parametrize(
    ("version", "compact", "layout"),
    [("0.32.0", False, FREE), ("0.32.0", True, COMPACT), ("0.33.1", True, COMPACT), ("0.31.9", True, SPACED)],
)
def test_json_layout_per_release(version, compact, layout):
    assert json_layout(version, compact) == layout


@pytest.mark.parametrize(
    ("message", "refusal"),
    [
        ("Per-request mm_processor_kwargs are disabled; start the server with ...", True),
        ("use --TRUST-REQUEST-MM-KWARGS to allow them", True),
        ("This model's maximum context length is 4096 tokens", False),
    ],
)
def test_the_mm_kwargs_refusal_is_recognised_in_any_case(message, refusal):
    assert is_mm_kwargs_refusal(message) is refusal


class _VersionServer(BaseHTTPRequestHandler):
    answers: dict[str, tuple[int, bytes]] = {}
    delay_s = 0.0

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        time.sleep(self.delay_s)
        status, body = self.answers.get(self.path, (404, b"not found"))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def version_server() -> Iterator[tuple[str, dict[str, tuple[int, bytes]]]]:
    answers: dict[str, tuple[int, bytes]] = {}
    handler = type("Handler", (_VersionServer,), {"answers": answers})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", answers
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("answer", "version"),
    [
        ((200, json.dumps({"version": "0.32.0"}).encode()), "0.32.0"),
        ((200, json.dumps({"version": "dev-build"}).encode()), None),
        ((200, json.dumps({"version": 32}).encode()), None),
        ((200, json.dumps(["0.32.0"]).encode()), None),
        ((200, b"<html>llama.cpp</html>"), None),
        ((500, json.dumps({"version": "0.32.0"}).encode()), None),
        (None, None),  # no /version route: 404
    ],
)
@pytest.mark.parametrize("suffix", ["/v1", "/v1/", ""])
def test_server_version_over_http(version_server, answer, version, suffix):
    root, answers = version_server
    if answer is not None:
        answers["/version"] = answer
    assert asyncio.run(server_version(root + suffix)) == version


def test_a_server_that_answers_too_late_has_no_version(version_server):
    root, answers = version_server
    answers["/version"] = (200, json.dumps({"version": "0.32.0"}).encode())
    _VersionServer.delay_s = 2.0
    try:
        assert asyncio.run(server_version(root, timeout_s=0.3)) is None
    finally:
        _VersionServer.delay_s = 0.0


def test_a_server_that_is_not_there_has_no_version():
    assert asyncio.run(server_version("http://127.0.0.1:9/v1", timeout_s=2)) is None


def _listed(model: str, **extra) -> Model:
    return Model(id=model, created=0, object="model", owned_by="vllm", **extra)


@pytest.mark.parametrize(
    ("entries", "context"),
    [
        ([_listed("other", max_model_len=1), _listed("m", max_model_len=4096)], 4096),
        ([_listed("m", max_model_len=4096), _listed("m", max_model_len=8192)], 4096),
        ([_listed("m", max_model_len=0)], None),
        ([_listed("m", max_model_len=1)], 1),
        ([_listed("m", max_model_len="4096")], None),
        ([_listed("m")], None),
        ([_listed("other", max_model_len=4096)], None),
        ([SimpleNamespace(id="m", max_model_len=2048)], 2048),  # a listing that is no pydantic model
        ([SimpleNamespace(max_model_len=2048)], None),
    ],
)
def test_listed_context(entries, context):
    assert listed_context(entries, "m") == context
