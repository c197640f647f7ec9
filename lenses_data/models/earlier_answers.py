"""Answers a `--rebuild-changed` moved aside, found again by request: a rebuilt stage does not pay twice.

`lenses run --rebuild-changed` moves a changed stage's journals to
`RUN/_replaced/<digest>/journal/<stage>/part-*.jsonl` (lenses_data.stages.rebuild). When that stage
runs again, its shard journal looks up a request it has no answer for in those files, by request
hash over the whole stage (not by shard number: a shard may now hold other images), and copies a
success it finds into the new journal, so the rebuilt run's journal is whole and a later rerun
replays from it. A failure is never taken from there: it is asked again.

The index keeps only each hash's file and byte offset; an entry is read when it is asked for.
"""

from __future__ import annotations

import json
from pathlib import Path

from lenses_data.io import REPLACED_DIR
from lenses_data.models.journal import JOURNAL_DIR, JournalEntry


def earlier_journals(run: str | Path, stage: str) -> list[Path]:
    """The journals of `stage` moved aside by earlier rebuilds, oldest move first."""
    root = Path(run) / REPLACED_DIR
    if not root.is_dir():
        return []
    folders = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: (p.stat().st_mtime_ns, p.name))
    return [
        path for folder in folders for path in sorted((folder / JOURNAL_DIR / stage).glob("part-*.jsonl"))
    ]


class EarlierAnswers:
    """Successful answers of some journal files, by request hash (a later file's answer wins)."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self._where: dict[str, tuple[int, int]] = {}
        self.reused = 0  # answers handed out (each copied into a new journal once)
        for number, path in enumerate(paths):
            self._index(number, path)

    def _index(self, number: int, path: Path) -> None:
        offset = 0
        with open(path, "rb") as handle:
            for line in handle:
                try:
                    entry = json.loads(line)
                    if entry["status"] == "ok":
                        self._where[entry["hash"]] = (number, offset)
                except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
                    pass  # a torn last line of a killed writer
                offset += len(line)

    def __len__(self) -> int:
        return len(self._where)

    def get(self, request_hash: str) -> JournalEntry | None:
        where = self._where.get(request_hash)
        if where is None:
            return None
        number, offset = where
        with open(self.paths[number], "rb") as handle:
            handle.seek(offset)
            entry = JournalEntry(**json.loads(handle.readline()))
        self.reused += 1
        return entry


def earlier_answers(run: str | Path, stage: str) -> EarlierAnswers | None:
    """The moved-aside answers of `stage` in run directory `run`; None when there are none."""
    paths = earlier_journals(run, stage)
    return EarlierAnswers(paths) if paths else None
