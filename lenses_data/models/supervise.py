"""Keep a node's vLLM replicas serving: start them, restart one that dies, stop them all.

A replica that exits after it has served (an engine crash, the OOM killer, a SIGKILL) is restarted
on its port after an exponential backoff, up to `max_restarts` times; the clients' health checks
(readmit.py) put it back in rotation once it answers. A replica that fails its very first start is
not retried: that is a command line or a node that cannot serve, and the whole launch fails.

Each replica runs in its own process group (vLLM's engine core and workers included), so stopping
or burying one never leaves its children behind; on Linux a replica also gets SIGTERM when the
supervisor itself dies, so not even a SIGKILLed supervisor leaves orphans.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from lenses_data.models.serve import API_KEY_ENV, Replica

STARTING, READY, WAITING, GAVE_UP = "starting", "ready", "waiting to restart", "gave up"
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int = 5  # per replica, over the supervisor's life; 0: never restart
    backoff_base_s: float = 10.0  # wait before the first restart; doubled for each next one
    backoff_max_s: float = 300.0
    health_timeout_s: float = 1800.0  # a (re)started replica not healthy by then has failed

    def delay(self, restart: int) -> float:
        return min(self.backoff_max_s, self.backoff_base_s * 2 ** (restart - 1))


@dataclass
class Supervised:
    replica: Replica
    process: subprocess.Popen | None = None
    state: str = STARTING
    since: float = 0.0  # when the state began (monotonic)
    restarts: int = 0
    served: bool = False  # has been ready at least once
    restart_at: float = 0.0


def _die_with_parent() -> None:
    """Runs in the child between fork and exec. Linux sends the signal when the thread that started
    the child ends: `lenses serve` starts its replicas from its main thread."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def start_replica(replica: Replica) -> subprocess.Popen:
    """The replica's server in a new session (its own process group)."""
    preexec = _die_with_parent if sys.platform.startswith("linux") else None
    return subprocess.Popen(
        replica.argv, env=replica.process_env(), start_new_session=True, preexec_fn=preexec
    )


def served_models(replica: Replica, timeout_s: float = 5.0) -> list[str] | None:
    """The model ids the replica serves once /health and /v1/models answer; None: not yet."""
    root = replica.base_url.removesuffix("/v1")
    key = next((value for name, value, _ in replica.secret_env if name == API_KEY_ENV), None)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        if httpx.get(f"{root}/health", timeout=timeout_s).status_code != 200:
            return None
        listing = httpx.get(f"{replica.base_url}/models", headers=headers, timeout=timeout_s)
        return [m["id"] for m in listing.json().get("data", [])] if listing.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def signal_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Supervisor:
    def __init__(
        self,
        replicas: list[Replica],
        policy: RestartPolicy,
        start: Callable[[Replica], subprocess.Popen] = start_replica,
        say: Callable[[str], None] = lambda line: print(line, flush=True),
    ) -> None:
        self.replicas = [Supervised(r) for r in replicas]
        self.policy = policy
        self._start = start
        self._say = say

    def run(self, stop: threading.Event, poll_s: float = 0.5) -> int:
        """Serve until `stop` is set (0) or every replica is given up (1); a first start that
        fails ends the launch (1). Every replica is stopped on the way out."""
        try:
            for supervised in self.replicas:
                self._launch(supervised)
            while not stop.is_set():
                self.tick()
                if self.failed_first_start() or all(s.state == GAVE_UP for s in self.replicas):
                    return 1
                stop.wait(poll_s)
            return 0
        finally:
            self.stop_all()

    def failed_first_start(self) -> bool:
        return any(s.state == GAVE_UP and not s.served for s in self.replicas)

    def tick(self) -> None:
        """One look at every replica: notice exits and readiness, start the ones whose wait is over."""
        now = time.monotonic()
        for supervised in self.replicas:
            process = supervised.process
            if supervised.state in (STARTING, READY) and process is not None and process.poll() is not None:
                self._died(supervised, f"exited with {process.returncode}", now)
            elif supervised.state == STARTING:
                self._check_started(supervised, now)
            elif supervised.state == WAITING and now >= supervised.restart_at:
                self._launch(supervised)

    def _check_started(self, supervised: Supervised, now: float) -> None:
        models = served_models(supervised.replica)
        if models is not None:
            supervised.state, supervised.since, supervised.served = READY, now, True
            pid = supervised.process.pid if supervised.process else "?"
            self._say(f"ready: {supervised.replica.base_url} serving {', '.join(models)} (pid {pid})")
        elif now - supervised.since > self.policy.health_timeout_s:
            if supervised.process is not None:
                signal_group(supervised.process, signal.SIGKILL)
                supervised.process.wait()
            self._died(supervised, f"not healthy after {self.policy.health_timeout_s:g}s", now)

    def _launch(self, supervised: Supervised) -> None:
        supervised.process = self._start(supervised.replica)
        supervised.state, supervised.since = STARTING, time.monotonic()

    def _died(self, supervised: Supervised, why: str, now: float) -> None:
        if supervised.process is not None:  # the engine core and workers of a dead server go too
            signal_group(supervised.process, signal.SIGKILL)
        url, limit = supervised.replica.base_url, self.policy.max_restarts
        if not supervised.served:
            supervised.state = GAVE_UP
            self._say(f"error: {url} failed to start: {why}")
        elif supervised.restarts >= limit:
            supervised.state = GAVE_UP
            alive = sum(s.state != GAVE_UP for s in self.replicas)
            self._say(f"giving up on {url} after {limit} restart(s): {why}; {alive} replica(s) still serving")
        else:
            supervised.restarts += 1
            delay = self.policy.delay(supervised.restarts)
            supervised.state, supervised.restart_at = WAITING, now + delay
            self._say(f"restart {supervised.restarts}/{limit} of {url}: {why}; starting again in {delay:g}s")

    def stop_all(self, grace_s: float = 30.0) -> None:
        """SIGTERM to every replica's process group, SIGKILL to what is left after `grace_s`."""
        running = [s.process for s in self.replicas if s.process is not None and s.process.poll() is None]
        for process in running:
            signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for process in running:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                signal_group(process, signal.SIGKILL)
                process.wait()
        for supervised in self.replicas:  # leftovers of groups whose leader already exited
            if supervised.process is not None:
                signal_group(supervised.process, signal.SIGKILL)
