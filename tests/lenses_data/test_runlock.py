"""One live run per run directory: the flock is taken atomically, refused runs name the holder, and
a dead holder's lock is taken over at once (the kernel releases it with the process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lenses_data.runlock import RunDirectoryInUse, read_owner, run_directory_lock

REPO_ROOT = Path(__file__).resolve().parents[2]

# A contender: waits for a common start time, tries the lock, holds it briefly, reports.
CONTENDER = """
import json, sys, time
from lenses_data.runlock import RunDirectoryInUse, run_directory_lock
run, start, hold = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
while time.time() < start:
    pass
try:
    with run_directory_lock(run, flow_run_id=f"fr-{sys.argv[4]}"):
        time.sleep(hold)
        print(json.dumps({"won": True}))
except RunDirectoryInUse as error:
    print(json.dumps({"won": False, "message": str(error), "owner": error.owner}))
"""


def _contender(run: Path, start: float, hold: float, name: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    args = [sys.executable, "-c", CONTENDER, str(run), str(start), str(hold), name]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_exactly_one_of_many_simultaneous_runs_holds_the_directory(tmp_path: Path) -> None:
    for round_number in range(3):
        run = tmp_path / f"run-{round_number}"
        start = time.time() + 1.5  # every contender is started and spinning before this instant
        procs = [_contender(run, start, 1.0, str(i)) for i in range(6)]
        reports = []
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            reports.append(json.loads(out))
        winners = [r for r in reports if r["won"]]
        assert len(winners) == 1, reports
        for loser in (r for r in reports if not r["won"]):
            assert "is in use by a live run" in loser["message"] and str(run) in loser["message"]
        assert read_owner(run) is None  # the winner removed its owner record on the way out


def test_refusal_names_host_pid_and_flow_run(tmp_path: Path) -> None:
    with run_directory_lock(tmp_path, flow_run_id="abc-123"):
        with pytest.raises(RunDirectoryInUse) as refused:
            with run_directory_lock(tmp_path):
                pass
    message = str(refused.value)
    assert f"pid {os.getpid()}" in message and "flow run abc-123" in message
    with run_directory_lock(tmp_path):  # released on exit
        assert read_owner(tmp_path)["pid"] == os.getpid()


def test_a_dead_runs_lock_is_taken_over(tmp_path: Path) -> None:
    holder = _contender(tmp_path, time.time(), 600.0, "dead")
    deadline = time.monotonic() + 30
    while read_owner(tmp_path) is None:
        assert time.monotonic() < deadline and holder.poll() is None
        time.sleep(0.05)
    with pytest.raises(RunDirectoryInUse):
        with run_directory_lock(tmp_path):
            pass
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    assert read_owner(tmp_path)["flow_run_id"] == "fr-dead"  # its stale record is still there
    with run_directory_lock(tmp_path, flow_run_id="next"):
        assert read_owner(tmp_path)["flow_run_id"] == "next"
