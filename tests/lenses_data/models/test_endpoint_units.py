"""The pool's bookkeeping, one rule at a time: how each error a call raises is classified, when
consecutive failures bench an endpoint, how many affinity keys are kept, when every endpoint down
becomes an outage, and what a readmission logs and wakes. Written against the survivors of `make
mutation MODULE=lenses_data/models/endpoints.py` (docs/testing.md)."""

from __future__ import annotations

import asyncio
import logging
import sys

import httpx2
import openai
import pytest

from lenses_data.config.models import RetryConfig
from lenses_data.models import types as codes
from lenses_data.models.endpoints import (
    AFFINITY_KEYS_PER_SLOT,
    Endpoint,
    EndpointPool,
    classify_error,
    make_endpoint,
)
from lenses_data.models.readmit import EndpointsDown

URL = "http://127.0.0.1:8000/v1"
REQUEST = httpx2.Request("POST", f"{URL}/chat/completions")


def _status(code: int) -> openai.APIStatusError:
    response = httpx2.Response(code, request=REQUEST)
    if code == 429:
        return openai.RateLimitError("rate limited", response=response, body=None)
    return openai.APIStatusError(f"HTTP {code}", response=response, body=None)


RETRY, NO_RETRY = True, False
DOWN, UNKNOWN = False, None  # the endpoint's health, as release() takes it


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (openai.APITimeoutError(request=REQUEST), (codes.TIMEOUT, RETRY, DOWN)),
        (TimeoutError(), (codes.TIMEOUT, RETRY, DOWN)),
        (openai.APIConnectionError(request=REQUEST), (codes.TRANSPORT_ERROR, RETRY, DOWN)),
        (_status(429), (codes.RATE_LIMITED, RETRY, UNKNOWN)),
        (_status(500), (codes.SERVER_ERROR, RETRY, DOWN)),
        (_status(501), (codes.SERVER_ERROR, RETRY, DOWN)),
        (_status(503), (codes.SERVER_ERROR, RETRY, DOWN)),
        (_status(408), (codes.SERVER_ERROR, RETRY, UNKNOWN)),
        (_status(409), (codes.SERVER_ERROR, RETRY, UNKNOWN)),
        (_status(401), (codes.ENDPOINT_REFUSED, NO_RETRY, UNKNOWN)),
        (_status(403), (codes.ENDPOINT_REFUSED, NO_RETRY, UNKNOWN)),
        (_status(404), (codes.ENDPOINT_REFUSED, NO_RETRY, UNKNOWN)),
        (_status(400), (codes.CLIENT_ERROR, NO_RETRY, UNKNOWN)),
        (_status(402), (codes.CLIENT_ERROR, NO_RETRY, UNKNOWN)),
        (_status(405), (codes.CLIENT_ERROR, NO_RETRY, UNKNOWN)),
        (_status(410), (codes.CLIENT_ERROR, NO_RETRY, UNKNOWN)),
        (_status(422), (codes.CLIENT_ERROR, NO_RETRY, UNKNOWN)),
        (_status(499), (codes.CLIENT_ERROR, NO_RETRY, UNKNOWN)),
        (
            openai.APIResponseValidationError(httpx2.Response(200, request=REQUEST), body="{"),
            (codes.TRANSPORT_ERROR, RETRY, DOWN),
        ),
        (ValueError("garbled body"), (codes.TRANSPORT_ERROR, RETRY, DOWN)),
        (RuntimeError("anything else"), (codes.TRANSPORT_ERROR, RETRY, DOWN)),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else None,
)
def test_each_error_class_has_its_reason_retry_and_health(exc, expected):
    assert classify_error(exc) == expected


def _pool(urls: list[str], retry: RetryConfig, capacity: int = 2, health_check=None) -> EndpointPool:
    endpoints = [Endpoint(url, clients=[], capacity=capacity) for url in urls]
    if health_check is None:
        return EndpointPool(endpoints, retry)
    return EndpointPool(endpoints, retry, health_check=health_check)


