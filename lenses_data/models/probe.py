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
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from lenses_data.config.models import RetryConfig, RoleConfig, choice_field
from lenses_data.config.roles import MODEL_ROLES
from lenses_data.models import types as codes
from lenses_data.models.dialect import ServerInfo, listed_context, server_version
from lenses_data.models.endpoints import Endpoint, backoff_delay, classify_error
from lenses_data.models.probe_context import check_context
from lenses_data.models.probe_requests import Check, Prober, unavailable
from lenses_data.models.reuse import served_identity
from lenses_data.models.types import CapabilityMissing, EndpointUnavailable, ModelRequest

log = logging.getLogger("lenses_data.models.probe")


# What each pipeline role asks of its server (declared with the roles, lenses_data.config.roles).
ROLE_NEEDS: dict[str, tuple[str, ...]] = {name: role.needs for name, role in MODEL_ROLES.items()}
CACHE_TTL_S = 900.0


@dataclass
class ProbeReport:
    role: str
    urls: tuple[str, ...]
    model: str
    json_mode: str
    choice_style: str
    simulated: bool | None = None
    server: ServerInfo | None = None  # the release the server reports and its served context
    # Parse choice answers as free text (the server ignores or refuses the choice constraint).
    tolerant_choice: bool = False
    checks: list[Check] = field(default_factory=list)
    served: str | None = None  # the served model as listed (reuse.served_identity): keys reused answers

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


async def _listing(
    name: str, endpoints: list[Endpoint], retry: RetryConfig, wait_s: float = 0.0
) -> tuple[Endpoint, list[Any]]:
    """The first endpoint that lists its models, and that list (retried like any request). With
    `wait_s`, endpoints that are all down are asked again every `unhealthy_cooldown_s` until that
    many seconds have passed (a replica being restarted: the requests wait as long)."""
    rng, error = random.Random(0), ("", "")
    deadline = time.monotonic() + wait_s
    attempt = 0
    while True:
        attempt += 1
        for endpoint in endpoints:
            try:
                listing = await endpoint.client.models.list()
                return endpoint, list(listing.data)
            except Exception as exc:
                error = (classify_error(exc)[0], f"{type(exc).__name__}: {str(exc)[:200]}")
        if attempt < retry.max_attempts:
            await asyncio.sleep(backoff_delay(attempt, retry, rng))
        elif time.monotonic() < deadline:
            if attempt == retry.max_attempts:
                log.warning(
                    "every endpoint of role %s is down (%s); waiting up to %.0fs for one to answer "
                    "(retry.down_grace_s)",
                    name,
                    error[1],
                    deadline - time.monotonic(),
                )
            await asyncio.sleep(max(0.01, min(retry.unhealthy_cooldown_s, deadline - time.monotonic())))
        else:
            raise unavailable(name, tuple(e.url for e in endpoints), *error)


