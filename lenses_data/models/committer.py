"""How the client writes answers to a shard's journal.

`FlushingWriter` (no fsync, the default): each answer is indexed and buffered at once, and the
buffer goes to the OS in one write at most `delay_s` later or every `max_pending` answers. A
SIGKILL loses only the buffered answers (at most `delay_s` worth, at most `max_pending`): the rerun
asks those again; no answer can have been used, since a shard's output is written only after its
batch has returned and the journal was flushed.

`GroupCommitter` (fsync): writes run on one thread, and whatever arrives while a commit (and its
fsync) is in progress goes into the next one. Each `put` returns only once its entry is durable,
so "answered" means "on disk", at one fsync per batch instead of one per answer, and the event
loop never blocks on the disk."""

from __future__ import annotations

import asyncio
import threading

from lenses_data.models.journal import Journal, JournalEntry, ShardJournal


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


class GroupCommitter:
    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._changed = threading.Condition()
        self._pending: list[tuple[JournalEntry, asyncio.Future[None], asyncio.AbstractEventLoop]] = []
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="journal-commit", daemon=True)
        self._thread.start()

    async def put(self, entry: JournalEntry) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._changed:
            if self._closed:
                raise RuntimeError("journal committer is closed")
            self._pending.append((entry, future, loop))
            self._changed.notify()
        await future

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._pending and not self._closed:
                    self._changed.wait()
                if not self._pending:
                    return
                batch, self._pending = self._pending, []
            error: BaseException | None = None
            try:
                self._journal.put_many([entry for entry, _, _ in batch])
            except Exception as exc:  # surfaced to every waiting put, never swallowed
                error = exc
            for _, future, loop in batch:
                loop.call_soon_threadsafe(_settle, future, error)

    def close(self) -> None:
        """Commit what is pending, then stop the thread."""
        with self._changed:
            self._closed = True
            self._changed.notify()
        self._thread.join()


class FlushingWriter:
    """Buffered journal writes from the event loop, flushed within `delay_s` (see module doc)."""

    def __init__(self, journal: ShardJournal, delay_s: float = 0.005, max_pending: int = 64) -> None:
        self._journal = journal
        self._delay_s = delay_s
        self._max_pending = max_pending
        self._pending = 0
        self._timer: asyncio.TimerHandle | None = None

    async def put(self, entry: JournalEntry) -> None:
        self._journal.append([entry])
        self._pending += 1
        if self._pending >= self._max_pending:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._delay_s, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pending = 0
        self._journal.flush()

    def close(self) -> None:
        self.flush()
