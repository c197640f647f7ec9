"""Infrastructure failures are not data: a shard whose endpoint fails (5xx after retries, refused
connection) raises, writes no output and no rejections, keeps its answered requests in the
journal, and a rerun against a healthy endpoint ends with the dataset of a clean run."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lenses_app.cli import main
from lenses_data import io
from lenses_data.config import config_from_dict
from lenses_data.models import probe
from lenses_data.models.client import ModelClient
from lenses_data.models.journal import shard_journal_path
from lenses_data.models.types import CLIENT_ERROR, EndpointUnavailable, SystemicFailure
from lenses_data.schemas import LensText
from lenses_data.simulator.simulator import free_port
from lenses_data.stages._annotate import rejections_frame
from lenses_data.stages.base import run_stage
from lenses_data.stages.validate import ValidateStage
from tests.lenses_data.models.fakeserver import FakeServer, serving
from tests.lenses_data.stages.annotate_rows import frame, lens_row

TEXTS = {
    "Literal": "A small red boat rests on the calm water of the harbour at dawn.",
    "Emotional": "A quiet calm settles over the harbour as the first light touches the boat.",
}
IMAGES_PER_SHARD = 6


@pytest.fixture(autouse=True)
def _fresh_probe_cache():
    probe.forget()
    yield
    probe.forget()


def _rules_run(run: Path, images_per_shard: int = IMAGES_PER_SHARD) -> Path:
    """A run whose `rules` stage is complete: 2 shards, 6 images x 2 captions each by default."""
    for shard in (0, 1):
        rows = [
            lens_row(f"img{shard}{i}", "caption", lens, f"{text} ({shard}{i})")
            for i in range(images_per_shard)
            for lens, text in TEXTS.items()
        ]
        io.write_shard(run, "rules", shard, frame(rows), LensText)
        io.write_rejections(run, "rules", shard, rejections_frame([]))
    io.mark_stage_complete(run, "rules", [0, 1])
    return run


def _config_dict(url: str, run: Path) -> dict:
    # No grace: a server that is down is not waited for (a restarting replica would be, 600 s).
    fast = {"backoff_base_s": 0.001, "backoff_max_s": 0.01, "max_attempts": 2, "down_grace_s": 0}
    # One request at a time: how many were answered before the outage is exact.
    role = {"model": "test/validator", "base_urls": [url], "timeout_s": 5, "max_concurrency": 1}
    return {"run_dir": str(run), "models": {"validator": role, "retry": fast}}


def _validate(url: str, run: Path) -> dict:
    config = config_from_dict(_config_dict(url, run), environ={})
    client = ModelClient.from_config(config.models, journal_dir=run / "journal")
    try:
        return run_stage(ValidateStage(config, client=client), run)
    finally:
        client.close()


def _dataset(run: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    records = io.read_stage(run, "validate", LensText).sort_values("text_id").reset_index(drop=True)
    rejected = io.read_rejections(run, "validate")
    return records, rejected


def _journal_lines(run: Path, shard: int) -> list[dict]:
    path = shard_journal_path(run, "validate", shard)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_outage_fails_the_shard_and_a_rerun_matches_a_clean_run(tmp_path: Path) -> None:
    with serving(FakeServer()) as url:
        _validate(url, _rules_run(tmp_path / "clean"))
    clean_records, clean_rejected = _dataset(tmp_path / "clean")
    assert len(clean_records) == 2 * 2 * IMAGES_PER_SHARD and clean_rejected.empty

    run = _rules_run(tmp_path / "outage")
    with serving(FakeServer(fail_after=3)) as url:
        with pytest.raises(EndpointUnavailable) as raised:
            _validate(url, run)
    error = raised.value
    assert url in str(error) and error.code == "server_error" and error.role == "validator"
    assert (error.failed, error.answered) == (1, 3)
    # Nothing written for the shard, nothing rejected; the three answers are journaled.
    assert not io.shard_path(run, "validate", 0).exists()
    assert not io.rejection_path(run, "validate", 0).exists()
    assert [e["status"] for e in _journal_lines(run, 0)] == ["ok"] * 3

    healthy = FakeServer()
    with serving(healthy) as url:
        _validate(url, run)
    # Shard 0 asked only what was not journaled; shard 1 asked everything.
    assert healthy.calls["work"] == (IMAGES_PER_SHARD - 3) + IMAGES_PER_SHARD
    records, rejected = _dataset(run)
    pd.testing.assert_frame_equal(records, clean_records)
    assert rejected.empty


def test_refused_connection_stops_before_sending_and_writes_nothing(tmp_path: Path) -> None:
    run = _rules_run(tmp_path / "run")
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(EndpointUnavailable) as raised:
        _validate(dead, run)
    assert dead in str(raised.value) and raised.value.code == "transport_error"
    assert not io.stage_dir(run, "validate").exists() or not any(io.stage_dir(run, "validate").iterdir())


def test_validate_command_exits_non_zero_with_the_endpoint_and_no_traceback(tmp_path: Path, capsys) -> None:
    run = _rules_run(tmp_path / "run")
    dead = f"http://127.0.0.1:{free_port()}/v1"
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(_config_dict(dead, run)))
    code = main(["validate", "--config", str(config_path)])
    err = capsys.readouterr().err
    assert code == 4
    assert dead in err and "validator" in err and "Traceback" not in err
    assert not io.shard_path(run, "validate", 0).exists()
    assert not io.rejection_path(run, "validate", 0).exists()


def test_a_400_on_every_work_request_fails_the_shard_as_systemic_not_as_rejections(tmp_path: Path) -> None:
    # A server that refuses a field of every work request (the probe's requests pass): the refusal
    # says nothing about the items, so the shard fails with the server's words as evidence, and
    # nothing is written or rejected. The same 400 counted as item rejections would be a dataset
    # of zero records with exit 0.
    run = _rules_run(tmp_path / "run")
    refusal = "unknown field 'response_format.schema' (refused by this server)"
    server = FakeServer(refuse_work=refusal)
    with serving(server) as url:
        with pytest.raises(SystemicFailure) as raised:
            _validate(url, run)
    error = raised.value
    assert error.role == "validator" and url in str(error)
    # One request at a time: the second refusal decides, nothing more is sent.
    assert error.counts == {CLIENT_ERROR: 2} and error.decided == 2 and server.calls["work"] == 2
    assert f"2 of 2 answered requests failed ({CLIENT_ERROR} 2)" in str(error)
    assert refusal in str(error) and "Nothing is written or rejected" in str(error)
    for shard in (0, 1):
        assert not io.shard_path(run, "validate", shard).exists()
        assert not io.rejection_path(run, "validate", shard).exists()


def test_json_schema_refused_completes_through_json_object_with_the_clean_dataset(tmp_path: Path) -> None:
    with serving(FakeServer()) as url:
        _validate(url, _rules_run(tmp_path / "clean"))
    server = FakeServer(reject_json_schema=True)
    with serving(server) as url:
        _validate(url, _rules_run(tmp_path / "fallback"))
    # Every work request used the fallback: json_object, with the schema in the prompt.
    assert server.calls["work"] == 2 * IMAGES_PER_SHARD
    assert all(b["response_format"]["type"] == "json_object" for b in server.bodies)
    assert all(b["response_format"]["schema"]["type"] == "array" for b in server.bodies)
    assert all("JSON schema" in b["messages"][-1]["content"] for b in server.bodies)
    records, rejected = _dataset(tmp_path / "fallback")
    pd.testing.assert_frame_equal(records, _dataset(tmp_path / "clean")[0])
    assert rejected.empty
    # The fallback changes the request, so it changes the journal key: no answer crosses modes.
    clean = {e["key"]: e["hash"] for e in _journal_lines(tmp_path / "clean", 0)}
    fallback = {e["key"]: e["hash"] for e in _journal_lines(tmp_path / "fallback", 0)}
    assert clean.keys() == fallback.keys() and not set(clean.values()) & set(fallback.values())


def test_outage_left_in_an_older_journal_is_asked_again_not_replayed(tmp_path: Path) -> None:
    from lenses_data.models.client import ModelRequest
    from lenses_data.models.journal import JournalEntry, ShardJournal
    from lenses_data.models.messages import request_hash
    from lenses_data.models.parsing import parse_choice

    config = config_from_dict(_config_dict("http://127.0.0.1:1/v1", tmp_path), environ={})
    models = config.models.model_copy(
        update={"journal": config.models.journal.model_copy(update={"reuse_failed": True})}
    )
    request = ModelRequest(
        key="v:1", role="validator", text="Is the boat red? Answer YES or NO.", choice=["YES", "NO"]
    )
    digest = request_hash(request, models.validator, None, models.choice_style("validator"))
    path = shard_journal_path(tmp_path, "validate", 0)
    path.parent.mkdir(parents=True)
    older = ShardJournal(path, False)
    older.put(
        JournalEntry(digest, "v:1", "validator", "test/validator", "failed", None, "server_error", "500")
    )
    older.close()
    server = FakeServer()
    with serving(server) as url:
        models = models.with_role("validator", base_urls=[url])
        client = ModelClient(models, journal_root=tmp_path / "journal")
        with client.shard_journal(path):
            [result] = client.run_sync([request], parse_choice(["YES", "NO"]))
    assert result.ok and not result.cached and result.value == "YES"
    assert server.calls["work"] == 1
