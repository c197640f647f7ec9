"""Probe a role's endpoint once before work is sent: is the model served, does JSON-schema output
work, is a choice constraint honoured, is an image part accepted?

Each capability a role needs gets one cheap request. A refused feature gets a fallback that works
(JSON: `json_object` plus the schema in the prompt, then the schema in the prompt only; choice:
no constraint and tolerant parsing) or, where none exists (images), a `CapabilityMissing` error.
An endpoint that answers nothing at all raises `EndpointUnavailable`. Reports are cached for
`CACHE_TTL_S` per endpoint set and settings, so the shards of a run do not repeat the probe.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from lenses_data.config.models import RetryConfig, RoleConfig
from lenses_data.models import types as codes
from lenses_data.models.endpoints import Endpoint, backoff_delay, classify_error, retry_after_s
from lenses_data.models.messages import schema_instruction
from lenses_data.models.parsing import extract_json
from lenses_data.models.types import AnswerError, CapabilityMissing, EndpointUnavailable

log = logging.getLogger("lenses_data.models.probe")

# What each pipeline role asks of its server (filter: Listing 1 YES/NO on an image; generator:
# Listings 2-3 JSON on an image; validator: Listing 4 JSON; visual validator: Listing 5 JSON + image).
ROLE_NEEDS: dict[str, tuple[str, ...]] = {
    "filter": ("choice", "image"),
    "generator": ("json", "image"),
    "validator": ("json",),
    "visual_validator": ("json", "image"),
}
CACHE_TTL_S = 900.0
PROBE_SCHEMA: dict[str, Any] = {
    "title": "LensesProbe",
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["ok"]}},
    "required": ["answer"],
    "additionalProperties": False,
}
# Tokens no model says unprompted: an answer that is exactly one of them proves the constraint.
PROBE_CHOICES = ["PROBE-ALPHA", "PROBE-OMEGA"]
_QUESTION = "Is water wet?"
FALLBACK_JSON = {
    "json_schema": ("json_schema", "json_object", "prompt"),
    "json_object": ("json_object", "prompt"),
}


@dataclass
class Check:
    capability: str  # model | json | choice | image | endpoint
    status: str  # ok | fallback | fail
    detail: str


@dataclass
class ProbeReport:
    role: str
    urls: tuple[str, ...]
    model: str
    json_mode: str
    choice_style: str
    simulated: bool | None = None
    # Parse choice answers as free text (the server ignores or refuses the choice constraint).
    tolerant_choice: bool = False
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    def error(self) -> CapabilityMissing | None:
        failed = [c for c in self.checks if c.status == "fail"]
        if not failed:
            return None
        what = "; ".join(f"{c.capability}: {c.detail}" for c in failed)
        return CapabilityMissing(
            f"model role {self.role!r} at {', '.join(self.urls)} cannot do what it needs ({what}). "
            f"Nothing was sent; fix the server or the role's settings (`lenses check` shows the probe).",
            role=self.role,
            urls=self.urls,
            capability=failed[0].capability,
        )

    def describe(self) -> str:
        return "; ".join(f"{c.capability} {c.status} ({c.detail})" for c in self.checks)


@dataclass
class _Answer:
    content: str | None = None
    code: str | None = None
    message: str = ""

    @property
    def answered(self) -> bool:
        return self.code is None


class _Prober:
    def __init__(self, name: str, role: RoleConfig, endpoint: Endpoint, retry: RetryConfig) -> None:
        self.name, self.role, self.endpoint, self.retry = name, role, endpoint, retry
        self.rng = random.Random(0)
        self._plain: _Answer | None = None
        self.answered_once = False

    async def ask(
        self, content: Any, max_tokens: int = 96, extra_body: dict[str, Any] | None = None
    ) -> _Answer:
        """One request straight to the endpoint (no pool: its breaker must not bench it for a
        refused feature), with the run's transport retries."""
        kwargs: dict[str, Any] = {
            "model": self.role.model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "extra_headers": {codes.KEY_HEADER: f"probe:{self.name}"},
        }
        if extra_body:
            kwargs["extra_body"] = extra_body
        answer = _Answer(code=codes.TRANSPORT_ERROR)
        for attempt in range(1, self.retry.max_attempts + 1):
            try:
                completion = await self.endpoint.client.chat.completions.create(**kwargs)
            except Exception as exc:
                code, retryable, _ = classify_error(exc)
                answer = _Answer(code=code, message=f"{type(exc).__name__}: {str(exc)[:200]}")
                if not retryable or attempt == self.retry.max_attempts:
                    return answer
                await asyncio.sleep(backoff_delay(attempt, self.retry, self.rng, retry_after_s(exc)))
                continue
            self.answered_once = True
            choices = completion.choices or []
            return _Answer(content=choices[0].message.content if choices else None)
        return answer

    async def plain(self) -> _Answer:
        """A request with no constraint: tells "this feature is refused" from "the server is down"."""
        if self._plain is None:
            self._plain = await self.ask(_QUESTION, max_tokens=8)
        return self._plain

    async def down_unless_plain_works(self, failed: _Answer) -> None:
        plain = await self.plain()
        if not plain.answered:
            raise _unavailable(
                self.name, (self.endpoint.url,), plain.code or failed.code or "", plain.message
            )

    async def check_json(self, configured: str) -> tuple[Check, str]:
        if configured == "none":
            return Check("json", "ok", "not asked for (json_schema_mode: none)"), "none"
        modes = FALLBACK_JSON.get(configured, (configured,))
        notes = []
        for mode in modes:
            answer = await self.ask(*_json_request(mode))
            if not answer.answered:
                await self.down_unless_plain_works(answer)
                notes.append(f"{mode}: refused ({answer.message[:80]})")
                continue
            if _is_json(answer.content, strict=mode == "json_schema"):
                status = "ok" if mode == modes[0] else "fallback"
                return Check("json", status, "; ".join([*notes, f"{mode} works"])), mode
            notes.append(f"{mode}: answered without JSON ({(answer.content or '')[:40]!r})")
        return Check("json", "fail", "; ".join(notes) or "no JSON mode works"), configured

    async def check_choice(self, style: str) -> tuple[Check, str]:
        """(check, style to send). An ignored constraint is still sent (harmless, and it helps if
        the server only misbehaved during the probe); a refused one is dropped."""
        if style == "none":
            return Check(
                "choice", "ok", "not constrained (structured_outputs: none): tolerant parsing"
            ), "none"
        body = (
            {"structured_outputs": {"choice": PROBE_CHOICES}}
            if style == "structured_outputs"
            else {"guided_choice": PROBE_CHOICES}
        )
        answer = await self.ask("Say hello.", max_tokens=16, extra_body=body)
        if answer.answered and (answer.content or "").strip() in PROBE_CHOICES:
            return Check("choice", "ok", f"{style} choice honoured"), style
        if answer.answered:
            said = (answer.content or "").strip()[:40]
            detail = f"{style} choice ignored (answered {said!r}); tolerant parsing of free text"
            return Check("choice", "fallback", detail), style
        await self.down_unless_plain_works(answer)
        detail = f"{style} choice refused ({answer.message[:80]}); no constraint, tolerant parsing"
        return Check("choice", "fallback", detail), "none"

    async def check_image(self) -> Check:
        content = [
            {"type": "text", "text": "What colour is this image? One word."},
            {"type": "image_url", "image_url": {"url": _probe_image_uri()}},
        ]
        answer = await self.ask(content, max_tokens=8)
        if answer.answered:
            return Check("image", "ok", "image part accepted")
        await self.down_unless_plain_works(answer)
        return Check("image", "fail", f"image part refused ({answer.message[:120]}); no fallback")


