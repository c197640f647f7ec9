"""Who watches the stages of a flow run in this process (e.g. `lenses run`'s progress display).

A flow's parameters must be plain data, so an observer cannot be passed as one; the caller of
a flow registers it here for the duration of the call instead. Deployed runs register none.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from lenses_data.stages.base import ShardStats, StageObserver

_lock = threading.Lock()
_observers: list[StageObserver] = []


@contextlib.contextmanager
def observing(observer: StageObserver) -> Iterator[StageObserver]:
    with _lock:
        _observers.append(observer)
    try:
        yield observer
    finally:
        with _lock:
            _observers.remove(observer)


class Broadcast:
    """A StageObserver that tells every registered observer (none: does nothing)."""

    def stage_started(self, stage: str, shards: int) -> None:
        for observer in _current():
            observer.stage_started(stage, shards)

    def shard_finished(self, stage: str, stats: ShardStats) -> None:
        for observer in _current():
            observer.shard_finished(stage, stats)

    def stage_finished(self, summary: dict[str, Any]) -> None:
        for observer in _current():
            observer.stage_finished(summary)


def _current() -> list[StageObserver]:
    with _lock:
        return list(_observers)
