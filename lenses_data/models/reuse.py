"""Answers reused across runs: earlier runs' journals as a read-only source of model answers.

`models.reuse_answers_from: [RUN_DIR, ...]` names earlier runs. Before a request is sent, the
client looks its key up in an `AnswerIndex` over every journal file of those runs for the stage
(`RUN/journal/<stage>/part-*.jsonl`), whatever shard wrote it: a shard that now holds other images
still finds its answers. A hit is not sent; it is copied into this run's journal with its source
(`source_run`, `source_file`), so the run stays whole if the source is deleted later.

The key is the journal's request hash (messages.request_hash: the model name sent, the whole body
with its sampling parameters and seed, the image as its content digest, the rendered prompt, the
output constraints) together with the served model as the server lists it (`served_identity`: its
id, and the weights' root or revision where the server reports them). The prompt template is in
the key as its rendering: a template edit that changes the text changes the key. Only successes
are indexed: a failure (server error, timeout, 4xx, an unusable answer) is asked again.

The index keeps 16 bytes of key and a file position per answer, not the answers (at 100k candidates
a stage's journal is hundreds of MiB); a hit reads its one line back. `AnswerIndex(dirs)` is public:
a `--rebuild-changed` adds the folders it moved a stage's journals to (`replaced_runs`), so a
rebuilt stage reuses its own earlier answers by the same key.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from lenses_data.io import REPLACED_DIR
from lenses_data.models import types as codes
from lenses_data.models.journal import JOURNAL_DIR, JournalEntry, refuse_single_file_journal


def served_identity(listing: Iterable[Any], model: str) -> str | None:
    """The served model as `GET /v1/models` lists it: id, and root/revision where reported.

    vLLM lists `root` (the weights it loaded: a hub id or a local snapshot path, which names the
    revision); a server that reports `revision` or a digest has it kept too. None: not listed."""
    wanted = {model, codes.SIMULATED_MODEL_PREFIX + model}
    for item in listing:
        data = item.model_dump() if hasattr(item, "model_dump") else dict(item)
        if str(data.get("id")) in wanted:
            fields = ("id", "root", "revision", "digest", "weights_digest")
            found = {name: str(data[name]) for name in fields if data.get(name) is not None}
            return json.dumps(found, sort_keys=True, separators=(",", ":"))
    return None


def reuse_key(request_hash: str, served: str | None) -> bytes:
    """16 bytes naming one answer across runs: the request and the model that served it."""
    text = f"{request_hash}\n{served or ''}"
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def stage_journal_files(runs: Sequence[str | os.PathLike[str]], stage: str | None) -> list[Path]:
    """The journal files of `runs` for `stage` (every stage when None), each run checked to exist."""
    from lenses_data.config import ConfigError

    files: list[Path] = []
    for run in runs:
        root = Path(run) / JOURNAL_DIR
        if not root.is_dir():
            raise ConfigError(
                f"models.reuse_answers_from: {run} has no journal ({root} is not a directory); "
                "name run directories of earlier builds"
            )
        refuse_single_file_journal(root)
        pattern = f"{stage}/part-*.jsonl" if stage else "*/part-*.jsonl"
        files += sorted(root.glob(pattern))
    return files


def replaced_runs(run: str | os.PathLike[str], stage: str) -> list[Path]:
    """The folders of run directory `run` where `--rebuild-changed` moved `stage`'s journals
    (`RUN/_replaced/<digest>/journal/<stage>/`, lenses_data.stages.rebuild), oldest move first: run
    directories in shape, so the rebuilt stage reuses their answers by request like any source's."""
    root = Path(run) / REPLACED_DIR
    if not root.is_dir():
        return []
    moved = [p for p in root.iterdir() if (p / JOURNAL_DIR / stage).is_dir()]
    return sorted(moved, key=lambda p: (p.stat().st_mtime_ns, p.name))


def check_sources(runs: Sequence[str | os.PathLike[str]]) -> None:
    """Raise `ConfigError` for a named source that is not a run directory with a journal, before
    any work (the index itself is built when a model stage opens its first shard)."""
    stage_journal_files(runs, stage="-")  # no stage is named "-": checks the folders, lists nothing