def _json_request(mode: str) -> tuple[str, int, dict[str, Any] | None]:
    if mode == "json_schema":
        fmt = {"type": "json_schema", "json_schema": {"name": "LensesProbe", "schema": PROBE_SCHEMA}}
        return _QUESTION, 96, {"response_format": fmt}
    text = f"{_QUESTION}\n\n{schema_instruction(PROBE_SCHEMA)}"
    fmt = {"type": "json_object", "schema": PROBE_SCHEMA}
    return text, 96, ({"response_format": fmt} if mode == "json_object" else None)


def _is_json(content: str | None, strict: bool) -> bool:
    """Strict (json_schema honoured): exactly the probe schema. Else: any JSON object."""
    try:
        value = json.loads(content or "") if strict else extract_json(content)
    except (ValueError, AnswerError):
        return False
    if strict:
        return isinstance(value, dict) and value == {"answer": "ok"}
    return isinstance(value, dict)


def _probe_image_uri() -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 30, 30)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _unavailable(role: str, urls: tuple[str, ...], code: str, message: str) -> EndpointUnavailable:
    return EndpointUnavailable(
        f"model role {role!r}: endpoint {', '.join(urls)} is unavailable ({code}: {message[:200]}). "
        "Nothing was sent; start or fix the server and rerun.",
        role=role,
        urls=urls,
        code=code,
    )


async def _listing(name: str, endpoints: list[Endpoint], retry: RetryConfig) -> tuple[Endpoint, list[str]]:
    """The first endpoint that lists its models, and that list (retried like any request)."""
    rng, error = random.Random(0), ("", "")
    for attempt in range(1, retry.max_attempts + 1):
        for endpoint in endpoints:
            try:
                listing = await endpoint.client.models.list()
                return endpoint, [str(m.id) for m in listing.data]
            except Exception as exc:
                error = (classify_error(exc)[0], f"{type(exc).__name__}: {str(exc)[:200]}")
        if attempt < retry.max_attempts:
            await asyncio.sleep(backoff_delay(attempt, retry, rng))
    raise _unavailable(name, tuple(e.url for e in endpoints), *error)


