"""`lenses serve` keeps its replicas up: a replica that dies is restarted on its port with backoff and
a count, one that keeps dying is given up (the rest keep serving; none left: exit 1), and SIGTERM
stops every replica. The replicas are a stand-in for vLLM (fake_vllm/) that starts in milliseconds."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from lenses_data.models.serve import Replica
from lenses_data.models.supervise import RestartPolicy, Supervisor
from lenses_data.simulator.simulator import free_port
from tests.support.serve_cli import lenses_serve_command

FAKE_VLLM = Path(__file__).parent / "fake_vllm"
SERVER = FAKE_VLLM / "vllm" / "entrypoints" / "openai" / "api_server.py"
REPO = Path(__file__).resolve().parents[3]
FAST = RestartPolicy(max_restarts=2, backoff_base_s=0.05, backoff_max_s=0.2, health_timeout_s=30)
WAIT_S = 30.0


def _replica(*extra: str) -> Replica:
    port = free_port()
    return Replica([0], port, [sys.executable, str(SERVER), "--port", str(port), *extra])


def _pid(replica: Replica) -> int:
    return int(httpx.get(f"http://127.0.0.1:{replica.port}/pid", timeout=5).text)


class Lines(list):
    def wait_for(self, text: str, count: int = 1) -> None:
        deadline = time.monotonic() + WAIT_S
        while sum(text in line for line in list(self)) < count:
            assert time.monotonic() < deadline, f"no {text!r} (x{count}) in {list(self)}"
            time.sleep(0.02)


@contextlib.contextmanager
def _supervising(replicas: list[Replica], policy: RestartPolicy = FAST) -> Iterator[tuple[Lines, list[int]]]:
    """The supervisor running in a thread; yields its output lines and (after the block) its code."""
    lines, code, stop = Lines(), [], threading.Event()
    supervisor = Supervisor(replicas, policy, say=lines.append)
    thread = threading.Thread(target=lambda: code.append(supervisor.run(stop, poll_s=0.02)), daemon=True)
    thread.start()
    try:
        yield lines, code
        assert thread.is_alive(), f"the supervisor stopped by itself: {lines}"
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not any(s.process.poll() is None for s in supervisor.replicas if s.process), (
        "a replica outlived it"
    )


def test_backoff_doubles_from_the_base_up_to_the_cap() -> None:
    policy = RestartPolicy(max_restarts=5, backoff_base_s=10, backoff_max_s=60)
    assert [policy.delay(n) for n in range(1, 6)] == [10, 20, 40, 60, 60]


def test_a_killed_replica_is_restarted_on_its_port_and_serves_again() -> None:
    killed, other = _replica(), _replica()
    with _supervising([killed, other]) as (lines, code):
        lines.wait_for(f"ready: {killed.base_url}")
        lines.wait_for(f"ready: {other.base_url}")
        first, other_pid = _pid(killed), _pid(other)
        os.kill(first, signal.SIGKILL)
        lines.wait_for(f"restart 1/2 of {killed.base_url}: exited with -9")
        lines.wait_for(f"ready: {killed.base_url}", count=2)
        assert _pid(killed) != first and _pid(other) == other_pid
    assert code == [0]


def test_a_replica_that_keeps_dying_is_given_up_while_the_rest_keep_serving() -> None:
    dying, steady = _replica("--die-after", "0.2"), _replica()
    with _supervising([dying, steady]) as (lines, _code):
        lines.wait_for(f"giving up on {dying.base_url} after 2 restart(s): exited with 3")
        assert [line for line in lines if line.startswith("restart ")] == [
            f"restart 1/2 of {dying.base_url}: exited with 3; starting again in 0.05s",
            f"restart 2/2 of {dying.base_url}: exited with 3; starting again in 0.1s",
        ]
        assert "1 replica(s) still serving" in lines[-1]
        assert httpx.get(f"http://127.0.0.1:{steady.port}/health", timeout=5).status_code == 200


def test_with_every_replica_given_up_the_supervisor_exits_1() -> None:
    lines: list[str] = []
    code = Supervisor([_replica("--die-after", "0.2")], FAST, say=lines.append).run(threading.Event(), 0.02)
    assert code == 1 and "giving up on" in lines[-1]


def test_a_replica_that_fails_its_first_start_fails_the_launch_without_restarts() -> None:
    lines: list[str] = []
    broken = Replica([0], 9, [sys.executable, "-c", "raise SystemExit(3)"])
    code = Supervisor([broken, _replica()], FAST, say=lines.append).run(threading.Event(), 0.02)
    assert code == 1
    assert f"error: {broken.base_url} failed to start: exited with 3" in lines
    assert not any(line.startswith("restart ") for line in lines)


def _consecutive_free_ports() -> int:
    for _ in range(50):
        port = free_port()
        with contextlib.suppress(OSError), socket.socket() as sock:
            sock.bind(("127.0.0.1", port + 1))
            return port
    raise RuntimeError("no two consecutive free ports")


def test_lenses_serve_restarts_a_killed_replica_and_sigterm_leaves_no_process(tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    port = _consecutive_free_ports()
    config.write_text(yaml.safe_dump({"models": {"validator": {"serve": {"port": port}}}}))
    command = lenses_serve_command(config, sys.executable, "--gpus", "2", "--restart-backoff", "0.1")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FAKE_VLLM), str(REPO)])}
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        serve = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    try:
        pids = _wait_ready(log, 2)
        os.kill(pids[0], signal.SIGKILL)
        pids = _wait_ready(log, 3)
        assert f"restart 1/5 of http://127.0.0.1:{port}/v1: exited with -9" in log.read_text()
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=60) == 0, log.read_text()
    finally:
        if serve.poll() is None:
            serve.kill()
    assert not [pid for pid in pids if _alive(pid)], log.read_text()


def _wait_ready(log: Path, count: int) -> list[int]:
    """The pids of the `ready:` lines, once there are `count` of them (the last one per URL)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready = re.findall(r"ready: (\S+) serving .* \(pid (\d+)\)", log.read_text())
        if len(ready) >= count:
            return [int(pid) for pid in dict(ready).values()]
        time.sleep(0.05)
    pytest.fail(f"no {count} ready lines:\n{log.read_text()[-3000:]}")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"
