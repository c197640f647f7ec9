"""Durable response journal: every completed request is stored as it completes.

Keyed by the request hash (model id, rendered messages, image content hash, sampling, schema),
so a rerun replays answered requests instead of paying for them again, and a kill loses at most
the requests in flight plus the answers of the last few milliseconds (asked again on the rerun).

One journal file per stage and shard, `RUN/journal/<stage>/part-00042.jsonl`, written only by the
task that owns that shard: no file is ever written by two processes or two hosts, so the journal is
safe on NFS or Lustre (SQLite's WAL mode, used before, needs shared memory on one host). Entries are
appended as JSON lines; the client flushes them to the OS within a few milliseconds of the answer
(see committer.FlushingWriter), and `fsync=True` also survives power loss. A torn last
line (killed mid-write) is skipped, and a success is never overwritten by a later failure.

The single-file journals of runs made before per-shard journals (`RUN/journal/answers.sqlite`,
`RUN/journal/answers-*.jsonl`) are no longer read: a run directory holding one is refused with the
files named (`refuse_single_file_journal`), so its answers are never silently asked again.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np


@dataclass
class JournalEntry:
    hash: str
    key: str
    role: str
    model: str
    status: str  # "ok" | "failed"
    raw: str | None
    error_code: str | None = None
    error_message: str | None = None
    attempts: int = 0
    usage: dict[str, int] = field(default_factory=dict)
    simulated: bool = False
    created: float = field(default_factory=time.time)
    # The model as its server lists it (models/reuse.served_identity): an answer is reused from
    # another run only for the same served model. None: not known (older journals, or unlisted).
    served: str | None = None
    # Copied from another run's journal (models/reuse.py): that run and its journal file.
    source_run: str | None = None
    source_file: str | None = None
    # The request hashes of the request's parts (ModelRequest.parts), aligned with the answer's
    # array: element i is part i's answer (lenses_data.models.compose). None: not asked in parts.
    parts: list[str] | None = None


class Journal(Protocol):
    def get(self, request_hash: str) -> JournalEntry | None: ...

    def put(self, entry: JournalEntry) -> None: ...

    def put_many(self, entries: list[JournalEntry]) -> None: ...

    def entries(self) -> Iterator[JournalEntry]: ...

    def close(self) -> None: ...


def _prefer(current: JournalEntry | None, entry: JournalEntry) -> bool:
    """Whether `entry` should replace `current`: a success is never replaced by a failure."""
    return current is None or current.status != "ok" or entry.status == "ok"


def _load_jsonl(path: Path, index: dict[str, JournalEntry]) -> None:
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                entry = JournalEntry(**json.loads(line))
            except (json.JSONDecodeError, TypeError):
                continue  # torn write from a killed process
            if _prefer(index.get(entry.hash), entry):
                index[entry.hash] = entry


def _ends_torn(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() == 0:
            return False
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) != b"\n"


class ShardJournal:
    """The journal of one shard: one append-only JSON-lines file, owned by the task of that shard."""

    def __init__(self, path: Path, fsync: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fsync = fsync
        self._index: dict[str, JournalEntry] = {}
        if path.exists():
            _load_jsonl(path, self._index)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for appends
        if _ends_torn(path):  # a killed writer left half a line: end it, or the next entry joins it
            self._file.write("\n")
        self._lock = threading.Lock()
        self._buffer: list[str] = []

    def get(self, request_hash: str) -> JournalEntry | None:
        return self._index.get(request_hash)

    def put(self, entry: JournalEntry) -> None:
        self.put_many([entry])

    def put_many(self, entries: list[JournalEntry]) -> None:
        """Write and flush (and fsync, if asked): on return the entries survive a process kill."""
        self.append(entries)
        self.flush()

    def append(self, entries: list[JournalEntry]) -> None:
        """Index the entries and buffer their lines; they reach the file at the next `flush`."""
        lines = [_line(entry) for entry in entries]
        with self._lock:
            self._buffer.extend(lines)
            for entry in entries:
                if _prefer(self._index.get(entry.hash), entry):
                    self._index[entry.hash] = entry

    def flush(self) -> None:
        """Buffered lines to the OS in one write (whole lines only), then fsync if configured."""
        with self._lock:
            self._write_buffer()

    def _write_buffer(self) -> None:  # the caller holds the lock
        if not self._buffer:
            return
        if self._file.closed:  # say what is lost, not "I/O operation on closed file"
            raise RuntimeError(
                f"journal {self.path} is closed with {len(self._buffer)} answer(s) not written: "
                "they are asked again on a rerun"
            )
        text, self._buffer = "".join(self._buffer), []
        self._file.write(text)
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    def entries(self) -> Iterator[JournalEntry]:
        return iter(list(self._index.values()))

    def close(self) -> None:
        """Write what is buffered and close, in one step: no answer appended between the two is lost."""
        with self._lock:
            self._write_buffer()
            self._file.close()


def _line(entry: JournalEntry) -> str:
    # The entry's fields are flat JSON values (usage is str -> int): no deep copy (asdict) needed.
    return json.dumps(vars(entry), ensure_ascii=False) + "\n"


JOURNAL_DIR = "journal"


def shard_journal_path(run: str | os.PathLike[str], stage: str, shard: int) -> Path:
    """`RUN/journal/<stage>/part-00042.jsonl`: the one file the task of that shard writes."""
    return Path(run) / JOURNAL_DIR / stage / f"part-{shard:05d}.jsonl"


def _parse(line: str) -> JournalEntry | None:
    try:
        return JournalEntry(**json.loads(line))
    except (json.JSONDecodeError, TypeError):
        return None  # torn write from a killed process


def _run_sources(run: str | os.PathLike[str]) -> list[Callable[[], Iterator[JournalEntry]]]:
    """The run's entries as sources read in order: each shard file."""
    root = Path(run) / JOURNAL_DIR
    refuse_single_file_journal(root)

    def lines(path: Path) -> Iterator[JournalEntry]:
        with open(path, encoding="utf-8") as handle:
            yield from filter(None, map(_parse, handle))

    sources: list[Callable[[], Iterator[JournalEntry]]] = [
        partial(lines, path) for path in sorted(root.glob("*/part-*.jsonl"))
    ]
    return sources


