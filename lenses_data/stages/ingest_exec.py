"""Execution helpers of the ingest stage: bounded ordered maps and a restartable decode pool.

Kept apart from the stage logic so that the stage reads as "what happens to an image" and this
module as "how the work is spread over threads and processes".
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from lenses_data.candidates.imaging import DecodeLimits, decode_batch
from lenses_data.config.ingest import IngestConfig

DECODER_CRASHED = "decoder_crashed"
log = logging.getLogger("lenses_data.stages.ingest")  # progress lines come from the stage


def ordered(submit: Callable[[Any], Any], inputs: Iterable[Any], window: int) -> Iterator[Any]:
    """Map with at most `window` tasks in flight, results in input order.

    `submit` returns either a ready value or something with `.result()` (a future).
    """
    pending: deque = deque()
    for value in inputs:
        pending.append(submit(value))
        if len(pending) >= window:
            yield _resolve(pending.popleft())
    while pending:
        yield _resolve(pending.popleft())


def _resolve(value: Any) -> Any:
    return value.result() if hasattr(value, "result") else value


def batched(values: Iterable[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for value in values:
        batch.append(value)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def in_order(outcomes: list[dict]) -> list[dict]:
    return sorted(outcomes, key=lambda outcome: outcome["seq"])


DecodeFn = Callable[[list[dict], DecodeLimits, str], list[dict]]


def _context() -> Any:
    context = multiprocessing.get_context("forkserver")
    # scipy.fftpack (the pHash DCT) too: each worker would otherwise import it on its first image
    context.set_forkserver_preload(["lenses_data.candidates.imaging", "scipy.fftpack"])
    return context


def decode_workers(workers: int) -> int:
    """The decode processes this process may start: none inside a daemonic process.

    A Dask worker process is daemonic by default (`distributed.worker.daemon`), and a daemonic
    process may not have children: there, decoding runs inline (one worker) instead of failing
    the shard on every retry. Set `distributed.worker.daemon: false` on the cluster to decode in
    processes there too."""
    if workers > 1 and multiprocessing.current_process().daemon:
        log.warning(
            "ingest: running in a daemonic process (a Dask worker?): decoding inline, not in %d "
            "processes; set distributed.worker.daemon: false for decode processes",
            workers,
        )
        return 1
    return workers


def start_decoders(workers: int) -> None:
    """Start the fork server now, for a caller about to ingest with `workers` processes.

    The server imports Pillow, numpy and scipy.fftpack once for all decode processes (~0.3 s);
    started before the caller's own imports and source listing, that work overlaps them instead
    of delaying the first batch. A DecodePool started later forks from the same server.
    """
    if workers > 1 and not multiprocessing.current_process().daemon:
        from multiprocessing import forkserver

        _context()
        forkserver.ensure_running()


class DecodePool:
    """`decode_batch` in worker processes (or inline for one worker), surviving a dead worker.

    forkserver, not fork: the caller may run threads (flows, the download pool), and a forked
    child would inherit their locks. Workers preload Pillow through `lenses_data.candidates.imaging`.

    A dead worker breaks the whole pool, so every batch in flight fails with it. Those batches are
    redone image by image on a fresh pool: an image whose decode kills its process a second time is
    rejected as `decoder_crashed`; every other image is decoded normally.
    """

    def __init__(
        self, workers: int, limits: DecodeLimits, images_dir: str, decode: DecodeFn = decode_batch
    ) -> None:
        self.workers, self.limits, self.images_dir = decode_workers(workers), limits, images_dir
        self._decode = decode  # a module-level function: it is pickled to the worker processes
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> DecodePool:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=_context())
        return self._pool

    def _fresh_pool(self, broken: ProcessPoolExecutor | None) -> None:
        """Drop the pool if it is the broken one (several batches notice the same breakage)."""
        if broken is not None and broken is self._pool:
            log.warning("ingest: a decode process died; redoing its batches on a new pool")
            broken.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _submit_batch(self, tasks: list[dict]) -> tuple[Future, ProcessPoolExecutor]:
        pool = self._executor()
        try:
            return pool.submit(self._decode, tasks, self.limits, self.images_dir), pool
        except BrokenProcessPool:  # broke since the last submit: start a fresh pool
            self._fresh_pool(pool)
            pool = self._executor()
            return pool.submit(self._decode, tasks, self.limits, self.images_dir), pool

    def submit(self, ready: list[dict], tasks: list[dict]) -> Any:
        """Outcomes for `ready` (known already) plus decoded `tasks`, as a value or a future."""
        if not tasks:
            return ready
        if self.workers <= 1:
            return in_order(ready + self._decode(tasks, self.limits, self.images_dir))
        future, pool = self._submit_batch(tasks)
        return _Joined(self, ready, future, pool, tasks)

    def redo_one_by_one(self, broken: ProcessPoolExecutor, tasks: list[dict]) -> list[dict]:
        """Decode each task of a batch lost to a dead worker on its own, on a fresh pool."""
        self._fresh_pool(broken)
        outcomes = []
        for task in tasks:
            future, pool = self._submit_batch([task])
            try:
                outcomes.extend(future.result())
            except BrokenProcessPool as error:  # this image kills its decoder: reject it alone
                self._fresh_pool(pool)
                outcomes.append(_crashed(task, error))
        return outcomes


def _crashed(task: dict, error: BaseException) -> dict:
    return {
        "seq": task["seq"],
        "ok": False,
        "image_id": None,
        "reason": DECODER_CRASHED,
        "message": f"decoding this image killed its process twice ({error})",
    }


class _Joined:
    """Outcomes known before decoding plus a decode future, as one future-like result."""

    def __init__(
        self,
        owner: DecodePool,
        ready: list[dict],
        future: Future,
        pool: ProcessPoolExecutor,
        tasks: list[dict],
    ) -> None:
        self._owner, self._ready, self._future, self._pool, self._tasks = owner, ready, future, pool, tasks

    def result(self, timeout: float | None = None) -> list[dict]:
        try:
            decoded = self._future.result(timeout)
        except BrokenProcessPool:  # some decoder died: redo this batch image by image
            decoded = self._owner.redo_one_by_one(self._pool, self._tasks)
        return in_order(self._ready + decoded)


class LazyClient:
    """The HTTP client of URL sources, made by the first download that needs it: an ingest of
    local files never loads httpx (and httpcore, which pulls in trio when installed)."""

    def __init__(self, ingest_config: IngestConfig) -> None:
        self._config, self._client, self._lock = ingest_config, None, threading.Lock()

    def __enter__(self) -> LazyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._client is not None:
            self._client.close()

    def get(self) -> Any:
        with self._lock:  # downloads run in a thread pool
            if self._client is None:
                from lenses_data.candidates.fetch import make_client

                self._client = make_client(self._config)
            return self._client


class Progress:
    """Log progress every N images or every S seconds, whichever comes first."""

    def __init__(self, every_n: int, every_s: float, started: float) -> None:
        self.every_n, self.every_s, self.started = every_n, every_s, started
        self.done, self.last_n, self.last_t = 0, 0, started

    def tick(self, accepted: int, rejected: int) -> None:
        self.done += 1
        now = time.monotonic()
        if self.done - self.last_n >= self.every_n or now - self.last_t >= self.every_s:
            rate = self.done / max(now - self.started, 1e-9)
            log.info(
                "ingest: %d done (%d accepted, %d rejected), %.1f images/s",
                self.done,
                accepted,
                rejected,
                rate,
            )
            self.last_n, self.last_t = self.done, now
