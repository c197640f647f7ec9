"""Answers reused across runs at the client (models/reuse.py), over real HTTP to the simulator, its
calls counted: an earlier run's answer is reused only for the same request body, sampling, image
content and served model, from any of that stage's journal files, and copied with its source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from lenses_data.config import ConfigError
from lenses_data.models.client import ModelClient
from lenses_data.models.journal import read_run_journal, shard_journal_path
from lenses_data.models.parsing import parse_choice
from lenses_data.models.reuse import AnswerIndex, check_sources, forget_indexes, served_identity
from lenses_data.models.reuse_report import tally_calls
from lenses_data.models.types import ModelRequest
from lenses_data.simulator.testing import sim_models_config, sim_stats

YES_NO = ["YES", "NO"]


@pytest.fixture
def sim_url(simulator):
    """A simulator that lists the role's model, as vLLM lists the model it serves."""
    with simulator(models=["test/filter"]) as url:
        yield url


@pytest.fixture(autouse=True)
def _fresh_indexes():
    forget_indexes()
    yield
    forget_indexes()


def _images(folder: Path, n: int, shade: int = 0) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = folder / f"img{i}.png"
        Image.new("RGB", (32, 32), (i * 20, shade, 0)).save(path)
        paths.append(str(path))
    return paths


def _requests(paths: list[str], seed: int | None = None) -> list[ModelRequest]:
    return [
        ModelRequest(
            key=f"filter:{Path(p).stem}", role="filter", text="Keep?", image_path=p, choice=YES_NO, seed=seed
        )
        for p in paths
    ]


def _ask(url: str, run: Path, requests: list[ModelRequest], shard: int = 0, **models: object) -> ModelClient:
    config = sim_models_config([url]).model_copy(update=models)
    client = ModelClient.from_config(config, journal_dir=run / "journal")
    with client.shard_journal(shard_journal_path(run, "filter", shard)):
        results = client.run_sync(requests, parse_choice(YES_NO))
    assert all(r.ok for r in results)
    client.close()
    return client


def _calls(url: str) -> int:
    return int(sim_stats(url)["total_calls"])


def _asked_since(url: str, before: dict[str, int]) -> set[str]:
    """The request keys the simulator got calls for since `before` (its calls per request)."""
    stats = sim_stats(url)
    return {stats["keys"][d] for d, n in stats["calls"].items() if n > before.get(d, 0)}


def test_another_run_reuses_by_request_in_any_shard_and_copies_the_source(sim_url, tmp_path) -> None:
    paths = _images(tmp_path / "images", 6)
    first = tmp_path / "first"
    _ask(sim_url, first, _requests(paths[:3]), shard=0)
    _ask(sim_url, first, _requests(paths[3:]), shard=1)
    before = _calls(sim_url)
    # One shard of the new run holds images of both shards of the first: all found.
    second = tmp_path / "second"
    client = _ask(sim_url, second, _requests(paths[1:5]), shard=0, reuse_answers_from=[str(first)])
    assert _calls(sim_url) == before and client.calls_sent == 0
    assert client.reused == {str(first.resolve()): 4}
    copied = list(read_run_journal(second))
    assert sorted(e.key for e in copied) == [f"filter:img{i}" for i in range(1, 5)]
    assert {Path(e.source_file).name for e in copied} == {"part-00000.jsonl", "part-00001.jsonl"}
    assert {e.source_run for e in copied} == {str(first.resolve())}
    assert {e.served for e in copied} == {json.dumps({"id": "simulated/test/filter"}, separators=(",", ":"))}
    # The card counts the whole run from its journal: this run paid nothing, the first paid its calls.
    tallies: dict = {}
    for run in (first, second):
        tallies[run.name] = {}
        list(tally_calls(read_run_journal(run), tallies[run.name]))
    assert tallies["second"] == {"filter": {"calls_sent": 0, "answers_reused": {str(first.resolve()): 4}}}
    assert tallies["first"] == {"filter": {"calls_sent": before, "answers_reused": {}}}