def refuse_single_file_journal(root: Path) -> None:
    """Refuse a run whose journal predates per-shard journals: its answers would be asked again."""
    found = sorted(root.glob("answers-*.jsonl")) + sorted(root.glob("answers.sqlite"))
    if found:
        names = ", ".join(str(p) for p in found[:3]) + (
            f" and {len(found) - 3} more" if len(found) > 3 else ""
        )
        raise RuntimeError(
            f"{names}: a single-file journal of a run made before per-shard journals "
            f"({JOURNAL_DIR}/<stage>/part-NNNNN.jsonl), which this version does not read. Finish that run "
            "with the version that started it, or move these files away to ask their requests again."
        )


def _winners(sources: list[Callable[[], Iterator[JournalEntry]]]) -> tuple[np.ndarray, list[int]]:
    """Which entries (numbered in reading order) are their hash's best: the last success if there
    is one, else the last failure, as `_prefer` applied in reading order leaves it; and how many
    entries each source had. Only 16 bytes of digest and a flag are kept per entry, never the
    entries themselves."""
    import numpy as np

    digests, ok, counts = bytearray(), bytearray(), []
    for source in sources:
        before = len(ok)
        for entry in source():
            digests += hashlib.blake2b(entry.hash.encode(), digest_size=16).digest()
            ok.append(entry.status == "ok")
        counts.append(len(ok) - before)
    count = len(ok)
    keys = np.frombuffer(bytes(digests), dtype=">u8").reshape(count, 2)
    flags = np.frombuffer(bytes(ok), dtype=np.uint8)
    # Sorted by hash, then ok, then position: a hash's best entry is the last of its run.
    order = np.lexsort((np.arange(count), flags, keys[:, 1], keys[:, 0]))
    ranked = keys[order]
    last = np.ones(count, dtype=bool)
    last[:-1] = (ranked[1:] != ranked[:-1]).any(axis=1)
    winners = np.zeros(count, dtype=bool)
    winners[order[last]] = True
    return winners, counts


def read_run_journal(run: str | os.PathLike[str]) -> Iterator[JournalEntry]:
    """Every entry of a run: all per-shard files, one (best) entry per hash.

    Streamed: a first pass finds each hash's best entry, a second yields those entries file by
    file, so callers that aggregate (usage totals, `lenses plan`) hold one entry at a time. At 100k
    candidates the journal is ~220 MiB on disk, and holding every entry was most of export's peak.
    Entries come in reading order of each hash's best entry. Lines appended between the passes (a
    live run) are left for the next reading."""
    sources = _run_sources(run)
    winners, counts = _winners(sources)
    base = 0
    for source, count in zip(sources, counts, strict=True):
        for offset, entry in enumerate(islice(source(), count)):
            if winners[base + offset]:
                yield entry
        base += count


def usage_totals(journal: Journal | Iterable[JournalEntry]) -> dict[str, dict[str, int]]:
    """Token usage per model over a journal or a run's entries (cost accounting)."""
    totals: dict[str, dict[str, int]] = {}
    entries = journal.entries() if hasattr(journal, "entries") else journal
    for _ in tally_usage(entries, totals):
        pass
    return totals


def tally_usage(entries: Iterable[JournalEntry], totals: dict[str, dict[str, int]]) -> Iterator[JournalEntry]:
    """Pass the entries on, adding each one's usage to `totals` (per model): lets one reading of a
    run's journal feed both the usage totals and another aggregation (export's GPU-hour plan)."""
    for entry in entries:
        bucket = totals.setdefault(entry.model, {"requests": 0})
        bucket["requests"] += 1
        for name, count in entry.usage.items():
            bucket[name] = bucket.get(name, 0) + int(count)
        yield entry
