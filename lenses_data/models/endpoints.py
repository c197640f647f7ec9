"""Endpoints of one role: bounded requests in flight each, least-outstanding balancing with image
affinity, and a circuit breaker that benches an endpoint after consecutive failures and puts it back
in rotation once its server passes a health check (readmit.py)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

import openai

from lenses_data.config.models import RetryConfig
from lenses_data.models import types as codes
from lenses_data.models.readmit import EndpointsDown, HealthCheck, server_healthy

log = logging.getLogger("lenses_data.models")

# httpx's connection pool checks every connection (a getpeername and a poll each) on each request,
# so one pool of 256 keep-alive connections costs O(256) per request; shards of 8 keep it short
# (measured with 512 px image requests: 20 % fewer function calls per request than shards of 32).
CONNECTIONS_PER_SHARD = 8
# Affinity keys remembered per unit of pool capacity: enough to cover every request in flight and
# the ones just finished (whose prefix is still in the replica's cache), bounded in memory. A key
# with a request waiting or in flight is never forgotten (its answers would split over replicas).
AFFINITY_KEYS_PER_SLOT = 4


@dataclass
class Endpoint:
    url: str
    clients: list[Any]  # openai.AsyncOpenAI, one per connection-pool shard
    capacity: int
    outstanding: int = 0
    consecutive_failures: int = 0
    # Benched (out of rotation) since this monotonic time; None: in rotation.
    down_since: float | None = None
    calls: int = field(default=0)

    def healthy(self, _now: float | None = None) -> bool:
        return self.down_since is None

    @property
    def client(self) -> Any:
        """The next shard's client (round robin keeps the shards evenly loaded)."""
        return self.clients[self.calls % len(self.clients)]

    async def close(self) -> None:
        for client in self.clients:
            await client.close()


