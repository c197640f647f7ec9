"""How long a retry waits: a server's Retry-After read from a real httpx response, and the
exponential backoff that honours it up to the cap. Written against the survivors of `make mutation
MODULE=lenses_data/models/endpoints.py` (docs/testing.md)."""

from __future__ import annotations

import random

import httpx
import pytest

from lenses_data.config.models import RetryConfig
from lenses_data.models.endpoints import backoff_delay, retry_after_s


def _refused(headers: dict[str, str]) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://127.0.0.1:8000/v1/chat/completions")
    response = httpx.Response(429, headers=headers, request=request)
    return httpx.HTTPStatusError("rate limited", request=request, response=response)


@pytest.mark.parametrize(
    ("headers", "hint"),
    [
        ({"Retry-After": "3"}, 3.0),
        ({"retry-after": "0.5"}, 0.5),
        ({}, None),
        ({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, None),  # an HTTP date: not used
    ],
)
def test_retry_after_is_read_from_the_response(headers, hint):
    assert retry_after_s(_refused(headers)) == hint


def test_an_error_without_a_response_gives_no_hint():
    assert retry_after_s(httpx.ConnectError("refused")) is None


@pytest.mark.parametrize(
    ("attempt", "hint", "delay"),
    [
        (1, None, 0.5),
        (2, None, 1.0),
        (3, None, 2.0),
        (5, None, 4.0),
        (1, 3.0, 3.0),
        (1, 60.0, 4.0),
        (3, 0.1, 2.0),
    ],
)
def test_backoff_doubles_up_to_the_cap_and_honours_retry_after_up_to_it(attempt, hint, delay):
    retry = RetryConfig(backoff_base_s=0.5, backoff_max_s=4.0, jitter=0.0)
    assert backoff_delay(attempt, retry, random.Random(1), hint) == delay


def test_jitter_only_shortens_the_wait_and_by_at_most_its_share():
    retry = RetryConfig(backoff_base_s=1.0, backoff_max_s=60.0, jitter=0.25)
    rng = random.Random(7)
    delays = [backoff_delay(3, retry, rng) for _ in range(200)]
    assert all(3.0 <= delay <= 4.0 for delay in delays)
    assert min(delays) < 3.1 and max(delays) > 3.9  # the whole band is used
