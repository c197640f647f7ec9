"""Progress of a long batch: done/total, rate, failures and cache hits, logged at intervals."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

log = logging.getLogger("lenses_data.models")

SIMULATED_BANNER = (
    "!!! SIMULATED ANSWERS: {n} model answers came from the lenses simulator, not a real model. "
    "Outputs of this run are for testing only. !!!"
)


@dataclass
class Progress:
    total: int
    interval_s: float = 30.0
    done: int = 0
    failed: int = 0
    cached: int = 0
    simulated: int = 0
    calls: int = 0
    started: float = field(default_factory=time.monotonic)

    def record(self, ok: bool, cached: bool, simulated: bool, calls: int) -> None:
        self.done += 1
        self.failed += 0 if ok else 1
        self.cached += 1 if cached else 0
        self.simulated += 1 if simulated else 0
        self.calls += calls

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return (
            f"model requests {self.done}/{self.total} ({self.done / elapsed:.1f}/s), "
            f"failed {self.failed}, from journal {self.cached}, calls {self.calls}, {elapsed:.0f}s"
        )

    async def log_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            log.info(self.line())

    def finish(self) -> None:
        # The loud SIMULATED banner is logged once per stage by its runner (see `simulated_banner`),
        # not once per batch: here the count is part of the progress line.
        suffix = f", simulated {self.simulated}" if self.simulated else ""
        log.info("done: " + self.line() + suffix)


def simulated_banner(simulated: int) -> str:
    return SIMULATED_BANNER.format(n=simulated)


@contextlib.asynccontextmanager
async def reporting(progress: Progress):
    task = asyncio.create_task(progress.log_periodically())
    try:
        yield progress
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        progress.finish()