def test_other_sampling_another_seed_or_other_image_content_are_asked_again(sim_url, tmp_path) -> None:
    paths = _images(tmp_path / "images", 3)
    first = tmp_path / "first"
    _ask(sim_url, first, _requests(paths))
    reuse = {"reuse_answers_from": [str(first)]}
    base = sim_models_config([sim_url])
    hotter = base.with_role("filter", sampling=base.filter.sampling.model_copy(update={"temperature": 0.5}))
    _images(tmp_path / "repainted", 3, shade=90)  # the same names, other pixels
    repainted = [p.replace("/images/", "/repainted/") for p in paths]
    for name, requests, models in [
        ("hot", _requests(paths), {"filter": hotter.filter}),
        ("seeded", _requests(paths, seed=3), {}),
        ("repainted", _requests(repainted), {}),
    ]:
        before = _calls(sim_url)
        client = _ask(sim_url, tmp_path / name, requests, **reuse, **models)
        assert client.reused == {} and client.calls_sent >= 3, name
        assert _calls(sim_url) == before + client.calls_sent, name
    # The same pixels under another path: the image is keyed by its content, so reused.
    moved = tmp_path / "moved"
    moved.mkdir()
    copies = [str(moved / Path(p).name) for p in paths]
    for src, dst in zip(paths, copies, strict=True):
        Path(dst).write_bytes(Path(src).read_bytes())
    client = _ask(sim_url, tmp_path / "moved-run", _requests(copies), **reuse)
    assert client.calls_sent == 0 and sum(client.reused.values()) == 3


def test_failures_and_another_served_model_are_never_reused(sim_url, tmp_path) -> None:
    paths = _images(tmp_path / "images", 4)
    first = tmp_path / "first"
    _ask(sim_url, first, _requests(paths))
    journal = shard_journal_path(first, "filter", 0)
    entries = {e["key"]: e for e in map(json.loads, journal.read_text().splitlines())}
    entries["filter:img0"].update(status="failed", error_code="server_error", raw=None)
    entries["filter:img1"].update(status="failed", error_code="client_error", raw=None)
    entries["filter:img2"]["served"] = json.dumps({"id": "simulated/test/filter", "root": "other/weights"})
    journal.write_text("".join(json.dumps(e) + "\n" for e in entries.values()))
    assert len(AnswerIndex([first], "filter")) == 2  # the two failures are not indexed at all
    before = sim_stats(sim_url)["calls"]
    client = _ask(sim_url, tmp_path / "second", _requests(paths), reuse_answers_from=[str(first)])
    assert _asked_since(sim_url, before) == {"filter:img0", "filter:img1", "filter:img2"}
    assert client.reused == {str(first.resolve()): 1}


def test_a_run_directory_without_a_journal_is_a_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"models.reuse_answers_from: .*nowhere has no journal"):
        AnswerIndex([tmp_path / "nowhere"], "filter")
    # The build checks its sources before any stage runs (flows.build.run_all_stages).
    with pytest.raises(ConfigError, match=r"nowhere has no journal"):
        check_sources([tmp_path / "nowhere"])
    (tmp_path / "run" / "journal").mkdir(parents=True)
    check_sources([tmp_path / "run"])


def test_the_served_identity_is_the_listed_model_with_its_weights() -> None:
    listing = [
        {"id": "other", "root": "x"},
        {"id": "OpenGVLab/InternVL3_5-38B", "root": "/models/snapshots/abc123", "object": "model"},
    ]
    served = served_identity(listing, "OpenGVLab/InternVL3_5-38B")
    assert json.loads(served) == {"id": "OpenGVLab/InternVL3_5-38B", "root": "/models/snapshots/abc123"}
    assert served_identity(listing, "missing") is None


def test_with_the_probe_on_the_served_model_is_journaled_too(sim_url, tmp_path) -> None:
    paths = _images(tmp_path / "images", 2)
    _ask(sim_url, tmp_path / "run", _requests(paths), probe=True)
    served = {e.served for e in read_run_journal(tmp_path / "run")}
    assert served == {json.dumps({"id": "simulated/test/filter"}, separators=(",", ":"))}
