"""What a batch leaves behind besides its results, over real HTTP: a parse function's bug becomes one
INTERNAL_ERROR result (logged with the request key) while the rest of the batch is answered; the
progress counts of a fresh batch and of its replay from the journal; simulated answers summed over
the client's life; fsynced journals get every answer; `run_sync` works inside a running loop."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from lenses_data.models import probe
from lenses_data.models import types as codes
from lenses_data.models.client import ModelClient
from lenses_data.models.journal import shard_journal_path
from lenses_data.models.parsing import parse_choice
from lenses_data.models.types import ModelRequest
from lenses_data.simulator.testing import sim_models_config
from tests.lenses_data.models.fakeserver import FakeServer, serving

YES_NO = ["YES", "NO"]


@pytest.fixture(autouse=True)
def _fresh_probe_cache():
    probe.forget()
    yield
    probe.forget()


def _filter_requests(n: int) -> list[ModelRequest]:
    return [
        ModelRequest(key=f"f{i}", role="filter", text="?", after_image_text=str(i), choice=YES_NO)
        for i in range(n)
    ]


def _items(raw: str) -> list[str]:
    items = json.loads(raw)
    if "a3" in items:
        raise RuntimeError(f"parser bug on {items[0]}")  # not an answer error: a bug
    return items


def test_a_parse_bug_is_an_internal_error_for_its_item_only(caplog: pytest.LogCaptureFixture) -> None:
    requests = [
        ModelRequest(key=f"v{i}", role="validator", text="Check.", after_image_text=json.dumps([f"a{i}"]))
        for i in range(6)
    ]
    server = FakeServer()
    with serving(server) as url, caplog.at_level(logging.ERROR, logger="lenses_data.models"):
        client = ModelClient(sim_models_config([url], concurrency=2))
        results = client.run_sync(requests, _items)
    assert [r.value for r in results] == [["a0"], ["a1"], ["a2"], None, ["a4"], ["a5"]]
    bug = results[3]
    assert (bug.key, bug.ok, bug.error_code, bug.error_message, bug.model) == (
        "v3",
        False,
        codes.INTERNAL_ERROR,
        "RuntimeError: parser bug on a3",
        "test/validator",
    )
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage() == "unexpected error on model request v3" and record.exc_info is not None
    progress = client.last_progress
    # The bug's result carries no attempt count: 6 calls answered, 5 counted.
    assert (progress.total, progress.done, progress.failed, progress.cached, progress.calls) == (
        6,
        6,
        1,
        0,
        5,
    )
    assert (progress.simulated, client.simulated_answers, server.answered) == (0, 0, 6)


@pytest.mark.parametrize("probe_first", [False, True], ids=["no-probe", "probe"])
def test_progress_of_a_batch_and_of_its_replay_from_the_journal(
    sim_url: str, tmp_path: Path, probe_first
) -> None:
    config = sim_models_config([sim_url], probe=probe_first).model_copy(update={"progress_interval_s": 7.0})
    path = shard_journal_path(tmp_path, "filter", 0)
    client = ModelClient.from_config(config, journal_dir=path.parent)
    requests = _filter_requests(4)
    counts = []
    with client.shard_journal(path):
        for _ in range(2):  # a fresh batch, then the same batch again: replayed from the journal
            results = client.run_sync(requests, parse_choice(YES_NO))
            assert [(r.key, r.ok, r.simulated) for r in results] == [(q.key, True, True) for q in requests]
            p = client.last_progress
            counts.append((p.total, p.interval_s, p.done, p.failed, p.cached, p.simulated, p.calls))
    assert counts == [(4, 7.0, 4, 0, 0, 4, 4), (4, 7.0, 4, 0, 4, 4, 0)]
    assert client.simulated_answers == 8  # over the client's life, replays included
    work = sum(1 for line in path.read_text().splitlines() if json.loads(line)["key"].startswith("f"))
    assert work == 4  # the replay asked nothing again


def test_an_fsynced_journal_gets_every_answer(sim_url: str, tmp_path: Path) -> None:
    config = sim_models_config([sim_url])
    config = config.model_copy(update={"journal": config.journal.model_copy(update={"fsync": True})})
    path = shard_journal_path(tmp_path, "filter", 0)
    client = ModelClient.from_config(config, journal_dir=path.parent)
    with client.shard_journal(path):
        results = client.run_sync(_filter_requests(5), parse_choice(YES_NO))
    keys = sorted(json.loads(line)["key"] for line in path.read_text().splitlines())
    assert keys == [r.key for r in results] == [f"f{i}" for i in range(5)]


def test_run_sync_inside_a_running_event_loop(sim_url: str) -> None:
    client = ModelClient(sim_models_config([sim_url]))
    requests = _filter_requests(3)

    async def from_a_coroutine() -> list:
        return client.run_sync(requests, parse_choice(YES_NO))

    results = asyncio.run(from_a_coroutine())
    assert [(r.key, r.ok, r.value in YES_NO) for r in results] == [(q.key, True, True) for q in requests]