def make_endpoint(url: str, api_key: str, timeout_s: float, capacity: int) -> Endpoint:
    shards = max(1, -(-capacity // CONNECTIONS_PER_SHARD))
    per_shard = -(-capacity // shards)
    clients = [make_openai_client(url, api_key, timeout_s, per_shard) for _ in range(shards)]
    return Endpoint(url, clients, capacity)


def make_openai_client(url: str, api_key: str, timeout_s: float, capacity: int) -> Any:
    """AsyncOpenAI with its own retries off (we retry and count) and a pool sized to the capacity,
    so no request waits for a connection and keep-alive covers every request in flight."""
    factory = getattr(openai, "DefaultAsyncHttpx2Client", None)
    if factory is not None:
        import httpx2 as httpx_mod
    else:  # older openai releases speak httpx
        import httpx as httpx_mod

        factory = openai.DefaultAsyncHttpxClient
    # Round robin can put a few more than `capacity` on one shard: no hard cap below the total.
    limits = httpx_mod.Limits(max_connections=None, max_keepalive_connections=capacity + 8)
    http_client = factory(limits=limits, timeout=timeout_s)
    return openai.AsyncOpenAI(
        base_url=url, api_key=api_key, max_retries=0, timeout=timeout_s, http_client=http_client
    )


class EndpointPool:
    """Least-outstanding balancing, except that requests with the same affinity key (the image's
    content hash) go to the endpoint the key last went to, waiting for a free slot there.

    Why: the answers of one image and kind repeat the same instructions and image. On one vLLM
    replica the later ones take the image's KV blocks from the prefix cache and skip the vision
    encoder; spread over replicas, each replica prefills and encodes the image again (at 32
    replicas, almost every answer would). Keys are forgotten least recently used first, and a key
    whose endpoint fails or is benched moves to the least-loaded healthy one."""

    def __init__(
        self, endpoints: list[Endpoint], retry: RetryConfig, health_check: HealthCheck = server_healthy
    ) -> None:
        if not endpoints:
            raise ValueError("an endpoint pool needs at least one endpoint")
        self.endpoints = endpoints
        self.retry = retry
        self.health_check = health_check
        self._watchers: dict[str, asyncio.Task[None]] = {}  # per benched endpoint: its health checks
        self._changed = asyncio.Condition()
        self._affinity: OrderedDict[str, Endpoint] = OrderedDict()
        self._affinity_limit = AFFINITY_KEYS_PER_SLOT * self.capacity
        self._key_users: Counter[str] = Counter()  # requests waiting or in flight, per key

    @property
    def capacity(self) -> int:
        return sum(e.capacity for e in self.endpoints)

    def _pick(
        self, now: float, affinity: str | None = None, avoid: Endpoint | None = None
    ) -> Endpoint | None:
        bound = self._affinity.get(affinity) if affinity is not None else None
        if bound is not None and bound.healthy(now):
            return bound if bound.outstanding < bound.capacity else None  # wait for a slot there
        # A retry goes elsewhere while another endpoint is in rotation: a dead server refuses at
        # once, so it always looks the least loaded and would take every retry of its own failures.
        others = avoid is not None and any(e is not avoid and e.healthy(now) for e in self.endpoints)
        free = [
            e
            for e in self.endpoints
            if e.outstanding < e.capacity and e.healthy(now) and not (others and e is avoid)
        ]
        if not free:
            return None
        return min(free, key=lambda e: (e.outstanding / e.capacity, e.outstanding))

    def _bind(self, affinity: str, endpoint: Endpoint) -> None:
        self._affinity[affinity] = endpoint
        self._affinity.move_to_end(affinity)
        while len(self._affinity) > self._affinity_limit:
            idle = next((key for key in self._affinity if not self._key_users[key]), None)
            if idle is None:
                break
            del self._affinity[idle]

    def affinity_endpoint(self, affinity: str) -> str | None:
        """The URL requests with this key go to (None: not bound)."""
        bound = self._affinity.get(affinity)
        return bound.url if bound is not None else None

    async def acquire(self, affinity: str | None = None, avoid: Endpoint | None = None) -> Endpoint:
        """A slot on an endpoint (`avoid`: the one a retry just failed on, used only when no other
        is in rotation); every acquire is paired with one `release` with the same key."""
        if affinity is not None:
            self._key_users[affinity] += 1
        try:
            return await self._acquire(affinity, avoid)
        except BaseException:  # cancelled while waiting: no release will follow
            self._drop_user(affinity)
            raise

    def _drop_user(self, affinity: str | None) -> None:
        if affinity is not None:
            self._key_users[affinity] -= 1
            if not self._key_users[affinity]:
                del self._key_users[affinity]

    async def _acquire(self, affinity: str | None, avoid: Endpoint | None) -> Endpoint:
        async with self._changed:
            while True:
                now = time.monotonic()
                chosen = self._pick(now, affinity, avoid)
                if chosen is not None:
                    chosen.outstanding += 1
                    chosen.calls += 1
                    if affinity is not None:
                        self._bind(affinity, chosen)
                    return chosen
                # All benched: wake when a health check readmits one (or on any release), and
                # give up once the last one has been down for the grace.
                timeout = self._grace_left(now)
                try:
                    await asyncio.wait_for(self._changed.wait(), timeout=timeout)
                except TimeoutError:
                    pass

    async def release(self, endpoint: Endpoint, healthy: bool | None, affinity: str | None = None) -> None:
        """healthy=False counts toward benching; None means the outcome says nothing about it.
        A failed call unbinds its affinity key, so the retry may go to another endpoint."""
        async with self._changed:
            endpoint.outstanding -= 1
            self._drop_user(affinity)
            if healthy is True:
                endpoint.consecutive_failures = 0
            elif healthy is False:
                if affinity is not None and self._affinity.get(affinity) is endpoint:
                    del self._affinity[affinity]
                endpoint.consecutive_failures += 1
                if endpoint.consecutive_failures >= self.retry.unhealthy_after and endpoint.healthy():
                    self._bench(endpoint)
            self._changed.notify_all()

    def _grace_left(self, now: float) -> float | None:
        """Seconds until every endpoint has been down for `down_grace_s` (None: one is up)."""
        downs = [e.down_since for e in self.endpoints]
        if any(since is None for since in downs):
            return None
        last_down = max(since for since in downs if since is not None)
        left = last_down + self.retry.down_grace_s - now
        if left <= 0:
            urls = ", ".join(e.url for e in self.endpoints)
            raise EndpointsDown(
                f"every endpoint ({urls}) out of rotation for {now - last_down:.0f}s, past "
                f"retry.down_grace_s={self.retry.down_grace_s:g}: none passed a health check"
            )
        return left

    def _bench(self, endpoint: Endpoint) -> None:
        """Out of rotation until a health check passes (checked every unhealthy_cooldown_s)."""
        endpoint.down_since = time.monotonic()
        log.warning(
            "endpoint %s out of rotation after %d consecutive failures; health-checked every %gs",
            endpoint.url,
            endpoint.consecutive_failures,
            self.retry.unhealthy_cooldown_s,
        )
        self._watchers[endpoint.url] = asyncio.create_task(self._readmit(endpoint))

    async def _readmit(self, endpoint: Endpoint) -> None:
        while True:
            await asyncio.sleep(self.retry.unhealthy_cooldown_s)
            if await self.health_check(endpoint):
                break
        async with self._changed:
            down_for = time.monotonic() - (endpoint.down_since or time.monotonic())
            endpoint.down_since, endpoint.consecutive_failures = None, 0
            self._watchers.pop(endpoint.url, None)
            log.warning("endpoint %s back in rotation (healthy after %.0fs down)", endpoint.url, down_for)
            self._changed.notify_all()

    async def close(self) -> None:
        watchers, self._watchers = list(self._watchers.values()), {}
        for watcher in watchers:
            watcher.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        for endpoint in self.endpoints:
            await endpoint.close()


def classify_error(exc: BaseException) -> tuple[str, bool, bool | None]:
    """(reason code, retryable, endpoint healthy?) for an exception raised by a call."""
    if isinstance(exc, openai.APITimeoutError | asyncio.TimeoutError):
        return codes.TIMEOUT, True, False
    if isinstance(exc, openai.APIConnectionError):
        return codes.TRANSPORT_ERROR, True, False
    if isinstance(exc, openai.RateLimitError):
        return codes.RATE_LIMITED, True, None  # busy, not broken: back off but keep it in rotation
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code >= 500:
            return codes.SERVER_ERROR, True, False
        if exc.status_code in (408, 409):
            return codes.SERVER_ERROR, True, None
        if exc.status_code in (401, 403, 404):  # wrong key, model or path: every request alike
            return codes.ENDPOINT_REFUSED, False, None
        return codes.CLIENT_ERROR, False, None
    if isinstance(exc, openai.APIResponseValidationError | ValueError):
        return codes.TRANSPORT_ERROR, True, False  # garbled response body
    return codes.TRANSPORT_ERROR, True, False


def retry_after_s(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def backoff_delay(attempt: int, retry: RetryConfig, rng: random.Random, hint: float | None = None) -> float:
    """Exponential backoff with jitter; a server's Retry-After is honoured up to backoff_max_s."""
    delay = min(retry.backoff_max_s, retry.backoff_base_s * (2 ** (attempt - 1)))
    delay *= 1.0 - retry.jitter * rng.random()
    if hint is not None:
        delay = max(delay, min(hint, retry.backoff_max_s))
    return delay
