"""When the probe waits and what it keeps, on a fake clock (probe's `time.monotonic` and
`asyncio.sleep`: no test waits for real) against scripted servers over real HTTP: the listing's
retries and down-wait schedule, its seeded jitter, the report cache's lifetime and key, and a
probe before work waiting the down grace without caching the outage."""

from __future__ import annotations

import asyncio
from collections import Counter
from types import SimpleNamespace

import pytest

from lenses_data.config.models import RetryConfig
from lenses_data.models import probe
from lenses_data.models.endpoints import make_endpoint
from lenses_data.models.probe_requests import Check
from lenses_data.models.types import EndpointUnavailable
from lenses_data.simulator.testing import sim_models_config
from tests.lenses_data.models.probeserver import (
    FAST_RETRY,
    MODEL,
    ROLE,
    Scripted,
    down_message,
    probe_validator,
    serving,
)

pytestmark = pytest.mark.usefixtures("fresh_probe_cache")


class FakeClock:
    """probe's `time.monotonic` and `asyncio.sleep`: a sleep moves the clock and is recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, now: float = 0.0) -> None:
        self.now, self.sleeps = now, []
        monkeypatch.setattr(probe, "time", SimpleNamespace(monotonic=lambda: self.now))
        monkeypatch.setattr(probe, "asyncio", SimpleNamespace(sleep=self.sleep))

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


LONG = "B restarting: " + "weights loading, " * 20  # past the 200 characters kept of an error


@pytest.mark.parametrize(
    ("wait_s", "sleeps", "warned"),
    [
        (0.0, [0.25, 0.5], None),  # no down-wait: the retries alone
        (10.0, [0.25, 0.5, 4.0, 4.0, 1.25], "9"),  # cooldown steps, the last one cut to the deadline
        (0.755, [0.25, 0.5, 0.01], "0"),  # never a busy loop: at least 10 ms a step
    ],
)
def test_a_role_whose_endpoints_are_all_down_is_retried_then_waited_for(
    monkeypatch, caplog, wait_s, sleeps, warned
) -> None:
    clock = FakeClock(monkeypatch)
    caplog.set_level("WARNING", logger="lenses_data.models.probe")
    retry = RetryConfig(
        max_attempts=3, backoff_base_s=0.25, backoff_max_s=30, jitter=0.0, unhealthy_cooldown_s=4.0
    )
    first, second = (
        Scripted(models_status=503, message="A restarting"),
        Scripted(models_status=503, message=LONG),
    )
    with serving(first, second) as urls, pytest.raises(EndpointUnavailable) as raised:
        probe_validator(urls, retry, down_wait_s=wait_s)
    # Every attempt asks every endpoint, in order; the error is the last endpoint's last answer.
    assert clock.sleeps == sleeps
    assert first.calls == second.calls == Counter(models=len(sleeps) + 1)
    last = down_message(LONG)
    assert raised.value.message == (
        f"model role {ROLE!r}: endpoint {urls[0]}, {urls[1]} is unavailable (server_error: {last[:200]}). "
        "Nothing was sent; start or fix the server and rerun."
    )
    assert (raised.value.urls, raised.value.code) == (tuple(urls), "server_error")
    warnings = [r.getMessage() for r in caplog.records if r.name == "lenses_data.models.probe"]
    expected = [
        f"every endpoint of role {ROLE} is down ({last}); waiting up to {warned}s for one to answer (retry.down_grace_s)"
    ]
    assert warnings == (expected if warned else [])


def test_the_listing_recovers_when_an_endpoint_answers_during_the_wait(monkeypatch) -> None:
    clock = FakeClock(monkeypatch)
    down = Scripted(models_status=503)
    retry = RetryConfig(max_attempts=2, backoff_base_s=0.25, jitter=0.0, unhealthy_cooldown_s=4.0)

    async def recovering(seconds: float) -> None:  # the second replica is back after the first wait
        await FakeClock.sleep(clock, seconds)
        down.models_status, down.served = (200, (MODEL,)) if len(clock.sleeps) > 1 else (503, ())

    monkeypatch.setattr(probe, "asyncio", SimpleNamespace(sleep=recovering))
    with serving(down) as urls:
        report = probe_validator(urls, retry, down_wait_s=60.0)
    assert clock.sleeps == [0.25, 4.0] and down.calls["models"] == 3
    assert report.checks[1] == Check("model", "ok", f"{MODEL} is served")


def test_the_listing_s_backoff_is_the_seeded_jitter_every_run_repeats(monkeypatch) -> None:
    # Probe retries draw their jitter from a generator seeded with 0 (as Prober's requests do), so
    # a probe's waits are the same on every run: no run-to-run timing drift in the probe logs.
    import random

    clock = FakeClock(monkeypatch)
    retry = RetryConfig(max_attempts=4, backoff_base_s=1.0, backoff_max_s=30, jitter=0.5)
    with serving(Scripted(models_status=503)) as urls, pytest.raises(EndpointUnavailable):
        probe_validator(urls, retry)
    rng = random.Random(0)
    assert clock.sleeps == [2 ** (attempt - 1) * (1.0 - 0.5 * rng.random()) for attempt in (1, 2, 3)]


def _cached(url: str, retry: RetryConfig, json_mode: str = "json_schema") -> probe.ProbeReport:
    """`cached_probe` of the validator at `url` (no capability needs), on its own event loop as a
    shard's client would."""
    role = sim_models_config([url]).role(ROLE)

    async def run() -> probe.ProbeReport:
        endpoints = [make_endpoint(url, "key", role.timeout_s, 1)]
        try:
            return await probe.cached_probe(ROLE, role, endpoints, retry, (), json_mode, "structured_outputs")
        finally:
            await endpoints[0].close()

    return asyncio.run(run())


def test_a_cached_report_lives_exactly_the_ttl_for_the_same_settings(monkeypatch) -> None:
    clock = FakeClock(monkeypatch, now=1000.0)
    server = Scripted(served=(MODEL,))
    with serving(server) as (url,):
        first = _cached(url, FAST_RETRY)
        clock.now = 1000.0 + probe.CACHE_TTL_S - 0.001
        assert _cached(url, FAST_RETRY) is first and server.calls["models"] == 1
        other = _cached(url, FAST_RETRY, json_mode="json_object")  # other settings: probed for them
        assert other.json_mode == "json_object" and server.calls["models"] == 2
        clock.now = 1000.0 + probe.CACHE_TTL_S  # expired: probed again
        again = _cached(url, FAST_RETRY)
    assert again is not first and again == first and server.calls["models"] == 3


def test_a_probe_before_work_waits_the_down_grace_and_never_caches_an_outage(monkeypatch) -> None:
    # The shards of a build wait for a restarting replica (retry.down_grace_s) as their requests
    # would; a probe that found the role down is not kept, so the next shard asks again.
    clock = FakeClock(monkeypatch)
    retry = RetryConfig(max_attempts=1, jitter=0.0, unhealthy_cooldown_s=2.0, down_grace_s=5.0)
    server = Scripted(models_status=503)
    with serving(server) as (url,):
        for shard in (1, 2):
            with pytest.raises(EndpointUnavailable):
                _cached(url, retry)
            assert server.calls["models"] == 4 * shard
    assert clock.sleeps == [2.0, 2.0, 1.0] * 2
