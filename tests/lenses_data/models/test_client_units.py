"""The client's own bookkeeping, each piece pinned whole: the outage message an operator reads, which
journal a client writes (and when none), its state over its life, the API key error, how it tells
the lenses simulator from a real model, and the runtime a role gets from its config and probe."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from lenses_data.models import probe
from lenses_data.models import types as codes
from lenses_data.models.calls import RoleRuntime
from lenses_data.models.client import ModelClient, _outage_error, _probe_simulated
from lenses_data.models.endpoints import backoff_delay, make_endpoint
from lenses_data.models.journal import JournalEntry, ShardJournal, shard_journal_path
from lenses_data.models.keys import MissingKeyError
from lenses_data.models.parsing import parse_choice
from lenses_data.models.types import ModelRequest, ModelResult
from lenses_data.simulator.simulator import free_port
from lenses_data.simulator.testing import sim_models_config
from tests.lenses_data.models.fakeserver import FakeServer, serving


@pytest.fixture(autouse=True)
def _fresh_probe_cache():
    probe.forget()
    yield
    probe.forget()


def _dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there: connection refused


def test_outage_error_counts_answered_failed_and_unsent_and_names_every_endpoint() -> None:
    urls = ("http://a:8000/v1", "http://b:8000/v1")
    runtime = SimpleNamespace(
        name="validator",
        pool=SimpleNamespace(endpoints=[SimpleNamespace(url=u) for u in urls]),
        retry=SimpleNamespace(max_attempts=3),
    )
    failed = ModelResult(key="k", ok=False, error_code=codes.SERVER_ERROR, error_message="HTTP 500")
    answered = ModelResult(key="a", ok=True)
    # 7 requests: 3 answered, 2 failed on the endpoint, 2 never sent.
    results: list[ModelResult | None] = [answered, None, answered, None, None, answered, None]
    error = _outage_error([(runtime, failed), (runtime, failed)], results)
    assert str(error) == (
        "model role 'validator': endpoint http://a:8000/v1, http://b:8000/v1 failed 2 request(s) after "
        f"3 attempt(s) each ({codes.SERVER_ERROR}: HTTP 500). 3 request(s) answered (journaled), "
        "2 not sent; nothing is written or rejected for this shard: rerun to retry."
    )
    assert (error.role, error.urls, error.code, error.failed, error.answered) == (
        "validator",
        urls,
        codes.SERVER_ERROR,
        2,
        3,
    )


def test_from_config_journals_only_when_enabled_and_given_a_folder(tmp_path: Path) -> None:
    config = sim_models_config([_dead_url()])
    disabled = config.model_copy(update={"journal": config.journal.model_copy(update={"enabled": False})})
    path = shard_journal_path(tmp_path, "filter", 0)
    for client in (
        ModelClient.from_config(disabled, journal_dir=path.parent),
        ModelClient.from_config(config, journal_dir=None),
    ):
        assert client.journal_root is None
        with client.shard_journal(path):
            assert client.journal is None
    assert not path.exists() and not path.parent.exists()
    client = ModelClient.from_config(config, journal_dir=path.parent)
    assert client.journal_root == path.parent
    with client.shard_journal(path):
        assert isinstance(client.journal, ShardJournal)
    assert client.journal is None


class MemoryJournal:
    """A journal kept in memory (the `Journal` protocol), to see what the client writes and reads."""

    def __init__(self) -> None:
        self.index: dict[str, JournalEntry] = {}
        self.closed = False

    def get(self, request_hash: str) -> JournalEntry | None:
        return self.index.get(request_hash)

    def put(self, entry: JournalEntry) -> None:
        self.index[entry.hash] = entry

    def put_many(self, entries: list[JournalEntry]) -> None:
        for entry in entries:
            self.put(entry)

    def entries(self) -> Iterator[JournalEntry]:
        return iter(list(self.index.values()))

    def close(self) -> None:
        self.closed = True


def _filter_requests(n: int) -> list[ModelRequest]:
    return [
        ModelRequest(key=f"f{i}", role="filter", text="?", after_image_text=str(i), choice=["YES", "NO"])
        for i in range(n)
    ]


def test_a_journal_given_to_the_client_is_written_replayed_counted_and_closed(sim_url: str) -> None:
    journal = MemoryJournal()
    client = ModelClient(sim_models_config([sim_url]), journal=journal)
    assert (client.closed, client.last_progress, client.simulated_answers, client.usage()) == (
        False,
        None,
        0,
        {},
    )
    requests = _filter_requests(3)
    first = client.run_sync(requests, parse_choice(["YES", "NO"]))
    assert [r.ok for r in first] == [True] * 3 and len(journal.index) == 3
    second = client.run_sync(requests, parse_choice(["YES", "NO"]))
    assert [(r.key, r.cached, r.value) for r in second] == [(r.key, True, r.value) for r in first]
    assert [bucket["requests"] for bucket in client.usage().values()] == [3]
    client.close()
    assert (client.closed, client.journal, journal.closed, client.usage()) == (True, None, True, {})


def test_clients_built_alike_back_off_alike() -> None:
    """The backoff jitter comes from the client's seeded generator: a rerun waits as the run did."""
    config = sim_models_config([_dead_url()])
    first, second = ModelClient(config), ModelClient(config)
    delays = [
        [backoff_delay(attempt, config.retry, c._rng) for attempt in (1, 2, 3)] for c in (first, second)
    ]
    assert delays[0] == delays[1] and len(set(delays[0])) == 3


