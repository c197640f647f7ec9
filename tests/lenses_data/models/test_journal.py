"""The per-shard response journal persists, replays answered requests, re-asks failures, keeps usage
for cost accounting, never lets a failure overwrite a success, refuses the single-file journals of
older versions, and never replays simulated answers against a real model."""

from __future__ import annotations

import json
import random
from dataclasses import asdict
from pathlib import Path

import pytest

from lenses_data.models import types as codes
from lenses_data.models.calls import RoleRuntime
from lenses_data.models.client import ModelClient, ModelRequest
from lenses_data.models.journal import (
    JournalEntry,
    ShardJournal,
    read_run_journal,
    shard_journal_path,
    usage_totals,
)
from lenses_data.models.journaled import replay
from lenses_data.models.parsing import parse_choice
from lenses_data.simulator.testing import sim_models_config, sim_stats


def _entry(h: str, status: str = "ok", raw: str = "YES", simulated: bool = False) -> JournalEntry:
    return JournalEntry(
        hash=h,
        key=f"k-{h}",
        role="filter",
        model="m",
        status=status,
        raw=raw,
        usage={"prompt_tokens": 3, "completion_tokens": 1},
        simulated=simulated,
    )


def test_entries_persist_across_reopen_and_success_replaces_failure(tmp_path: Path) -> None:
    path = shard_journal_path(tmp_path, "filter", 3)
    assert path == tmp_path / "journal" / "filter" / "part-00003.jsonl"
    journal = ShardJournal(path)
    journal.put(_entry("a", status="failed", raw="MAYBE"))
    journal.put(_entry("a"))
    journal.put(_entry("b"))
    journal.close()
    reopened = ShardJournal(path)
    assert reopened.get("a").status == "ok" and reopened.get("a").raw == "YES"
    assert reopened.get("missing") is None
    assert usage_totals(reopened) == {"m": {"requests": 2, "prompt_tokens": 6, "completion_tokens": 2}}
    reopened.close()


def test_close_writes_buffered_answers_and_a_late_one_is_named_lost(tmp_path: Path) -> None:
    # Answers buffered by the client's flushing writer reach the file when the journal closes; one
    # buffered after the close (a flush timer firing late) is an error that says what is lost,
    # not "I/O operation on closed file", and closing twice is harmless.
    path = shard_journal_path(tmp_path, "validate", 1)
    journal = ShardJournal(path)
    journal.append([_entry("a"), _entry("b")])
    journal.close()
    journal.close()
    assert [json.loads(line)["hash"] for line in path.read_text().splitlines()] == ["a", "b"]
    journal.append([_entry("c")])
    with pytest.raises(RuntimeError, match=r"closed with 1 answer\(s\) not written"):
        journal.flush()


def test_a_later_failure_never_overwrites_a_success(tmp_path: Path) -> None:
    path = shard_journal_path(tmp_path, "filter", 0)
    journal = ShardJournal(path)
    journal.put(_entry("a"))
    journal.put(_entry("a", status="failed", raw="MAYBE"))
    assert journal.get("a").status == "ok"  # in memory
    journal.close()
    reopened = ShardJournal(path)
    assert reopened.get("a").status == "ok" and reopened.get("a").raw == "YES"  # and on reload
    reopened.close()


def test_torn_last_line_is_skipped(tmp_path: Path) -> None:
    path = shard_journal_path(tmp_path, "filter", 0)
    journal = ShardJournal(path)
    journal.put(_entry("a"))
    journal.close()
    with open(path, "a") as handle:
        handle.write('{"hash": "b", "key": "k-b", "ro')  # killed mid-write
    reopened = ShardJournal(path)
    assert reopened.get("a") is not None and reopened.get("b") is None
    reopened.put(_entry("c"))  # appends after the torn line stay readable
    reopened.close()
    again = ShardJournal(path)
    assert again.get("c") is not None
    again.close()


