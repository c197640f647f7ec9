"""Stages set up once per worker (`flows.worker_stages`), as the shard tasks use them: each worker
thread builds its stage once per stage run, every model client built is closed, and a shard that
fails never closes the client of a shard still running in another thread (issue 33)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from flows import worker_stages
from flows.stages import _process
from lenses_data import io
from lenses_data.config import PipelineConfig, config_from_dict
from lenses_data.models import probe
from lenses_data.models.journal import shard_journal_path
from lenses_data.schemas import LensText
from lenses_data.stages._annotate import rejections_frame
from tests.lenses_data.models.fakeserver import FakeServer, serving
from tests.lenses_data.stages.annotate_rows import frame, lens_row

IMAGES = 3  # per shard: one validator request per image (two texts each)
TEXTS = {
    "Literal": "A small red boat rests on the calm water of the harbour at dawn.",
    "Emotional": "A quiet calm settles over the harbour as the first light touches the boat.",
}


@pytest.fixture(autouse=True)
def _fresh_probe_cache():
    probe.forget()
    yield
    probe.forget()


def _rules_run(run: Path, shards: int) -> Path:
    for shard in range(shards):
        rows = [
            lens_row(f"img{shard}{i}", "caption", lens, f"{text} ({shard}{i})")
            for i in range(IMAGES)
            for lens, text in TEXTS.items()
        ]
        io.write_shard(run, "rules", shard, frame(rows), LensText)
        io.write_rejections(run, "rules", shard, rejections_frame([]))
    io.mark_stage_complete(run, "rules", list(range(shards)))
    return run


def _config(url: str, run: Path) -> PipelineConfig:
    fast = {"backoff_base_s": 0.001, "backoff_max_s": 0.01, "max_attempts": 2, "down_grace_s": 0}
    role = {"model": "test/validator", "base_urls": [url], "timeout_s": 10, "max_concurrency": 1}
    return config_from_dict({"run_dir": str(run), "models": {"validator": role, "retry": fast}}, environ={})


def _in_thread(work: Callable[[], object], outcome: dict[str, object], name: str) -> threading.Thread:
    def body() -> None:
        try:
            outcome[name] = work()
        except BaseException as error:  # kept for the test to look at
            outcome[name] = error

    thread = threading.Thread(target=body, name=name)
    thread.start()
    return thread


def _journal_statuses(run: Path, shard: int) -> list[str]:
    lines = shard_journal_path(run, "validate", shard).read_text().splitlines()
    return [json.loads(line)["status"] for line in lines if line.strip()]


def test_a_stage_is_set_up_once_per_worker_and_every_client_is_closed(tmp_path: Path, built) -> None:
    run = _rules_run(tmp_path, shards=4)
    token, outcome = "stage-run-1", {}
    before = worker_stages.setups
    with serving(FakeServer()) as url:
        config = _config(url, run)
        workers = [  # two workers, two shards each, one after another (as a pool thread runs them)
            _in_thread(lambda s=shards: [_process("validate", i, config, token) for i in s], outcome, name)
            for name, shards in (("w0", (0, 1)), ("w1", (2, 3)))
        ]
        for worker in workers:
            worker.join(60)
    stats = [item for name in ("w0", "w1") for item in outcome[name]]  # a failure would raise here
    assert [(s.shard, s.records_in, s.records_out, s.rejected) for s in stats] == [
        (shard, 2 * IMAGES, 2 * IMAGES, 0) for shard in range(4)
    ]
    assert worker_stages.setups - before == len(built) == 2  # one stage per worker, not per shard
    assert not any(stage.client.closed for stage in built)  # kept for the run's next shards
    assert worker_stages.release_worker_stages(token) == 2
    assert all(stage.client.closed for stage in built)


def test_a_failing_shard_never_closes_the_client_of_a_shard_still_running(tmp_path: Path, built) -> None:
    # Shard 1 is mid-request (the server holds it) when shard 0, in another worker thread, fails on
    # an unreadable input; the coordinator then ends the stage run and releases its stages. Shard 1
    # must finish on its open client, with every answer in its journal, and be closed only after.
    run = _rules_run(tmp_path, shards=2)
    io.shard_path(run, "rules", 0).write_bytes(b"not parquet")
    token, outcome, gate = "stage-run-2", {}, threading.Event()
    server = FakeServer(hold_work=gate)
    with serving(server) as url:
        config = _config(url, run)
        running = _in_thread(lambda: _process("validate", 1, config, token), outcome, "running")
        assert server.holding.wait(20), "shard 1 never sent a request"
        _in_thread(lambda: _process("validate", 0, config, token), outcome, "failing").join(20)
        assert isinstance(outcome["failing"], Exception)
        worker_stages.release_worker_stages(token)  # what run_stage_in_flow's cleanup does
        running_stage, failed_stage = built  # built in that order
        assert failed_stage.client.closed and not running_stage.client.closed
        gate.set()
        running.join(60)
    stats = outcome["running"]
    assert not isinstance(stats, BaseException), stats
    assert (stats.records_in, stats.records_out, stats.rejected) == (2 * IMAGES, 2 * IMAGES, 0)
    assert _journal_statuses(run, 1) == ["ok"] * IMAGES == ["ok"] * server.calls["work"]
    assert running_stage.client.closed  # released while busy: closed when its shard ended