def test_a_missing_api_key_names_the_role_and_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LENSES_TEST_UNSET_KEY", raising=False)
    config = sim_models_config([_dead_url()]).with_role("filter", api_key_env="LENSES_TEST_UNSET_KEY")
    with pytest.raises(MissingKeyError) as info:
        ModelClient(config).run_sync(_filter_requests(1), parse_choice(["YES", "NO"]))
    assert str(info.value) == (
        "models.filter.api_key_env names 'LENSES_TEST_UNSET_KEY', which is not set or empty"
    )


def test_the_simulator_is_told_from_a_real_model_by_the_first_endpoint_that_answers() -> None:
    real, simulated = FakeServer(), FakeServer(served=("simulated/test/validator",))

    def ask(*urls: str) -> bool | None:
        async def probe_them() -> bool | None:
            endpoints = [make_endpoint(url, "EMPTY", 5, 1) for url in urls]
            try:
                return (await _probe_simulated(endpoints, "test/validator"))[0]
            finally:
                for endpoint in endpoints:
                    await endpoint.close()

        return asyncio.run(probe_them())

    with serving(real) as real_url, serving(simulated) as sim_url:
        assert ask(_dead_url(), sim_url) is True
        assert ask(_dead_url(), real_url, sim_url) is False
        assert ask(_dead_url()) is None
    # The listing is asked with its own 10 s read timeout (the openai client sends it as a header).
    assert [h.get("x-stainless-read-timeout") for h in real.listing_headers] == ["10.0"]


def _runtime_of(client: ModelClient, role: str, needs: tuple[str, ...] = ()) -> RoleRuntime:
    async def prepare() -> RoleRuntime:
        runtime = await client._runtime(role, None, needs)
        await runtime.pool.close()
        return runtime

    return asyncio.run(prepare())


def test_a_role_runtime_follows_its_config_without_a_probe(sim_url: str) -> None:
    config = sim_models_config([sim_url]).with_role("validator", json_schema_mode="json_object")
    config = config.model_copy(update={"journal": config.journal.model_copy(update={"reuse_failed": True})})
    runtime = _runtime_of(ModelClient(config), "validator")
    assert (runtime.json_mode, runtime.reuse_failed, runtime.simulated_endpoint) == (
        "json_object",
        True,
        True,
    )
    assert runtime.context_tokens is None  # only the probe reads the served context


def test_a_probed_role_runtime_takes_the_served_context_and_the_simulator_flag(simulator) -> None:
    with simulator(max_model_len=4096, models=["test/validator"]) as url:
        runtime = _runtime_of(ModelClient(sim_models_config([url], probe=True)), "validator", ("json",))
    assert (runtime.context_tokens, runtime.simulated_endpoint, runtime.json_mode) == (
        4096,
        True,
        "json_schema",
    )
    with serving(FakeServer()) as url:
        runtime = _runtime_of(ModelClient(sim_models_config([url], probe=True)), "validator", ("json",))
    assert (runtime.context_tokens, runtime.simulated_endpoint) == (None, False)
