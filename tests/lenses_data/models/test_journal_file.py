"""The shard journal's file, byte for byte: reopening adds nothing to a whole file and ends a torn
last line; `fsync=True` syncs every write and the default none; a late answer names the file it
could not reach. Written against the survivors of `make mutation MODULE=lenses_data/models/journal.py`
(docs/testing.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lenses_data.models import journal as journal_module
from lenses_data.models.journal import JournalEntry, ShardJournal, shard_journal_path


def _entry(h: str) -> JournalEntry:
    return JournalEntry(hash=h, key=f"k-{h}", role="filter", model="m", status="ok", raw="YES", created=1.0)


def _lines_of(tmp_path: Path, *hashes: str) -> bytes:
    """The exact bytes a fresh journal writes for these entries."""
    scratch = ShardJournal(tmp_path / "scratch" / "part-00000.jsonl")
    scratch.put_many([_entry(h) for h in hashes])
    scratch.close()
    return scratch.path.read_bytes()


def test_reopening_a_whole_journal_adds_nothing_and_a_torn_one_gets_its_line_ended(tmp_path: Path) -> None:
    path = shard_journal_path(tmp_path, "filter", 0)
    journal = ShardJournal(path)
    journal.put_many([_entry("alpha"), _entry("beta")])
    journal.close()
    whole = path.read_bytes()
    for _ in range(2):  # reopened twice, nothing written: the file is as it was
        ShardJournal(path).close()
    assert path.read_bytes() == whole
    reopened = ShardJournal(path)
    reopened.put(_entry("gamma"))
    reopened.close()
    assert path.read_bytes() == whole + _lines_of(tmp_path / "g", "gamma")

    torn = b'{"hash": "delta", "key": "k-d'
    with open(path, "ab") as handle:
        handle.write(torn)  # killed mid-write
    before = path.read_bytes()
    after_kill = ShardJournal(path)
    after_kill.put(_entry("epsilon"))
    after_kill.close()
    assert path.read_bytes() == before + b"\n" + _lines_of(tmp_path / "e", "epsilon")
    assert sorted(entry.hash for entry in ShardJournal(path).entries()) == [
        "alpha",
        "beta",
        "epsilon",
        "gamma",
    ]


@pytest.mark.parametrize("fsync", [True, False, None])
def test_fsync_syncs_every_write_when_asked_and_never_by_default(tmp_path: Path, monkeypatch, fsync) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(journal_module.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    path = shard_journal_path(tmp_path, "filter", 0)
    journal = ShardJournal(path) if fsync is None else ShardJournal(path, fsync=fsync)
    journal.put(_entry("a"))
    journal.put_many([_entry("b"), _entry("c")])
    fileno = journal._file.fileno()
    journal.close()
    assert synced == ([fileno, fileno] if fsync else [])


def test_an_answer_too_late_for_a_closed_journal_names_the_file_and_what_happens(tmp_path: Path) -> None:
    path = shard_journal_path(tmp_path, "validate", 3)
    journal = ShardJournal(path)
    journal.close()
    journal.append([_entry("late"), _entry("later")])
    with pytest.raises(RuntimeError) as lost:
        journal.flush()
    assert str(lost.value) == (
        f"journal {path} is closed with 2 answer(s) not written: they are asked again on a rerun"
    )
