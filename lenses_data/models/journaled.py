"""Answers taken from journals instead of a call: this run's own (`replay`, a rerun or a retried
shard), an earlier run's answer to the very request (`reused`: models/reuse.py) and an answer
composed part by part from earlier answers (`composed`: models/compose.py). Each is parsed again
with today's parser (one that no longer parses is asked again) and an earlier run's answer is
copied into this run's journal with its source. `parse_all` reads a completion's choices, for
these and for a fresh answer (calls.py) alike."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from lenses_data.models import types as codes
from lenses_data.models.compose import composed_entry
from lenses_data.models.journal import JournalEntry
from lenses_data.models.messages import request_hash
from lenses_data.models.runtime import RoleRuntime
from lenses_data.models.types import AnswerError, ModelRequest, ModelResult


def with_part_hashes(rt: RoleRuntime, request: ModelRequest, image_sha: str | None) -> ModelRequest:
    """A request asked in parts keeps its parts' request hashes (journaled with its answer, so a
    later run can compose from it; lenses_data.models.compose), computed once here."""
    if not request.parts:
        return request
    hashes = tuple(request_hash(p, rt.role, image_sha, rt.choice_style, rt.json_mode) for p in request.parts)
    return request.model_copy(update={"part_hashes": hashes})


def replay(
    rt: RoleRuntime, request: ModelRequest, parse: Callable[[str], Any], digest: str
) -> ModelResult | None:
    entry = rt.journal.get(digest) if rt.journal is not None else None
    if entry is None or (entry.simulated and rt.simulated_endpoint is not True):
        return None  # simulated answers are never replayed against a real model
    if entry.status == "ok":
        return _journaled_answer(entry, request, parse, digest)
    if rt.reuse_failed and entry.error_code not in codes.INFRASTRUCTURE_CODES:
        # (older journals hold outages as failures: those are asked again, never replayed as data)
        return ModelResult(
            ok=False,
            error_code=entry.error_code,
            error_message=entry.error_message,
            **_journaled_fields(entry, request, digest),
        )
    return None


async def reused(
    rt: RoleRuntime, request: ModelRequest, parse: Callable[[str], Any], digest: str
) -> ModelResult | None:
    """An earlier run's answer to this very request by this served model (models/reuse.py), copied
    into this run's journal with its source; None when there is none or it no longer parses."""
    entry = rt.reuse.get(digest, rt.served) if rt.reuse is not None else None
    if entry is None or (entry.simulated and rt.simulated_endpoint is not True):
        return None  # simulated answers never stand in for a real model's
    return await _adopted(rt, entry, request, parse, digest)


async def composed(
    rt: RoleRuntime, request: ModelRequest, parse: Callable[[str], Any], digest: str
) -> ModelResult | None:
    """The answer composed part by part from earlier runs' answers (models/compose.py), journaled
    under this request's hash; None when a part has no earlier answer or the whole no longer parses."""
    if rt.reuse is None or not request.part_hashes:
        return None
    entry = composed_entry(rt.reuse, digest, request.part_hashes, rt.served)
    if entry is None or (entry.simulated and rt.simulated_endpoint is not True):
        return None  # simulated answers never stand in for a real model's
    return await _adopted(rt, entry, request, parse, digest)


async def _adopted(
    rt: RoleRuntime, entry: JournalEntry, request: ModelRequest, parse: Callable[[str], Any], digest: str
) -> ModelResult | None:
    """An earlier run's entry as this request's answer, copied into this run's journal with its
    source (a rerun replays it; the card counts it as reused); None when it no longer parses."""
    result = _journaled_answer(entry, request, parse, digest, reused_from=entry.source_run or "")
    if result is not None and rt.journal_put is not None:
        await rt.journal_put(replace(entry, key=request.key, role=rt.name, created=time.time()))
    return result


def _journaled_answer(
    entry: JournalEntry, request: ModelRequest, parse: Callable[[str], Any], digest: str, **extra: Any
) -> ModelResult | None:
    """A journaled success as this request's result; None when it no longer parses (the parser got
    stricter since: ask again)."""
    contents = [entry.raw] if request.n == 1 else json.loads(entry.raw or "[]")
    try:
        value = parse_all(contents, [None] * len(contents), parse, request.n)
    except AnswerError:
        return None
    return ModelResult(ok=True, value=value, **_journaled_fields(entry, request, digest), **extra)


def _journaled_fields(entry: JournalEntry, request: ModelRequest, digest: str) -> dict[str, Any]:
    """What a result taken from a journal (this run's or an earlier run's) carries of its entry."""
    return dict(
        key=request.key,
        raw=entry.raw,
        attempts=entry.attempts,
        model=entry.model,
        simulated=entry.simulated,
        usage=entry.usage,
        cached=True,
        request_hash=digest,
    )


def parse_all(
    contents: list[str | None], finishes: list[str | None], parse: Callable[[str], Any], n: int
) -> Any:
    if len(contents) < n:
        raise AnswerError(codes.EMPTY_ANSWER, f"expected {n} choice(s), got {len(contents)}")
    values = []
    for content, finish in zip(contents, finishes, strict=True):
        if content is None or not content.strip():
            raise AnswerError(codes.EMPTY_ANSWER, "the model returned no content")
        try:
            values.append(parse(content))
        except AnswerError as exc:
            if finish == "length":
                raise AnswerError(codes.TRUNCATED, f"answer cut at max_tokens ({exc.message})") from exc
            raise
        except (ValueError, KeyError, TypeError) as exc:  # incl. pydantic ValidationError
            raise AnswerError(codes.SCHEMA_INVALID, f"{type(exc).__name__}: {str(exc)[:300]}") from exc
    return values[0] if n == 1 else values
