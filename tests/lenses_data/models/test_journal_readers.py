"""Reading journals back: which answer a rerun replays, and what a run's journal holds.

The invariants: a request answered in this shard replays this shard's answer; an older run's journal
(SQLite or JSON lines) reads back every field it stored and is never written; a run's journal holds
exactly one entry per request hash, its success when it has one, and nothing appended after the
reading began. Written against the survivors of `make mutation MODULE=lenses_data/models/journal.py`
(docs/testing.md).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict
from pathlib import Path

import pytest

from lenses_data.models.journal import (
    JournalEntry,
    LegacyJournal,
    ShardJournal,
    read_run_journal,
    shard_journal_path,
)
from tests.lenses_data.models.test_journal import _legacy_sqlite


def _entry(h: str, status: str = "ok", raw: str | None = "YES", **fields) -> JournalEntry:
    return JournalEntry(hash=h, key=f"k-{h}", role="filter", model="m", status=status, raw=raw, **fields)


@pytest.mark.parametrize(
    ("here", "older", "replayed"),
    [
        ("ok", "ok", "here"),
        ("ok", "failed", "here"),
        ("failed", "ok", "older"),
        ("failed", "failed", "here"),
        (None, "ok", "older"),
        (None, "failed", "older"),
        ("ok", None, "here"),
    ],
)
def test_a_shard_replays_its_own_answer_and_an_older_runs_only_where_it_is_better(
    tmp_path: Path, here, older, replayed
) -> None:
    root = tmp_path / "journal"
    _legacy_sqlite(root, [_entry("h", older, raw="OLDER")] if older else [_entry("other")])
    shard = ShardJournal(shard_journal_path(tmp_path, "filter", 0), fallback=[LegacyJournal(root)])
    if here:
        shard.put(_entry("h", here, raw="HERE"))
    got = shard.get("h")
    assert (got.raw, got.status) == ({"here": ("HERE", here), "older": ("OLDER", older)}[replayed])
    shard.close()


def test_an_older_runs_sqlite_journal_reads_back_every_field(tmp_path: Path) -> None:
    root = tmp_path / "journal"
    written = [
        _entry("a", usage={"prompt_tokens": 7, "completion_tokens": 2}, simulated=True, attempts=2),
        _entry("b", "failed", raw=None, error_code="invalid_json", error_message="cut", attempts=3),
    ]
    _legacy_sqlite(root, written)
    with sqlite3.connect(root / "answers.sqlite") as db:  # the oldest rows: no usage recorded
        db.execute("INSERT INTO answers VALUES ('c','k-c','filter','m','ok','NO',NULL,NULL,1,NULL,0,5.0)")
    db.close()
    legacy = LegacyJournal(root)
    assert legacy  # it has entries
    read = {entry.hash: asdict(entry) for entry in legacy.entries()}
    expected = {entry.hash: asdict(entry) for entry in written}
    expected["c"] = asdict(_entry("c", raw="NO", attempts=1, created=5.0))
    assert read == expected
    assert type(read["a"]["simulated"]) is bool and type(read["c"]["simulated"]) is bool
    assert not LegacyJournal(tmp_path / "empty")


def test_an_older_runs_journal_is_never_written(tmp_path: Path) -> None:
    root = tmp_path / "journal"
    _legacy_sqlite(root, [_entry("a")])
    legacy = LegacyJournal(root)
    for write in (lambda: legacy.put(_entry("b")), lambda: legacy.put_many([_entry("b")])):
        with pytest.raises(TypeError, match="^legacy journals are read-only$"):
            write()
    assert [entry.hash for entry in LegacyJournal(root).entries()] == ["a"]


def test_a_run_journal_reads_an_older_runs_json_lines_journal(tmp_path: Path) -> None:
    root = tmp_path / "journal"
    root.mkdir()
    older = [_entry("old-1"), _entry("old-2", "failed")]
    (root / "answers-1-1.jsonl").write_text("".join(json.dumps(asdict(e)) + "\n" for e in older))
    shard = ShardJournal(shard_journal_path(tmp_path, "filter", 0))
    shard.put(_entry("old-2", raw="AGAIN"))
    shard.close()
    read = {entry.hash: (entry.status, entry.raw) for entry in read_run_journal(tmp_path)}
    assert read == {"old-1": ("ok", "YES"), "old-2": ("ok", "AGAIN")}


def test_every_hash_is_read_once_as_its_success_over_thousands_of_hashes(tmp_path: Path) -> None:
    """Each hash failed in one shard and answered in another (or only failed): the run's journal has
    one entry per hash, the success where there is one. Thousands of hashes, so the 128-bit digests
    take every bit pattern the winner search must group correctly."""
    hashes = [f"request-{n}" for n in range(5000)]
    first = ShardJournal(shard_journal_path(tmp_path, "filter", 0))
    first.put_many([_entry(h, "failed", raw="FAILED") for h in hashes])
    first.close()
    second = ShardJournal(shard_journal_path(tmp_path, "filter", 1))
    second.put_many([_entry(h, raw=f"ANSWER {h}") for h in hashes[::2]])
    second.close()
    read = [(entry.hash, entry.status, entry.raw) for entry in read_run_journal(tmp_path)]
    assert len(read) == len({h for h, _, _ in read}) == len(hashes)
    assert sorted(read) == sorted(
        (h, "ok", f"ANSWER {h}") if n % 2 == 0 else (h, "failed", "FAILED") for n, h in enumerate(hashes)
    )


def test_lines_appended_while_a_run_journal_is_read_are_left_for_the_next_reading(tmp_path: Path) -> None:
    journal = ShardJournal(shard_journal_path(tmp_path, "filter", 0))
    journal.put_many([_entry("a"), _entry("b")])
    reading = read_run_journal(tmp_path)
    assert next(reading).hash == "a"  # the first pass is done: the run's lines are counted
    journal.put(_entry("late"))  # a live run answers one more request
    assert [entry.hash for entry in reading] == ["b"]
    journal.close()
    assert [entry.hash for entry in read_run_journal(tmp_path)] == ["a", "b", "late"]
