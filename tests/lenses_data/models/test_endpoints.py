"""Several endpoints per role: least-outstanding balancing, bounded in-flight, a dead endpoint
benched while the healthy one carries the batch."""

from __future__ import annotations

from lenses_data.models.client import ModelClient, ModelRequest
from lenses_data.models.parsing import parse_choice
from lenses_data.simulator.simulator import free_port
from lenses_data.simulator.testing import sim_models_config, sim_stats


def _requests(n: int) -> list[ModelRequest]:
    return [
        ModelRequest(
            key=f"f:{i}", role="filter", text="Polysemous?", after_image_text=str(i), choice=["YES", "NO"]
        )
        for i in range(n)
    ]


def test_two_endpoints_share_the_load_within_their_limits(simulator) -> None:
    with simulator(latency_s=0.02) as url_a, simulator(latency_s=0.02) as url_b:
        client = ModelClient(sim_models_config([url_a, url_b], concurrency=4))
        results = client.run_sync(_requests(80), parse_choice(["YES", "NO"]))
        stats_a, stats_b = sim_stats(url_a), sim_stats(url_b)
    assert all(r.ok for r in results)
    assert stats_a["total_calls"] + stats_b["total_calls"] == 80
    assert min(stats_a["total_calls"], stats_b["total_calls"]) >= 20
    assert stats_a["max_in_flight"] <= 4 and stats_b["max_in_flight"] <= 4


def test_dead_endpoint_is_benched_and_the_batch_completes(simulator) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there: connection refused
    with simulator(latency_s=0.01) as alive:
        config = sim_models_config([dead, alive], concurrency=4, unhealthy_after=2, unhealthy_cooldown_s=30)
        client = ModelClient(config)
        results = client.run_sync(_requests(60), parse_choice(["YES", "NO"]))
        stats = sim_stats(alive)
    assert all(r.ok for r in results)
    assert stats["total_calls"] == 60
    failed_calls = sum(r.attempts for r in results) - 60
    # Benched after 2 consecutive failures. On an idle machine at most the 4 calls in flight also
    # fail; under CI load, retries of those calls can race the bench for a few more (10 seen once).
    # Without benching, about half of the 60 requests' first attempts would fail.
    assert 2 <= failed_calls <= 2 + 4 * 3