async def probe_role(
    name: str,
    role: RoleConfig,
    endpoints: list[Endpoint],
    retry: RetryConfig,
    needs: tuple[str, ...],
    json_mode: str,
    choice_style: str,
) -> ProbeReport:
    """Check what `needs` asks of the role's endpoints; the report holds the modes to use."""
    urls = tuple(e.url for e in endpoints)
    endpoint, served = await _listing(name, endpoints, retry)
    simulated = any(m.startswith(codes.SIMULATED_MODEL_PREFIX) for m in served)
    report = ProbeReport(name, urls, role.model, json_mode, choice_style, simulated)
    prober = _Prober(name, role, endpoint, retry)
    if "json" in needs:
        check, report.json_mode = await prober.check_json(json_mode)
        report.checks.append(check)
    if "choice" in needs:
        check, report.choice_style = await prober.check_choice(choice_style)
        report.tolerant_choice = check.status == "fallback"
        report.checks.append(check)
    if "image" in needs:
        report.checks.append(await prober.check_image())
    report.checks.insert(0, await _model_check(role.model, served, simulated, prober))
    return report


async def _model_check(model: str, served: list[str], simulated: bool, prober: _Prober) -> Check:
    if model in served or codes.SIMULATED_MODEL_PREFIX + model in served:
        return Check("model", "ok", f"{model} is served")
    if simulated:
        return Check("model", "ok", "the lenses simulator answers any model name")
    listed = ", ".join(served[:4]) or "none"
    if not prober.answered_once:
        answer = await prober.plain()
        if not answer.answered and answer.code != codes.ENDPOINT_REFUSED:
            raise _unavailable(prober.name, (prober.endpoint.url,), answer.code or "", answer.message)
    if prober.answered_once:
        return Check("model", "ok", f"{model} not in /models ({listed}), but the server answers with it")
    return Check("model", "fail", f"{model} is not served (served: {listed})")


_cache: dict[tuple[Any, ...], tuple[float, ProbeReport]] = {}
_cache_lock = threading.Lock()


def forget() -> None:
    """Drop cached probe reports (a server was reconfigured; tests)."""
    with _cache_lock:
        _cache.clear()


async def cached_probe(
    name: str,
    role: RoleConfig,
    endpoints: list[Endpoint],
    retry: RetryConfig,
    needs: tuple[str, ...],
    json_mode: str,
    choice_style: str,
) -> ProbeReport:
    """`probe_role`, once per CACHE_TTL_S for the same endpoints, model, settings and needs (the
    shards of a run share one probe; an unreachable endpoint is never cached)."""
    key = (name, tuple(role.base_urls), role.model, json_mode, choice_style, tuple(sorted(needs)))
    now = time.monotonic()
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None and now - hit[0] < CACHE_TTL_S:
        return hit[1]
    report = await probe_role(name, role, endpoints, retry, needs, json_mode, choice_style)
    level = logging.INFO if all(c.status == "ok" for c in report.checks) else logging.WARNING
    log.log(level, "probe of role %s at %s: %s", name, ", ".join(report.urls), report.describe())
    with _cache_lock:
        _cache[key] = (time.monotonic(), report)
    return report


def check_roles(config: Any, roles: list[str]) -> list[ProbeReport]:
    """`lenses check`: probe each role (fresh, uncached) for what the pipeline asks of it. An
    unreachable endpoint is reported as a failed `endpoint` check instead of raised."""
    return asyncio.run(_check_roles(config, roles))


async def _check_roles(config: Any, roles: list[str]) -> list[ProbeReport]:
    from lenses_data.models.endpoints import make_endpoint
    from lenses_data.models.keys import resolve_api_key
    from lenses_data.models.messages import default_json_mode

    reports = []
    for name in roles:
        role = config.role(name)
        try:
            key = await asyncio.to_thread(resolve_api_key, name, role)
        except RuntimeError as error:  # MissingKeyError
            report = ProbeReport(name, tuple(role.base_urls), role.model, default_json_mode(role), "")
            report.checks.append(Check("endpoint", "fail", str(error)))
            reports.append(report)
            continue
        endpoints = [make_endpoint(url, key, role.timeout_s, 1) for url in role.base_urls]
        json_mode, style = default_json_mode(role), config.choice_style(name)
        try:
            reports.append(
                await probe_role(name, role, endpoints, config.retry, ROLE_NEEDS[name], json_mode, style)
            )
        except EndpointUnavailable as error:
            report = ProbeReport(name, tuple(role.base_urls), role.model, json_mode, style)
            report.checks.append(Check("endpoint", "fail", error.message))
            reports.append(report)
        finally:
            for endpoint in endpoints:
                await endpoint.close()
    return reports
