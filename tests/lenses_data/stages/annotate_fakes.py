"""A tiny stand-in for the model client, for parser-level unit tests of the stages only.

It implements the client contract (run_sync(requests, parse) -> list[ModelResult], re-asking
after an AnswerError, an empty answer failing as `empty_answer` before any parser) but answers
from a script instead of HTTP. What the client itself does (re-asks, reason codes, the wire
format) is tested through the real client against the simulator: test_filter.py scripts the
simulator's answers per request, test_annotate_flow.py runs the stages end to end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lenses_data.models.types import EMPTY_ANSWER, AnswerError, ModelRequest, ModelResult


class ScriptedClient:
    """answer(request, attempt) -> raw text; up to 1 + max_reasks attempts per request."""

    def __init__(self, answer: Callable[[ModelRequest, int], str], max_reasks: int = 1) -> None:
        self.answer = answer
        self.max_reasks = max_reasks
        self.requests: list[ModelRequest] = []  # one per request
        self.calls: list[ModelRequest] = []  # one per attempt (re-asks included)

    def run_sync(self, requests: Sequence[ModelRequest], parse: Callable[[str], Any]) -> list[ModelResult]:
        return [self._one(r, parse) for r in requests]

    def _one(self, request: ModelRequest, parse: Callable[[str], Any]) -> ModelResult:
        self.requests.append(request)
        error: AnswerError | None = None
        raw = ""
        for attempt in range(1 + self.max_reasks):
            self.calls.append(request)
            raw = self.answer(request, attempt)
            try:
                if not raw.strip():  # as the real client: no content is its own code
                    raise AnswerError(EMPTY_ANSWER, "the model returned no content")
                value = parse(raw)
            except AnswerError as exc:
                error = exc
                continue
            return ModelResult(
                key=request.key, ok=True, value=value, raw=raw, attempts=attempt + 1, model="fake/m"
            )
        assert error is not None
        return ModelResult(
            key=request.key,
            ok=False,
            raw=raw,
            error_code=error.code,
            error_message=error.message,
            attempts=1 + self.max_reasks,
            model="fake/m",
        )
