"""One request's life: journal replay, transport retries with backoff, bounded re-asks on bad
answers, and the journal write the moment it completes. Always ends in a ModelResult."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lenses_data.models import types as codes
from lenses_data.models.endpoints import backoff_delay, classify_error, retry_after_s
from lenses_data.models.journal import JournalEntry
from lenses_data.models.journaled import composed, parse_all, replay, reused, with_part_hashes
from lenses_data.models.messages import (
    IMAGE_SLOT,
    LoadedImage,
    build_messages,
    fit_repeated_answer,
    load_image,
    reask_messages,
    render_body,
    request_fields,
    request_hash,
)
from lenses_data.models.parsing import pick_choice
from lenses_data.models.readmit import EndpointsDown
from lenses_data.models.runtime import RoleRuntime
from lenses_data.models.types import AnswerError, ModelRequest, ModelResult


@dataclass
class Completion:
    """The parts of a chat completion the client uses, read straight from the response JSON (the
    openai package's typed model costs more CPU than the rest of the answer's handling)."""

    model: str
    contents: list[str | None]
    finishes: list[str | None]
    usage: dict[str, int]
    simulated: bool

    @classmethod
    def from_json(cls, data: bytes, fallback_model: str) -> Completion:
        payload = json.loads(data)
        if not isinstance(payload, dict):
            raise ValueError("completion is not a JSON object")
        choices = payload.get("choices") or []
        counted = payload.get("usage") or {}
        details = counted.get("prompt_tokens_details") or {}
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            # Prompt tokens the server's prefix cache served (vLLM: --enable-prompt-tokens-details).
            counted = {**counted, "cached_tokens": details["cached_tokens"]}
        model = str(payload.get("model") or fallback_model)
        return cls(
            model=model,
            contents=[(c.get("message") or {}).get("content") for c in choices],
            finishes=[c.get("finish_reason") for c in choices],
            usage={k: v for k, v in counted.items() if isinstance(v, int) and k in _USAGE_FIELDS},
            simulated=payload.get("system_fingerprint") == codes.SIMULATOR_FINGERPRINT
            or model.startswith(codes.SIMULATED_MODEL_PREFIX),
        )


_USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens")
CHAT_PATH = "/chat/completions"


@dataclass
class CallOutcome:
    completion: Completion | None
    calls: int
    error_code: str | None = None
    error_message: str | None = None


async def run_one(
    rt: RoleRuntime,
    request: ModelRequest,
    parse: Callable[[str], Any],
    inflight: dict[str, asyncio.Future[ModelResult]],
) -> ModelResult:
    try:
        image = await _image(rt, request.image_path) if request.image_path else None
    except (OSError, ValueError) as exc:
        return _failed(
            request, rt.role.model, codes.BAD_INPUT, f"cannot read image {request.image_path}: {exc}"
        )
    image_sha = image.sha256 if image else None
    digest = request_hash(request, rt.role, image_sha, rt.choice_style, rt.json_mode)
    parse = _tolerant(rt, request, parse)
    if digest in inflight:  # identical request already in flight in this batch: share its answer
        shared = await asyncio.shield(inflight[digest])
        return shared.model_copy(update={"key": request.key, "cached": True})
    future: asyncio.Future[ModelResult] = asyncio.get_running_loop().create_future()
    inflight[digest] = future
    try:
        result = replay(rt, request, parse, digest) or await reused(rt, request, parse, digest)
        if result is None:  # the parts' hashes only matter from here (a replay needs none)
            request = with_part_hashes(rt, request, image_sha)
            result = await composed(rt, request, parse, digest) or await _answer(
                rt, request, parse, image, digest
            )
        future.set_result(result)
        return result
    except BaseException as exc:
        future.set_exception(exc)
        future.exception()  # mark retrieved: the owner re-raises it below
        raise
    finally:
        inflight.pop(digest, None)


async def _image(rt: RoleRuntime, path: str) -> LoadedImage:
    """The request's image: from the batch's prefetch, or read in a thread (a lone request)."""
    if rt.images is not None:
        return await rt.images.get(path)
    return await asyncio.to_thread(load_image, path)


async def _answer(
    rt: RoleRuntime,
    request: ModelRequest,
    parse: Callable[[str], Any],
    image: LoadedImage | None,
    digest: str,
) -> ModelResult:
    placeholder = rt.role.image_placeholder
    messages = build_messages(request, IMAGE_SLOT if image else None, rt.json_mode, placeholder)
    fields = request_fields(request, rt.role, rt.choice_style, rt.json_mode)
    headers = {codes.KEY_HEADER: request.key.encode("ascii", "replace").decode()}
    uri = image.data_uri if image else None
    body, calls, usage = render_body(fields, messages, uri), 0, {}
    raw, model, simulated = None, rt.role.model, False
    error = AnswerError(codes.EMPTY_ANSWER, "no answer")
    affinity = image.sha256 if image and rt.role.image_affinity else None
    for _ask in range(rt.retry.max_reasks + 1):
        outcome = await _call(rt, body, headers, affinity)
        calls += outcome.calls
        if outcome.error_code is not None or outcome.completion is None:
            error = AnswerError(outcome.error_code or codes.TRANSPORT_ERROR, outcome.error_message or "")
            break
        completion = outcome.completion
        for name, count in completion.usage.items():
            usage[name] = usage.get(name, 0) + count
        model, simulated = completion.model, simulated or completion.simulated
        contents, finishes = completion.contents, completion.finishes
        raw = contents[0] if request.n == 1 and contents else json.dumps(contents)
        try:
            value = parse_all(contents, finishes, parse, request.n)
        except AnswerError as exc:
            error = exc
            problem = f"{exc.code}: {exc.message}"
            repeated = fit_repeated_answer(
                raw, completion.usage, problem, int(fields["max_tokens"]), rt.context_tokens
            )
            if repeated is None:  # even the note would pass the served context: no re-ask
                break
            body = render_body(fields, reask_messages(messages, repeated, problem), uri)
            continue
        result = ModelResult(
            key=request.key,
            ok=True,
            value=value,
            raw=raw,
            attempts=calls,
            model=model,
            simulated=simulated,
            usage=usage,
            request_hash=digest,
        )
        await _journal(rt, request, result, "ok")
        return result
    result = ModelResult(
        key=request.key,
        ok=False,
        raw=raw,
        error_code=error.code,
        error_message=error.message,
        attempts=calls,
        model=model,
        simulated=simulated,
        usage=usage,
        request_hash=digest,
    )
    if error.code not in codes.INFRASTRUCTURE_CODES:  # an outage is not an answer: ask again next time
        await _journal(rt, request, result, "failed")
    return result


def _tolerant(rt: RoleRuntime, request: ModelRequest, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """Without a choice constraint on the wire (config `none`, or a server that ignores it), the
    answer is free text: find the one choice it names before the stage's own parser sees it."""
    if not request.choice or not (rt.tolerant_choice or rt.choice_style == "none"):
        return parse
    choices = list(request.choice)
    return lambda text: parse(pick_choice(text, choices))


