"""Reading journals back: which answer a rerun replays, and what a run's journal holds.

The invariants: a run's journal holds exactly one entry per request hash, its success when it has
one, and nothing appended after the reading began. (The single-file journals of older versions are
refused, not read: tests/lenses_data/models/test_journal.py.) Written against the survivors of `make mutation MODULE=lenses_data/models/journal.py`
(docs/testing.md).
"""

from __future__ import annotations

from pathlib import Path

from lenses_data.models.journal import JournalEntry, ShardJournal, read_run_journal, shard_journal_path


def _entry(h: str, status: str = "ok", raw: str | None = "YES", **fields) -> JournalEntry:
    return JournalEntry(hash=h, key=f"k-{h}", role="filter", model="m", status=status, raw=raw, **fields)


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