def _single_file_journal(root: Path, name: str) -> None:
    """A journal as versions before per-shard journals wrote it: RUN/journal/answers.sqlite, or
    answers-<pid>-<n>.jsonl (only its presence matters: it is refused, not read)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(json.dumps(asdict(_entry("old"))) + "\n")


@pytest.mark.parametrize("name", ["answers.sqlite", "answers-123-456.jsonl"])
def test_a_single_file_journal_of_an_older_version_is_refused_by_name(tmp_path: Path, name: str) -> None:
    root = tmp_path / "journal"
    _single_file_journal(root, name)
    with pytest.raises(RuntimeError, match=rf"{name}: a single-file journal .* move these files away"):
        list(read_run_journal(tmp_path))
    client = ModelClient.from_config(sim_models_config(["http://127.0.0.1:9/v1"]), journal_dir=root)
    with (
        pytest.raises(RuntimeError, match=name),
        client.shard_journal(shard_journal_path(tmp_path, "filter", 0)),
    ):
        pass
    client.close()
    assert not shard_journal_path(tmp_path, "filter", 0).exists()  # nothing written beside it


def _whole_run_in_one_dict(run: Path) -> dict[str, JournalEntry]:
    """The reading `read_run_journal` replaced: every file into one dict, best entry per hash."""
    index: dict[str, JournalEntry] = {}
    root = run / "journal"
    paths = sorted(root.glob("*/part-*.jsonl"))
    for entry in [e for path in paths for e in ShardJournal(path).entries()]:
        current = index.get(entry.hash)
        if current is None or current.status != "ok" or entry.status == "ok":
            index[entry.hash] = entry
    return index


def test_streamed_run_journal_equals_reading_every_file_at_once(tmp_path: Path) -> None:
    """Several stages and shards, the same request in several files (success before and after a
    failure, failures only), repeats inside a file and a torn last line."""
    rng = random.Random(17)
    models = ("m", "other")
    histories: dict[str, list[str]] = {}
    for stage, shards in (("filter", 4), ("generate", 3), ("validate", 2)):
        for shard in range(shards):
            journal = ShardJournal(shard_journal_path(tmp_path, stage, shard))
            for n in range(60):
                h = f"h{rng.randrange(150)}"  # ~150 hashes over ~540 lines: many in several files
                status = rng.choice(("ok", "ok", "failed"))
                entry = _entry(h, status=status, raw=f"{stage}{shard}-{n}")
                entry.model = models[int(h[1:]) % 2]
                entry.usage = {"prompt_tokens": rng.randrange(1, 500), "completion_tokens": rng.randrange(9)}
                journal.put(entry)
                histories.setdefault(h, []).append(status)
            journal.close()
    with shard_journal_path(tmp_path, "generate", 1).open("a") as handle:
        handle.write('{"hash": "torn", "key": "k-torn", "ro')
    mixed = [h for h, seen in histories.items() if "ok" in seen and "failed" in seen]
    assert len(mixed) > 20 and any("ok" not in seen for seen in histories.values())

    expected = _whole_run_in_one_dict(tmp_path)
    streamed = list(read_run_journal(tmp_path))
    assert len(streamed) == len({e.hash for e in streamed}) == len(expected)
    assert {e.hash: asdict(e) for e in streamed} == {h: asdict(e) for h, e in expected.items()}
    totals = usage_totals(read_run_journal(tmp_path))
    assert totals == usage_totals(expected.values())
    assert sum(bucket["requests"] for bucket in totals.values()) == len(histories)


# ---------------------------------------------------------------------------------------------
# One shared test for every journal reader: each gets the same history of answers to one request
# (stored the way that backend stores it) and must return the same entry: a success if there
# ever was one, whatever came after it.

HISTORIES = {
    "success then failure": (["ok:YES", "failed:MAYBE"], "ok:YES"),
    "failure then success": (["failed:MAYBE", "ok:NO"], "ok:NO"),
    "failure, success, failure": (["failed:MAYBE", "ok:YES", "failed:PERHAPS"], "ok:YES"),
    "failures only": (["failed:MAYBE", "failed:PERHAPS"], "failed"),
}


def _history(steps: list[str]) -> list[JournalEntry]:
    entries = []
    for step in steps:
        status, raw = step.split(":")
        entries.append(_entry("h", status=status, raw=raw))
    return entries


def _jsonl(path: Path, entries: list[JournalEntry]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(asdict(e)) + "\n" for e in entries))


def _shard(run: Path, entries: list[JournalEntry], reopen: bool) -> ShardJournal:
    journal = ShardJournal(shard_journal_path(run, "filter", 0))
    for entry in entries:
        journal.put(entry)
    if not reopen:
        return journal
    journal.close()
    return ShardJournal(shard_journal_path(run, "filter", 0))


def _read_back(
    reader: str, run: Path, entries: list[JournalEntry]
) -> tuple[JournalEntry | None, list | None]:
    """What one reader over `entries` (written in order) gets for "h", and what it lists for "h"
    (None: its `entries()` are its own file's only, as a shard's usage is)."""
    root = run / "journal"
    first, rest = entries[:1], entries[1:]
    if reader == "shard, in memory":
        journal = _shard(run, entries, reopen=False)
    elif reader == "shard, reopened":
        journal = _shard(run, entries, reopen=True)
    else:  # the whole run, as the manifest's usage and `lenses` reports read it: two stages' files
        _jsonl(root / "generate" / "part-00000.jsonl", first)
        _shard(run, rest, reopen=False).close()
        listed = [e for e in read_run_journal(run) if e.hash == "h"]
        return (listed[0] if len(listed) == 1 else None), listed
    got, listed = journal.get("h"), [e for e in journal.entries() if e.hash == "h"]
    journal.close()
    return got, listed


READERS = (
    "shard, in memory",
    "shard, reopened",
    "whole run (read_run_journal)",
)


@pytest.mark.parametrize("history", HISTORIES)
def test_every_journal_reader_keeps_a_success_over_any_failure(tmp_path: Path, history: str) -> None:
    steps, expected = HISTORIES[history]
    seen = {}
    for number, reader in enumerate(READERS):
        got, listed = _read_back(reader, tmp_path / str(number), _history(steps))
        assert got is not None, reader
        assert listed is None or [e.status for e in listed] == [got.status], reader  # one entry per hash
        seen[reader] = got.status if got.status == "failed" else f"ok:{got.raw}"
    assert seen == dict.fromkeys(READERS, expected)


def test_rerun_replays_answers_and_reasks_failures(simulator, tmp_path: Path) -> None:
    requests = [
        ModelRequest(key=f"f{i}", role="filter", text="?", after_image_text=str(i), choice=["YES", "NO"])
        for i in range(20)
    ]
    parse = parse_choice(["YES", "NO"])
    path = shard_journal_path(tmp_path, "filter", 0)
    with simulator(faults={"schema_invalid": 0.3}, seed=9) as url:
        client = ModelClient.from_config(sim_models_config([url], max_reasks=0), journal_dir=path.parent)
        with client.shard_journal(path):
            first = client.run_sync(requests, parse)
        failed = {r.key for r in first if not r.ok}
        assert failed and all(r.error_code == codes.INVALID_CHOICE for r in first if not r.ok)
        calls_before = sim_stats(url)["total_calls"]
        with client.shard_journal(path):  # a rerun of the shard, e.g. after a crash
            second = client.run_sync(requests, parse)
        client.close()
        new_calls = sim_stats(url)["total_calls"] - calls_before
    assert new_calls == len(failed)  # only the failures were asked again
    assert [r.value for r in second if r.key not in failed] == [r.value for r in first if r.ok]
    assert all(r.cached for r in second if r.key not in failed)
    assert not any(r.cached for r in second if r.key in failed)


def test_simulated_answers_are_not_replayed_against_a_real_endpoint(tmp_path: Path) -> None:
    journal = ShardJournal(shard_journal_path(tmp_path, "filter", 0))
    journal.put(_entry("h", simulated=True))
    config = sim_models_config(["http://127.0.0.1:9/v1"])
    runtime = RoleRuntime(
        "filter",
        config.filter,
        pool=None,
        choice_style="structured_outputs",
        retry=config.retry,
        journal=journal,
        reuse_failed=False,
        rng=random.Random(0),
    )
    request = ModelRequest(key="k", role="filter", text="?", choice=["YES", "NO"])
    parse = parse_choice(["YES", "NO"])
    runtime.simulated_endpoint = False
    assert replay(runtime, request, parse, "h") is None
    runtime.simulated_endpoint = True
    replayed = replay(runtime, request, parse, "h")
    assert replayed is not None and replayed.ok and replayed.cached and replayed.simulated
    journal.close()


def test_fsync_group_commit_journals_every_answer(sim_url: str, tmp_path: Path) -> None:
    config = sim_models_config([sim_url], concurrency=32)
    config = config.model_copy(update={"journal": config.journal.model_copy(update={"fsync": True})})
    requests = [
        ModelRequest(key=f"g{i}", role="filter", text="?", after_image_text=str(i), choice=["YES", "NO"])
        for i in range(60)
    ]
    path = shard_journal_path(tmp_path, "filter", 0)
    client = ModelClient.from_config(config, journal_dir=path.parent)
    with client.shard_journal(path):
        results = client.run_sync(requests, parse_choice(["YES", "NO"]))
    client.close()
    journal = ShardJournal(path)
    stored = {e.key: e.raw for e in journal.entries()}
    journal.close()
    assert stored == {r.key: r.raw for r in results} and all(r.ok for r in results)


@pytest.mark.parametrize("count", [3, 4, 5])
def test_the_refusal_names_three_files_and_counts_the_rest(tmp_path: Path, count: int) -> None:
    root = tmp_path / "journal"
    names = [f"answers-1-{n}.jsonl" for n in range(count)]
    for name in names:
        _single_file_journal(root, name)
    with pytest.raises(RuntimeError) as refused:
        list(read_run_journal(tmp_path))
    shown = ", ".join(str(root / name) for name in sorted(names)[:3])
    more = f" and {count - 3} more" if count > 3 else ""
    assert str(refused.value) == (
        f"{shown}{more}: a single-file journal of a run made before per-shard journals "
        "(journal/<stage>/part-NNNNN.jsonl), which this version does not read. Finish that run with the "
        "version that started it, or move these files away to ask their requests again."
    )