async def _never_healthy(_endpoint: Endpoint) -> bool:
    return False


def test_only_unhealthy_after_consecutive_failures_bench_and_a_success_resets_the_count():
    async def scenario() -> None:
        retry = RetryConfig(unhealthy_after=3, unhealthy_cooldown_s=60)
        pool = _pool([URL], retry, capacity=4, health_check=_never_healthy)
        (endpoint,) = pool.endpoints
        try:
            for expected in (1, 2):
                await pool.release(await pool.acquire(), healthy=False)
                assert (endpoint.consecutive_failures, endpoint.healthy()) == (expected, True)
            await pool.release(await pool.acquire(), healthy=None)  # says nothing: count kept
            assert endpoint.consecutive_failures == 2
            await pool.release(await pool.acquire(), healthy=True)
            assert endpoint.consecutive_failures == 0
            for expected in (1, 2):
                await pool.release(await pool.acquire(), healthy=False)
                assert (endpoint.consecutive_failures, endpoint.healthy()) == (expected, True)
            late = await pool.acquire()  # in flight when the endpoint is benched
            await pool.release(await pool.acquire(), healthy=False)
            assert (endpoint.consecutive_failures, endpoint.healthy()) == (3, False)
            benched_at, watcher = endpoint.down_since, pool._watchers[URL]
            await pool.release(late, healthy=False)  # already benched: not benched again
            assert endpoint.down_since == benched_at and pool._watchers == {URL: watcher}
            assert endpoint.consecutive_failures == 4 and endpoint.outstanding == 0
        finally:
            await pool.close()
        assert watcher.cancelled()

    asyncio.run(scenario())


async def _cycle(pool: EndpointPool, keys: list[str]) -> None:
    for key in keys:
        endpoint = await pool.acquire(key)
        await pool.release(endpoint, healthy=True, affinity=key)


def test_exactly_the_limit_of_idle_keys_is_kept():
    async def scenario() -> None:
        pool = _pool([URL], RetryConfig(), capacity=1)
        limit = AFFINITY_KEYS_PER_SLOT
        await _cycle(pool, [f"key-{i}" for i in range(limit)])
        assert [pool.affinity_endpoint(f"key-{i}") for i in range(limit)] == [URL] * limit
        await _cycle(pool, ["one-more"])
        assert pool.affinity_endpoint("key-0") is None  # the least recently used goes first
        kept = [pool.affinity_endpoint(f"key-{i}") for i in range(1, limit)]
        assert kept + [pool.affinity_endpoint("one-more")] == [URL] * limit

    asyncio.run(scenario())


def test_a_key_stays_bound_while_a_second_request_with_it_is_in_flight():
    async def scenario() -> None:
        pool = _pool([URL], RetryConfig(), capacity=2)
        first, second = await pool.acquire("shared"), await pool.acquire("shared")
        await pool.release(first, healthy=True, affinity="shared")
        await _cycle(pool, [f"key-{i}" for i in range(3 * AFFINITY_KEYS_PER_SLOT)])
        assert pool.affinity_endpoint("shared") == URL  # the second still holds it
        await pool.release(second, healthy=True, affinity="shared")
        await _cycle(pool, [f"more-{i}" for i in range(3 * AFFINITY_KEYS_PER_SLOT)])
        assert pool.affinity_endpoint("shared") is None

    asyncio.run(scenario())


def test_keys_in_use_are_kept_past_the_limit_and_a_new_key_still_gets_a_slot():
    """Every remembered key has a request waiting or in flight: none may be forgotten, so the map
    grows past its limit for a moment instead of failing the request with the new key."""

    async def scenario() -> None:
        pool = _pool(["http://a/v1", "http://b/v1"], RetryConfig(), capacity=1)
        limit = AFFINITY_KEYS_PER_SLOT * pool.capacity
        await _cycle(pool, [f"key-{i}" for i in range(limit)])  # all on a (ties go to the first)
        held = await pool.acquire("held")  # fills a; key-0 is forgotten
        waiters = [asyncio.create_task(pool.acquire(f"key-{i}")) for i in range(1, limit)]
        await asyncio.sleep(0.02)
        assert not any(waiter.done() for waiter in waiters)  # waiting for a, their endpoint
        fresh = await asyncio.wait_for(pool.acquire("fresh"), 1)
        assert fresh.url == "http://b/v1"
        in_use = ["held", "fresh", *(f"key-{i}" for i in range(1, limit))]
        assert [pool.affinity_endpoint(key) for key in in_use] == [held.url, fresh.url] + [held.url] * (
            limit - 1
        )
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)

    asyncio.run(scenario())


