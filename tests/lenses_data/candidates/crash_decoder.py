"""A decode function for the crash-isolation test: it kills its own worker process (SIGKILL, as
the kernel's OOM killer or a segfaulting codec would) when a batch holds a file named *poison*;
otherwise it is the production `decode_batch`. Module-level, so the decode pool can pickle it."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from lenses_data.candidates.imaging import DecodeLimits, decode_batch


def decode_or_die(tasks: list[dict[str, Any]], limits: DecodeLimits, images_dir: str | None) -> list[dict]:
    if any("poison" in str(task.get("path", "")) for task in tasks):
        time.sleep(0.2)  # let the other batches get in flight first
        os.kill(os.getpid(), signal.SIGKILL)
    return decode_batch(tasks, limits, images_dir)
