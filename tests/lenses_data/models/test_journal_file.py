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


def test_the_journal_is_utf8_whatever_the_locale(tmp_path: Path) -> None:
    """Answers in any script survive a process whose locale encoding is ASCII (a bare container's
    C locale with Python's UTF-8 mode and locale coercion off): the file is written and read as UTF-8."""
    import subprocess
    import sys

    script = (
        "import sys; from pathlib import Path\n"
        "from lenses_data.models.journal import JournalEntry, ShardJournal, read_run_journal, shard_journal_path\n"
        "run = Path(sys.argv[1]); raw = 'caf\\u00e9, \\u65e5\\u672c\\u8a9e, \\u2713'\n"  # ASCII argv
        "j = ShardJournal(shard_journal_path(run, 'filter', 0))\n"
        "j.put(JournalEntry(hash='h', key='k', role='filter', model='m', status='ok', raw=raw))\n"
        "j.close()\n"
        "assert [e.raw for e in read_run_journal(run)] == [raw]\n"
        "import locale; print(locale.getpreferredencoding(False))\n"
    )
    # The code under test, mutated or not (mutmut runs the tests from its own copy of the source).
    source_root = str(Path(journal_module.__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYTHONPATH": source_root,
        "LC_ALL": "C",
        "PYTHONUTF8": "0",
        "PYTHONCOERCECLOCALE": "0",
        "PYTHONIOENCODING": "utf-8",
    }
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "utf" not in done.stdout.lower()  # the process's locale really was not UTF-8
    raw = shard_journal_path(tmp_path, "filter", 0).read_bytes()
    assert "café, 日本語, ✓".encode() in raw  # written as UTF-8, not escaped
    # The same reader and writer in this process too (mutmut picks a mutant's tests by what they call
    # in-process; the child above runs the mutant it is told of through the inherited environment).
    ShardJournal(shard_journal_path(tmp_path, "filter", 0)).close()
    assert [entry.raw for entry in journal_module.read_run_journal(tmp_path)] == ["café, 日本語, ✓"]