def test_every_endpoint_down_past_the_grace_is_an_outage_naming_them_all():
    pool = _pool(["http://a/v1", "http://b/v1"], RetryConfig(down_grace_s=10))
    a, b = pool.endpoints
    a.down_since = 100.0
    assert pool._grace_left(200.0) is None  # b is in rotation: no deadline
    b.down_since = 103.0  # the grace runs from the last one benched
    assert pool._grace_left(105.0) == 8.0
    assert pool._grace_left(112.5) == 0.5
    with pytest.raises(EndpointsDown) as raised:
        pool._grace_left(113.0)
    assert str(raised.value) == (
        "every endpoint (http://a/v1, http://b/v1) out of rotation for 10s, past "
        "retry.down_grace_s=10: none passed a health check"
    )


def test_a_readmission_logs_the_time_down_wakes_a_waiter_and_drops_its_watcher(caplog):
    async def scenario() -> None:
        passes = asyncio.Event()
        checks = []

        async def health(endpoint: Endpoint) -> bool:
            checks.append(endpoint.url)
            return passes.is_set()

        retry = RetryConfig(unhealthy_after=1, unhealthy_cooldown_s=0.01, down_grace_s=600)
        pool = _pool([URL], retry, capacity=1, health_check=health)
        (endpoint,) = pool.endpoints
        try:
            await pool.release(await pool.acquire(), healthy=False)
            assert not endpoint.healthy()
            endpoint.down_since -= 30  # as if benched half a minute ago
            waiter = asyncio.create_task(pool.acquire())
            await asyncio.sleep(0.05)
            assert not waiter.done() and len(checks) >= 2  # checked every cooldown, failing
            passes.set()
            assert await asyncio.wait_for(waiter, 2) is endpoint  # woken by the readmission
            assert endpoint.healthy() and endpoint.consecutive_failures == 0
            assert pool._watchers == {}
        finally:
            await pool.close()

    with caplog.at_level(logging.WARNING, logger="lenses_data.models"):
        asyncio.run(scenario())
    back = [r.getMessage() for r in caplog.records if "back in rotation" in r.getMessage()]
    assert back == [f"endpoint {URL} back in rotation (healthy after 30s down)"]


def test_two_endpoints_with_one_url_are_both_readmitted(caplog):
    """base_urls may name one server twice (twice the share of the load): each copy is benched and
    readmitted on its own."""

    async def scenario() -> None:
        async def healthy(_endpoint: Endpoint) -> bool:
            return True

        retry = RetryConfig(unhealthy_after=1, unhealthy_cooldown_s=0.01)
        pool = _pool([URL, URL], retry, capacity=1, health_check=healthy)
        try:
            first, second = await pool.acquire(), await pool.acquire()
            await pool.release(first, healthy=False)
            await pool.release(second, healthy=False)
            assert not first.healthy() and not second.healthy()
            for _ in range(100):
                await asyncio.sleep(0.01)
                if first.healthy() and second.healthy():
                    break
            assert first.healthy() and second.healthy()
            assert pool._watchers == {}
        finally:
            await pool.close()

    with caplog.at_level(logging.WARNING, logger="lenses_data.models"):
        asyncio.run(scenario())
    back = [r.getMessage() for r in caplog.records if "back in rotation" in r.getMessage()]
    assert back == [f"endpoint {URL} back in rotation (healthy after 0s down)"] * 2


