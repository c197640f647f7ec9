"""One build per run directory at a time: an advisory lock held by the coordinating process.

`flock` on `RUN/.lenses-run.lock`: taking it is one atomic system call (no check-then-act), the
kernel releases it the moment the holder dies (so a dead run's lock is taken over by the next run
without any staleness guess), and on Linux NFS clients it is carried by the NFS lock manager, so
two hosts sharing the run directory exclude each other too. The lock file itself is never deleted:
deleting it while another process waits on it would let two runs hold "the" lock at once.

Who holds it (host, pid, flow-run id, start time) is written next to it after the lock is taken,
so the refused run can say which run is using the directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lenses_data import io

LOCK_NAME = ".lenses-run.lock"
OWNER_NAME = ".lenses-run.owner.json"


class RunDirectoryInUse(RuntimeError):
    """Another live run holds the run directory."""

    def __init__(self, run_dir: Path, owner: dict[str, Any] | None) -> None:
        self.run_dir = run_dir
        self.owner = owner or {}
        if owner:
            who = (
                f"host {owner.get('host')}, pid {owner.get('pid')}, "
                f"flow run {owner.get('flow_run_id') or '-'}, started {owner.get('started')}"
            )
        else:
            who = "owner details not written yet"
        super().__init__(
            f"run directory {run_dir} is in use by a live run ({who}). Wait for it to finish, "
            "or use another run_dir."
        )


def read_owner(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    try:
        return json.loads((Path(run_dir) / OWNER_NAME).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


@contextlib.contextmanager
def run_directory_lock(run_dir: str | os.PathLike[str], flow_run_id: str | None = None) -> Iterator[None]:
    """Hold the run directory for the block, or raise `RunDirectoryInUse` at once."""
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    handle = open(run / LOCK_NAME, "a+b")  # noqa: SIM115 - the lock lives as long as this handle
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirectoryInUse(run, read_owner(run)) from None
        owner = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "flow_run_id": flow_run_id,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        io.atomic_write_json(run / OWNER_NAME, owner)
        try:
            yield
        finally:
            # Only while still holding the lock: the owner file then never names the next holder.
            with contextlib.suppress(FileNotFoundError):
                if read_owner(run) == json.loads(json.dumps(owner)):
                    (run / OWNER_NAME).unlink()
    finally:
        handle.close()  # releases the flock


def ensure_run_directory_free(run_dir: str | os.PathLike[str]) -> None:
    """Raise `RunDirectoryInUse` now if a live run holds the directory (a courtesy check before a
    flow starts, so the refusal is one clear line; the flow itself still takes the lock)."""
    run = Path(run_dir)
    if not (run / LOCK_NAME).exists():
        return
    with open(run / LOCK_NAME, "a+b") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirectoryInUse(run, read_owner(run)) from None