async def _call(
    rt: RoleRuntime, body: bytes, headers: dict[str, str], affinity: str | None = None
) -> CallOutcome:
    """One answer from some endpoint, retrying transport errors, 429/5xx and timeouts. Requests
    with the same `affinity` (image hash) go to one endpoint, whose prefix cache holds the image.

    The body goes out as prepared bytes through the client's plain `post`: the same JSON that
    `chat.completions.create` would send, without its per-request walk of every parameter through
    typed transforms, and the answer is read from the JSON without building the typed model."""
    code, message = codes.TRANSPORT_ERROR, ""
    options = {"headers": headers}
    failed_on = None  # the endpoint of the last failed attempt: the retry prefers another
    for attempt in range(1, rt.retry.max_attempts + 1):
        try:
            endpoint = await rt.pool.acquire(affinity, avoid=failed_on)
        except EndpointsDown as down:  # no replica came back within the grace: an outage, not data
            said = f" (last failure: {message})" if message else ""
            return CallOutcome(None, attempt - 1, codes.TRANSPORT_ERROR, f"{down}{said}")
        healthy: bool | None = None
        hint: float | None = None
        try:
            data = await endpoint.client.post(CHAT_PATH, cast_to=bytes, content=body, options=options)
            completion = Completion.from_json(data, rt.role.model)
            healthy = True
            return CallOutcome(completion, attempt)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            code, retryable, healthy = classify_error(exc)
            message = f"{type(exc).__name__}: {str(exc)[:300]}"
            failed_on = endpoint
            if not retryable:
                return CallOutcome(None, attempt, code, message)
            hint = retry_after_s(exc)
        finally:
            await rt.pool.release(endpoint, healthy, affinity)
        if attempt < rt.retry.max_attempts:
            await asyncio.sleep(backoff_delay(attempt, rt.retry, rt.rng, hint))
    return CallOutcome(
        None, rt.retry.max_attempts, code, f"{message} (after {rt.retry.max_attempts} attempts)"
    )


def _failed(request: ModelRequest, model: str, code: str, message: str) -> ModelResult:
    return ModelResult(key=request.key, ok=False, error_code=code, error_message=message, model=model)


async def _journal(rt: RoleRuntime, request: ModelRequest, result: ModelResult, status: str) -> None:
    if rt.journal_put is None:
        return
    await rt.journal_put(
        JournalEntry(
            hash=result.request_hash,
            key=request.key,
            role=rt.name,
            model=result.model,
            status=status,
            raw=result.raw,
            error_code=result.error_code,
            error_message=result.error_message,
            attempts=result.attempts,
            usage=result.usage,
            simulated=result.simulated,
            served=rt.served,
            parts=list(request.part_hashes) or None,
        )
    )