class AnswerIndex:
    """The successful answers of earlier runs' journals, found by request (see the module doc), and
    the elements of answers asked in parts, found by the part's request (`get_part`)."""

    def __init__(self, runs: Sequence[str | os.PathLike[str]], stage: str | None = None) -> None:
        self.runs = [str(Path(run).resolve()) for run in runs]
        self.stage = stage
        self.files = stage_journal_files(self.runs, stage)
        whole, parts = _KeyTable(), _KeyTable()
        for number, path in enumerate(self.files):
            for offset, entry in _successes(path):
                served = entry.get("served")
                whole.add(reuse_key(entry["hash"], served), number, offset, 0)
                for position, part in enumerate(entry.get("parts") or ()):
                    if isinstance(part, str):
                        parts.add(reuse_key(part, served), number, offset, position)
        self._whole, self._parts = whole.sorted(), parts.sorted()

    def __len__(self) -> int:
        return len(self._whole)

    def get(self, request_hash: str, served: str | None) -> JournalEntry | None:
        """The answer to this request by this served model, marked with its source; else None."""
        found = self._whole.find(reuse_key(request_hash, served))
        return None if found is None else self._entry(found[:2], request_hash, served)

    def get_part(self, part_hash: str, served: str | None) -> tuple[JournalEntry, int] | None:
        """An earlier answer holding the answer to this part (a request asked alone, or one part of
        a request asked in parts) by this served model, and the element's position; else None."""
        found = self._parts.find(reuse_key(part_hash, served))
        if found is not None:
            entry = self._entry(found[:2], None, served)
            if entry is not None and entry.parts and entry.parts[found[2]] == part_hash:
                return entry, found[2]
        alone = self.get(part_hash, served)
        return None if alone is None else (alone, 0)

    def _entry(
        self, where: tuple[int, int], request_hash: str | None, served: str | None
    ) -> JournalEntry | None:
        path = self.files[where[0]]
        entry = _read_entry(path, where[1])
        if entry is None or entry.status != "ok" or entry.served != served:
            return None  # the file changed under the index: ask instead
        if request_hash is not None and entry.hash != request_hash:
            return None
        return replace(entry, source_run=str(path.parents[2]), source_file=str(path))


class _KeyTable:
    """16-byte keys -> (file number, offset, position), sorted for binary search: a few dozen
    bytes per answer instead of the answer (at 100k candidates a stage's journal is ~100 MiB)."""

    def __init__(self) -> None:
        self._keys, self._rows = bytearray(), []

    def add(self, key: bytes, number: int, offset: int, position: int) -> None:
        self._keys += key
        self._rows.append((number, offset, position))

    def sorted(self) -> _KeyTable:
        pairs = np.frombuffer(bytes(self._keys), dtype=">u8").reshape(-1, 2)
        # Sorted by key, then reading order: of equal keys the last one read is found (as in a journal).
        order = np.lexsort((np.arange(len(self._rows)), pairs[:, 1], pairs[:, 0]))
        self._high, self._low = pairs[order, 0].copy(), pairs[order, 1].copy()
        self._where = np.array(self._rows, dtype=np.int64).reshape(-1, 3)[order]
        self._keys, self._rows = bytearray(), []
        return self

    def __len__(self) -> int:
        return len(self._high)

    def find(self, key: bytes) -> tuple[int, int, int] | None:
        wanted = np.frombuffer(key, dtype=">u8")
        start = int(np.searchsorted(self._high, wanted[0], side="left"))
        stop = int(np.searchsorted(self._high, wanted[0], side="right"))
        hits = [i for i in range(start, stop) if self._low[i] == wanted[1]]
        if not hits:
            return None
        number, offset, position = (int(v) for v in self._where[hits[-1]])
        return number, offset, position


def _successes(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(byte offset, entry) of each successful answer of a journal file; torn lines are skipped."""
    offset = 0
    with open(path, "rb") as handle:
        for line in handle:
            here, offset = offset, offset + len(line)
            try:
                data = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(data, dict) and data.get("status") == "ok" and isinstance(data.get("hash"), str):
                yield here, data


def _read_entry(path: Path, offset: int) -> JournalEntry | None:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return JournalEntry(**json.loads(handle.readline()))
    except (OSError, json.JSONDecodeError, TypeError, UnicodeDecodeError):
        return None


_CACHE: dict[tuple[tuple[str, ...], str | None], AnswerIndex] = {}
_CACHE_LOCK = threading.Lock()


def stage_index(runs: Sequence[str | os.PathLike[str]], stage: str) -> AnswerIndex:
    """One index per stage and process (a worker's shards share it), built on first use."""
    key = (tuple(str(Path(run).resolve()) for run in runs), stage)
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = AnswerIndex(list(key[0]), stage)
        return _CACHE[key]


def forget_indexes() -> None:
    """Drop the built indexes (tests, benchmarks: a source run that changed is read again)."""
    with _CACHE_LOCK:
        _CACHE.clear()
