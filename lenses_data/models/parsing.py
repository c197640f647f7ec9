"""Tolerant answer parsing for servers without (or with broken) structured outputs.

Every parser raises `AnswerError(code, message)` on a bad answer, so the client can re-ask and,
after the last re-ask, record a failed result with the reason. Validation is always pydantic's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, RootModel, ValidationError

from lenses_data.models.types import (
    EMPTY_ANSWER,
    INVALID_CHOICE,
    INVALID_JSON,
    SCHEMA_INVALID,
    AnswerError,
)

T = TypeVar("T", bound=BaseModel)

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


def _strip_fences(text: str) -> str:
    match = _FENCE.search(text)
    return match.group(1) if match else text


def _balanced_span(text: str, start: int) -> int | None:
    """Index one past the bracket closing the one at `start`, honouring strings; None if unclosed."""
    depth, in_string, escaped = 0, False, False
    for pos in range(start, len(text)):
        ch = text[pos]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return pos + 1
    return None


def _loads(candidate: str) -> Any:
    try:
        return json.loads(candidate)
    except json.JSONDecodeError:
        # Models often leave a trailing comma before a closing bracket; remove and retry once.
        return json.loads(_TRAILING_COMMA.sub(r"\1", candidate))


def extract_json(text: str | None) -> Any:
    """The first JSON object or array in `text`: tolerates code fences, leading/trailing prose and
    trailing commas. Raises AnswerError(empty_answer | invalid_json)."""
    if text is None or not text.strip():
        raise AnswerError(EMPTY_ANSWER, "the model returned no content")
    body = _strip_fences(text).strip()
    starts = [pos for pos in (body.find("{"), body.find("[")) if pos >= 0]
    if not starts:
        raise AnswerError(INVALID_JSON, f"no JSON object or array in answer: {text[:80]!r}")
    start = min(starts)
    end = _balanced_span(body, start)
    if end is None:
        raise AnswerError(INVALID_JSON, "JSON is not closed (truncated answer?)")
    try:
        return _loads(body[start:end])
    except json.JSONDecodeError as exc:
        raise AnswerError(INVALID_JSON, f"unparseable JSON: {exc}") from exc


def _shape_for(model_cls: type[BaseModel], data: Any) -> Any:
    """Coerce the common near-misses: one object where a list is expected, a bare list where an
    object with a single list field is expected."""
    if issubclass(model_cls, RootModel):
        root = model_cls.model_fields["root"].annotation
        if getattr(root, "__origin__", None) is list and isinstance(data, dict):
            return [data]
        return data
    list_fields = [
        name
        for name, info in model_cls.model_fields.items()
        if getattr(info.annotation, "__origin__", None) is list
    ]
    if isinstance(data, list) and len(model_cls.model_fields) == 1 and len(list_fields) == 1:
        return {list_fields[0]: data}
    if isinstance(data, dict) and len(list_fields) == 1 and len(model_cls.model_fields) == 1:
        field = list_fields[0]
        if field not in data:
            return {field: [data]}
    return data


def validate_answer(model_cls: type[T], data: Any) -> T:
    """Validate parsed JSON with pydantic; raise AnswerError(schema_invalid) with a short reason."""
    try:
        return model_cls.model_validate(_shape_for(model_cls, data))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "<root>"
        raise AnswerError(
            SCHEMA_INVALID, f"{exc.error_count()} error(s); first at {where}: {first['msg']}"
        ) from exc


def parse_model(model_cls: type[T]) -> Callable[[str], T]:
    """A parse function for `client.run`: raw text -> validated instance of `model_cls`."""

    def parse(text: str) -> T:
        return validate_answer(model_cls, extract_json(text))

    return parse


def parse_choice(choices: list[str]) -> Callable[[str], str]:
    """A parse function for a constrained choice (e.g. YES/NO): tolerant of case, quotes, a
    trailing period, or a short sentence that starts with the choice."""
    canonical = {c.upper(): c for c in choices}

    def parse(text: str) -> str:
        if text is None or not text.strip():
            raise AnswerError(EMPTY_ANSWER, "the model returned no content")
        words = re.findall(r"[A-Za-z0-9_]+", text)
        if words and words[0].upper() in canonical:
            return canonical[words[0].upper()]
        raise AnswerError(INVALID_CHOICE, f"expected one of {choices}, got {text[:60]!r}")

    return parse


def pick_choice(text: str | None, choices: list[str]) -> str:
    """The one choice named in a free-text answer, for servers that ignore a choice constraint:
    "Yes." or "I would say yes" -> YES. None of the choices, or more than one ("yes and no"), is a
    bad answer (invalid_choice), which the client re-asks."""
    if text is None or not text.strip():
        raise AnswerError(EMPTY_ANSWER, "the model returned no content")
    found = [
        choice
        for choice in choices
        if re.search(rf"(?<![A-Za-z0-9_]){re.escape(choice)}(?![A-Za-z0-9_])", text, re.IGNORECASE)
    ]
    if len(found) == 1:
        return found[0]
    what = "none" if not found else "several: " + ", ".join(found)
    raise AnswerError(INVALID_CHOICE, f"expected exactly one of {choices} in the answer, found {what}")