async def probe_role(
    name: str,
    role: RoleConfig,
    endpoints: list[Endpoint],
    retry: RetryConfig,
    needs: tuple[str, ...],
    json_mode: str,
    choice_style: str,
    down_wait_s: float = 0.0,
    samples: list[tuple[str, ModelRequest]] | None = None,
) -> ProbeReport:
    """Check what `needs` asks of the role's endpoints; the report holds the modes to use. With
    `down_wait_s`, a role whose every endpoint is down is waited for that long first. `samples`
    (`lenses check`): the role's representative requests, whose prompt plus `max_tokens` must fit
    the served context (lenses_data.models.probe_context)."""
    urls = tuple(e.url for e in endpoints)
    endpoint, entries = await _listing(name, endpoints, retry, down_wait_s)
    served = [str(m.id) for m in entries]
    simulated = any(m.startswith(codes.SIMULATED_MODEL_PREFIX) for m in served)
    context = listed_context(entries, role.model) or listed_context(
        entries, codes.SIMULATED_MODEL_PREFIX + role.model
    )
    info = ServerInfo(await server_version(endpoint.url), context)
    if role.structured_outputs == "auto" and info.version:  # the release decides, not the pin
        choice_style = choice_field("auto", info.version)
    report = ProbeReport(name, urls, role.model, json_mode, choice_style, simulated, server=info)
    report.served = served_identity(entries, role.model)
    prober = Prober(name, role, endpoint, retry)
    prober.simulated = simulated
    if "json" in needs:
        check, report.json_mode = await prober.check_json(json_mode)
        report.checks.append(check)
    if "choice" in needs:
        check, report.choice_style = await prober.check_choice(choice_style)
        report.tolerant_choice = check.status == "fallback"
        report.checks.append(check)
    if "image" in needs:
        report.checks.append(await prober.check_image())
    if "prefix" in needs:  # `lenses check` only: two more requests
        report.checks.append(await prober.check_prefix(with_image="image" in needs))
    if samples:  # `lenses check` only: one request per kind of the role's real requests
        report.checks.append(await check_context(prober, samples, report.json_mode, info.max_model_len))
    report.checks.insert(0, await _model_check(role.model, served, simulated, prober))
    report.checks.insert(0, _server_check(info, choice_style))
    return report


def _server_check(info: ServerInfo, choice_style: str) -> Check:
    if info.version:
        detail = f"vLLM {info.version}: choice constraint sent as {choice_style}"
    else:
        detail = f"no GET /version: the config's vllm_version decides (choice constraint as {choice_style})"
    if info.max_model_len:
        detail += f"; serves {info.max_model_len} tokens of context (re-asks are cut to fit)"
    return Check("server", "ok", detail)


async def _model_check(model: str, served: list[str], simulated: bool, prober: Prober) -> Check:
    if model in served or codes.SIMULATED_MODEL_PREFIX + model in served:
        return Check("model", "ok", f"{model} is served")
    if simulated:
        return Check("model", "ok", "the lenses simulator answers any model name")
    listed = ", ".join(served[:4]) or "none"
    if not prober.answered_once:
        answer = await prober.plain()
        if not answer.answered and answer.code != codes.ENDPOINT_REFUSED:
            raise unavailable(prober.name, (prober.endpoint.url,), answer.code or "", answer.message)
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
    # A build waits for a restarting replica as its requests would (`lenses check` does not).
    report = await probe_role(
        name, role, endpoints, retry, needs, json_mode, choice_style, retry.down_grace_s
    )
    level = logging.INFO if all(c.status == "ok" for c in report.checks) else logging.WARNING
    log.log(level, "probe of role %s at %s: %s", name, ", ".join(report.urls), report.describe())
    with _cache_lock:
        _cache[key] = (time.monotonic(), report)
    return report


def check_roles(
    config: Any, roles: list[str], samples: dict[str, list[tuple[str, ModelRequest]]] | None = None
) -> list[ProbeReport]:
    """`lenses check`: probe each role (fresh, uncached) for what the pipeline asks of it, and
    whether its `samples` (role -> representative requests) fit its served context. An
    unreachable endpoint is reported as a failed `endpoint` check instead of raised."""
    return asyncio.run(_check_roles(config, roles, samples or {}))


async def _check_roles(
    config: Any, roles: list[str], samples: dict[str, list[tuple[str, ModelRequest]]]
) -> list[ProbeReport]:
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
                await probe_role(
                    name,
                    role,
                    endpoints,
                    config.retry,
                    (*ROLE_NEEDS[name], "prefix"),
                    json_mode,
                    style,
                    samples=samples.get(name),
                )
            )
        except EndpointUnavailable as error:
            report = ProbeReport(name, tuple(role.base_urls), role.model, json_mode, style)
            report.checks.append(Check("endpoint", "fail", error.message))
            reports.append(report)
        finally:
            for endpoint in endpoints:
                await endpoint.close()
    return reports