def test_an_empty_pool_is_refused_with_its_reason():
    with pytest.raises(ValueError) as raised:
        EndpointPool([], RetryConfig())
    assert str(raised.value) == "an endpoint pool needs at least one endpoint"


def test_the_least_loaded_endpoint_is_judged_by_its_share_of_capacity():
    async def scenario() -> None:
        big = Endpoint("http://big/v1", clients=[], capacity=4)
        small = Endpoint("http://small/v1", clients=[], capacity=2)
        pool = EndpointPool([big, small], RetryConfig())
        picks = [(await pool.acquire()).url for _ in range(6)]
        # 0 of each: the first listed; a quarter against nothing; a quarter against a half; a half
        # each: fewer in flight; then small is full.
        assert picks == [big.url, small.url, big.url, small.url, big.url, big.url]
        waiter = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0.02)
        assert not waiter.done()  # both full: never more than capacity in flight
        assert (big.outstanding, small.outstanding) == (4, 2)
        await pool.release(small, healthy=True)
        assert await asyncio.wait_for(waiter, 1) is small
        assert (big.outstanding, small.outstanding, big.calls, small.calls) == (4, 2, 4, 3)

    asyncio.run(scenario())


def test_a_retry_avoids_the_endpoint_that_failed_unless_it_is_the_only_one_in_rotation():
    async def scenario() -> None:
        retry = RetryConfig(unhealthy_after=1, unhealthy_cooldown_s=60)
        pool = _pool(["http://a/v1", "http://b/v1"], retry, health_check=_never_healthy)
        a, b = pool.endpoints
        try:
            for _ in range(3):  # a is the least loaded (first listed) each time, yet avoided
                chosen = await pool.acquire(avoid=a)
                assert chosen is b
                await pool.release(chosen, healthy=None)
            assert await pool.acquire() is a  # without `avoid`: the least loaded
            await pool.release(a, healthy=None)
            await pool.release(await pool.acquire(avoid=a), healthy=False)  # b is benched
            assert not b.healthy()
            assert await asyncio.wait_for(pool.acquire(avoid=a), 1) is a  # the only one left
            assert await asyncio.wait_for(pool.acquire(avoid=b), 1) is a
        finally:
            await pool.close()

    asyncio.run(scenario())


def test_calls_go_round_robin_over_the_connection_shards():
    async def scenario() -> list[str]:
        endpoint = Endpoint(URL, clients=["shard-0", "shard-1"], capacity=4)
        pool = EndpointPool([endpoint], RetryConfig())
        used = []
        for _ in range(4):
            chosen = await pool.acquire()
            used.append(chosen.client)
            await pool.release(chosen, healthy=True)
        return used

    assert asyncio.run(scenario()) == ["shard-1", "shard-0", "shard-1", "shard-0"]


@pytest.mark.parametrize(
    ("capacity", "shards", "keepalive"),
    [(1, 1, 1 + 8), (8, 1, 8 + 8), (9, 2, 5 + 8), (20, 3, 7 + 8), (64, 8, 8 + 8)],
)
def test_an_endpoint_splits_its_capacity_over_shards_of_at_most_eight_connections(
    capacity, shards, keepalive
):
    """One openai client per shard, retries off (the pool retries and counts), every shard keeping
    alive a connection per request it can hold and a few more (round robin is not exact)."""
    endpoint = make_endpoint(URL, "sk-role", 7.5, capacity)
    try:
        assert (endpoint.url, endpoint.capacity, len(endpoint.clients)) == (URL, capacity, shards)
        for client in endpoint.clients:
            settings = (str(client.base_url), client.api_key, client.max_retries, client.timeout)
            assert settings == (f"{URL}/", "sk-role", 0, 7.5)
            pool = client._client._transport._pool  # the httpx2 connection pool of the shard
            assert (pool._max_keepalive_connections, pool._max_connections) == (keepalive, sys.maxsize)
            assert client._client.timeout == httpx2.Timeout(7.5)
        assert len({id(client) for client in endpoint.clients}) == shards
    finally:
        asyncio.run(endpoint.close())
