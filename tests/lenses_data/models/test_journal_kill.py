"""The journal survives a SIGKILL mid-batch: a rerun sends no request that was already answered."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lenses_data.models.journal import ShardJournal
from lenses_data.simulator.testing import sim_stats

WORKER = Path(__file__).with_name("journal_worker.py")
N = 240


def _journaled(journal_file: Path) -> int:
    return len(journal_file.read_text().splitlines()) if journal_file.exists() else 0


def _worker(url: str, journal_file: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])}
    args = [sys.executable, str(WORKER), url, str(journal_file), str(N)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_kill_mid_batch_then_rerun_sends_nothing_twice(simulator, tmp_path: Path) -> None:
    journal_file = tmp_path / "journal" / "filter" / "part-00000.jsonl"
    with simulator(latency_s=0.03) as url:
        first = _worker(url, journal_file)
        deadline = time.monotonic() + 60
        while _journaled(journal_file) < N // 4:
            assert first.poll() is None, f"worker ended before the kill: {first.communicate()}"
            assert time.monotonic() < deadline, "worker made no progress"
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        time.sleep(0.2)  # let requests the dead worker had in flight reach the simulator
        before = sim_stats(url)
        journal = ShardJournal(journal_file)
        answered = {e.key for e in journal.entries() if e.status == "ok"}
        journal.close()
        assert N // 4 <= len(answered) < N, "the kill must land mid-batch"

        second = _worker(url, journal_file)
        out, err = second.communicate(timeout=120)
        assert second.returncode == 0, err
        after = sim_stats(url)

    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["n"] == N and summary["ok"] == N
    assert summary["keys"] == [f"filter:{i:05d}" for i in range(N)]
    assert summary["cached"] == len(answered)
    calls_by_key_before = {before["keys"][h]: c for h, c in before["calls"].items()}
    calls_by_key_after = {after["keys"][h]: c for h, c in after["calls"].items()}
    # Answered before the kill => not sent again; the rerun sent exactly the unanswered ones.
    assert all(calls_by_key_after[key] == calls_by_key_before[key] for key in answered)
    assert after["total_calls"] - before["total_calls"] == N - len(answered)
    assert set(calls_by_key_after) == {f"filter:{i:05d}" for i in range(N)}
