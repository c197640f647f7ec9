"""A replica that comes back: a benched endpoint returns to rotation only once its server passes a
health check, and a role whose every endpoint stays down past `retry.down_grace_s` fails as an
outage (EndpointUnavailable, exit 4), never as rejections."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator

import pytest
import yaml

from lenses_data.config.models import RetryConfig
from lenses_data.models.client import ModelClient, ModelRequest
from lenses_data.models.endpoints import EndpointPool, make_endpoint
from lenses_data.models.parsing import parse_choice
from lenses_data.models.types import EndpointUnavailable
from lenses_data.simulator.simulator import SimConfig, free_port, run_in_thread
from lenses_data.simulator.testing import sim_models_config, sim_stats

CHOICES = ["YES", "NO"]


def _requests(n: int) -> list[ModelRequest]:
    return [
        ModelRequest(key=f"f:{i}", role="filter", text="Polysemous?", after_image_text=str(i), choice=CHOICES)
        for i in range(n)
    ]


@contextlib.contextmanager
def _started_later(port: int, after_s: float, latency_s: float = 0.0) -> Iterator[threading.Event]:
    """A simulator that starts listening on `port` after `after_s` (a replica being restarted)."""
    stop, up = threading.Event(), threading.Event()

    def serve() -> None:
        if stop.wait(after_s):
            return
        with run_in_thread(SimConfig(latency_s=latency_s), port=port):
            up.set()
            stop.wait()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield up
    finally:
        stop.set()
        thread.join(timeout=30)


async def _until(condition, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.02)
    return condition()


def test_a_benched_endpoint_stays_out_until_its_server_answers_health_then_returns() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"

    async def scenario(up: threading.Event) -> None:
        endpoint = make_endpoint(url, "none", 5.0, capacity=2)
        pool = EndpointPool([endpoint], RetryConfig(unhealthy_after=1, unhealthy_cooldown_s=0.02))
        try:
            await pool.release(await pool.acquire(), healthy=False)  # a refused connection
            assert not endpoint.healthy()
            # Nothing listens yet: many cooldowns pass, every health check fails, it stays out.
            await asyncio.sleep(0.5)
            assert not endpoint.healthy() and not up.is_set()
            assert await _until(endpoint.healthy), "never readmitted after its server came up"
            assert up.is_set()
            chosen = await asyncio.wait_for(pool.acquire(), timeout=5)
            assert chosen is endpoint and endpoint.consecutive_failures == 0
            await pool.release(chosen, healthy=True)
        finally:
            await pool.close()

    with _started_later(port, after_s=1.0) as up:
        asyncio.run(scenario(up))


def test_a_replica_that_comes_back_mid_batch_answers_again(simulator) -> None:
    port = free_port()
    late = f"http://127.0.0.1:{port}/v1"
    with simulator(latency_s=0.03) as alive, _started_later(port, after_s=0.5, latency_s=0.03) as up:
        config = sim_models_config([late, alive], concurrency=2, unhealthy_after=1, unhealthy_cooldown_s=0.05)
        results = ModelClient(config).run_sync(_requests(240), parse_choice(CHOICES))
        assert up.is_set()
        came_back, stayed = sim_stats(late)["total_calls"], sim_stats(alive)["total_calls"]
    assert all(r.ok for r in results)
    assert came_back + stayed == 240
    assert came_back >= 20, f"the restarted replica answered {came_back} of 240"


def test_a_lone_replica_restarting_within_the_grace_costs_no_request() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    config = sim_models_config([url], concurrency=4, unhealthy_after=1, max_attempts=3, down_grace_s=60)
    with _started_later(port, after_s=1.0):
        results = ModelClient(config).run_sync(_requests(20), parse_choice(CHOICES))
    assert all(r.ok for r in results), [r.error_message for r in results if not r.ok][:2]


def test_every_replica_down_past_the_grace_fails_the_batch_as_an_outage() -> None:
    dead = [f"http://127.0.0.1:{free_port()}/v1" for _ in range(2)]
    config = sim_models_config(dead, concurrency=2, unhealthy_after=1, max_attempts=50, down_grace_s=0.3)
    with pytest.raises(EndpointUnavailable) as raised:
        ModelClient(config).run_sync(_requests(6), parse_choice(CHOICES))
    assert "down_grace_s" in str(raised.value)
    assert raised.value.role == "filter" and raised.value.answered == 0


def test_a_shard_that_starts_while_its_lone_replica_restarts_waits_for_it_in_the_probe() -> None:
    from lenses_data.models import probe

    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    config = sim_models_config([url], probe=True, unhealthy_cooldown_s=0.05, max_attempts=2, down_grace_s=60)
    probe.forget()
    try:
        with _started_later(port, after_s=1.0):
            results = ModelClient(config).run_sync(_requests(4), parse_choice(CHOICES))
    finally:
        probe.forget()
    assert all(r.ok for r in results), [r.error_message for r in results if not r.ok][:2]


def test_a_retry_goes_to_another_replica_than_the_one_that_just_failed(simulator) -> None:
    # A dead server refuses at once, so it always looks the least loaded; before it is benched
    # (here: never) a request's retries must not all land on it.
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with simulator() as alive:
        config = sim_models_config([dead, alive], concurrency=1, unhealthy_after=100, max_attempts=2)
        results = ModelClient(config).run_sync(_requests(20), parse_choice(CHOICES))
    assert all(r.ok for r in results), [r.error_message for r in results if not r.ok][:2]


def test_lenses_validate_exits_4_and_writes_nothing_when_its_replicas_stay_down_past_the_grace(
    tmp_path, capsys
) -> None:
    from lenses_app.cli import main
    from lenses_data import io
    from tests.lenses_data.models.test_client_outage import _config_dict, _rules_run

    run = _rules_run(tmp_path / "run")
    dead = f"http://127.0.0.1:{free_port()}/v1"
    config = _config_dict(dead, run)
    config["models"]["retry"].update(down_grace_s=0.5, unhealthy_cooldown_s=0.05)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["validate", "--config", str(path)]) == 4
    assert dead in capsys.readouterr().err
    assert not io.shard_path(run, "validate", 0).exists()
    assert not io.rejection_path(run, "validate", 0).exists()
