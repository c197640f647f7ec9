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

from lenses_data.runlock import RunDirectoryInUse, ensure_run_directory_free, read_owner, run_directory_lock

REPO_ROOT = Path(__file__).resolve().parents[2]

# A contender: says it is ready, waits for the `go` file, tries the lock, and (if it won) holds it
# until the `release` file appears, so every other contender meets a held lock whatever the load.
CONTENDER = """
import json, os, sys, time
from lenses_data.runlock import RunDirectoryInUse, run_directory_lock
run, gate, name = sys.argv[1], sys.argv[2], sys.argv[3]
print("ready", flush=True)
while not os.path.exists(gate + ".go"):
    pass
try:
    with run_directory_lock(run, flow_run_id=f"fr-{name}"):
        while not os.path.exists(gate + ".release"):
            time.sleep(0.01)
        print(json.dumps({"won": True}), flush=True)
except RunDirectoryInUse as error:
    print(json.dumps({"won": False, "message": str(error), "owner": error.owner}), flush=True)
"""


def _contender(run: Path, gate: Path, name: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    args = [sys.executable, "-c", CONTENDER, str(run), str(gate), name]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_exactly_one_of_many_simultaneous_runs_holds_the_directory(tmp_path: Path) -> None:
    for round_number in range(3):
        run, gate = tmp_path / f"run-{round_number}", tmp_path / f"gate-{round_number}"
        procs = [_contender(run, gate, str(i)) for i in range(6)]
        for proc in procs:  # every contender has imported everything and is spinning on the gate
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        Path(f"{gate}.go").touch()
        deadline = time.monotonic() + 60
        while sum(proc.poll() is not None for proc in procs) < len(procs) - 1:  # the refused exit at once
            assert time.monotonic() < deadline, "contenders neither won nor were refused"
            time.sleep(0.02)
        Path(f"{gate}.release").touch()
        reports = []
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            reports += [json.loads(line) for line in out.splitlines() if line.strip()]
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
    Path(f"{tmp_path / 'gate'}.go").touch()
    holder = _contender(tmp_path, tmp_path / "gate", "dead")
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


def _expected_refusal(run: Path, owner: dict) -> str:
    who = f"host {owner['host']}, pid {owner['pid']}, flow run {owner['flow_run_id'] or '-'}, started {owner['started']}"
    return (
        f"run directory {run} is in use by a live run ({who}). Wait for it to finish, or use another run_dir."
    )


@pytest.mark.parametrize("flow_run_id", ["fr-7", None])
def test_the_courtesy_check_refuses_a_held_directory_naming_its_owner_record(
    tmp_path: Path, flow_run_id
) -> None:
    """`ensure_run_directory_free` (lenses run's check before a flow starts): a held directory is
    refused with the holder's own record, word for word; a free one, or one never used, passes and
    is left free (the check never keeps the lock)."""
    never_used = tmp_path / "never-used"
    ensure_run_directory_free(never_used)
    assert not never_used.exists()  # the check creates nothing
    run = tmp_path / "run"
    with run_directory_lock(run, flow_run_id=flow_run_id):
        owner = read_owner(run)
        with pytest.raises(RunDirectoryInUse) as refused:
            ensure_run_directory_free(run)
    assert refused.value.run_dir == run and refused.value.owner == owner
    assert str(refused.value) == _expected_refusal(run, owner)
    ensure_run_directory_free(run)  # released: free again, and the check holds nothing after it
    with run_directory_lock(run, flow_run_id="next"):
        assert read_owner(run)["flow_run_id"] == "next"


def test_a_refusal_before_the_owner_record_is_written_says_so(tmp_path: Path) -> None:
    refused = RunDirectoryInUse(tmp_path, None)
    assert refused.owner == {}
    assert str(refused) == (
        f"run directory {tmp_path} is in use by a live run (owner details not written yet). "
        "Wait for it to finish, or use another run_dir."
    )
