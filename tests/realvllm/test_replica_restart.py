"""A replica that comes back, on vLLM itself (0.32, CPU build): `lenses serve` runs two replicas of
the tiny validator, one is SIGKILLed while a build's validate stage is under way. The build ends
with the dataset of a clean build, no request is answered twice into its journal, the supervisor
restarts the killed replica, and the next build's requests reach it again.

Only the validator is real here (the image roles are the simulator's), so the test pays for two
server starts and one restart, not for InternVL."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pandas as pd
import pytest
import yaml

from lenses_data import io
from lenses_data.schemas import LensText
from lenses_data.simulator.simulator import SimConfig, free_port, run_in_thread
from tests.realvllm.conftest import MAX_MODEL_LEN, VALIDATOR_NAME
from tests.realvllm.pipeline_config import write_pipeline_config
from tests.realvllm.vllm_server import SERVER_ENV
from tests.support.serve_cli import lenses_serve_command

pytestmark = [pytest.mark.slow, pytest.mark.realvllm, pytest.mark.timeout(2400)]
REPO = Path(__file__).resolve().parents[2]
START_S = 900  # one vLLM CPU start takes 1-2 minutes idle, several on a busy machine
READY = re.compile(r"ready: (\S+) serving .* \(pid (\d+)\)")


def _two_ports() -> int:
    for _ in range(50):
        port = free_port()
        try:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no two consecutive free ports")


def _serve(python: Path, model: Path, tmp: Path) -> tuple[subprocess.Popen, Path, int]:
    """`lenses serve` with two replicas of the tiny validator; returns the process, its log, its port."""
    port = _two_ports()
    serve = {
        "hf_model": str(model),
        "port": port,
        "max_model_len": MAX_MODEL_LEN,
        "dtype": "float32",
        # Above the longest prompt: vLLM 0.32's CPU build kills its engine on a chunked seeded prefill.
        "extra_args": ["--max-num-batched-tokens", str(MAX_MODEL_LEN)],
    }
    config = tmp / "serve.yaml"
    config.write_text(yaml.safe_dump({"models": {"validator": {"model": VALIDATOR_NAME, "serve": serve}}}))
    command = lenses_serve_command(
        config, python, "--gpus", "2", "--restart-backoff", "1", "--health-timeout", str(START_S)
    )
    log = tmp / "serve.log"
    env = {**os.environ, **SERVER_ENV}
    env.pop("VLLM_API_KEY", None)
    with log.open("w") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True
        )
    return process, log, port


def _ready(log: Path, process: subprocess.Popen, count: int) -> dict[str, int]:
    """URL -> pid of the latest `ready:` line per replica, once `count` such lines are printed."""
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        found = READY.findall(log.read_text(errors="replace"))
        if len(found) >= count:
            return {url: int(pid) for url, pid in found}
        if process.poll() is not None:
            break
        time.sleep(1)
    pytest.fail(f"no {count} ready lines (serve exit {process.poll()}):\n{log.read_text()[-5000:]}")


def _models(sim_url: str, urls: list[str]) -> dict:
    simulated = {"base_urls": [sim_url], "timeout_s": 60, "max_concurrency": 8}
    return {
        "filter": {"model": "sim/filter", **simulated},
        "generator": {"model": "sim/generator", **simulated},
        "visual_validator": {"model": "sim/visual-validator", **simulated},
        "validator": {
            "model": VALIDATOR_NAME,
            "base_urls": urls,
            "timeout_s": 300,
            "max_concurrency": 4,
            "sampling": {"temperature": 0.0, "max_tokens": 600},
        },
        "retry": {
            "max_attempts": 3,
            "backoff_base_s": 0.2,
            "backoff_max_s": 2.0,
            "unhealthy_cooldown_s": 2.0,
        },
    }


def _build(tmp: Path, models: dict) -> subprocess.Popen:
    # write_pipeline_config accepts the yields: the tiny validator discards most texts.
    config = write_pipeline_config(tmp, models)
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "lenses_app.cli", "run", "--config", str(config)]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=env
    )


def _journal(run: Path, stage: str) -> list[dict]:
    lines = [line for path in (run / "journal" / stage).glob("part-*.jsonl") for line in path.open()]
    return [json.loads(line) for line in lines if line.strip()]


def _dataset(run: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    records = io.read_stage(run, "validate", LensText).sort_values("text_id").reset_index(drop=True)
    rejected = io.read_rejections(run, "validate")
    return records, rejected.sort_values(list(rejected.columns)).reset_index(drop=True)


def _answered_since_start(url: str) -> float:
    """Requests the server finished since its process started (vLLM's Prometheus counter)."""
    metrics = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=30).text
    return sum(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("vllm:request_success_total")
    )


def test_a_replica_killed_mid_build_is_restarted_and_the_build_matches_a_clean_one(
    vllm_python_path, tiny_validator_model, tmp_path
):
    serve, log, port = _serve(vllm_python_path, tiny_validator_model, tmp_path)
    groups: set[int] = set()  # each replica's process group: its API server's pid
    try:
        pids = _ready(log, serve, 2)
        groups.update(pids.values())
        urls = [f"http://127.0.0.1:{port + i}/v1" for i in range(2)]
        with run_in_thread(SimConfig()) as sim_url:
            killed = tmp_path / "killed"
            build = _build(killed, _models(sim_url, urls))
            deadline = time.monotonic() + 1200
            while not _journal(killed / "run", "validate") and time.monotonic() < deadline:
                assert build.poll() is None, build.stdout.read()[-4000:]
                time.sleep(0.2)
            os.kill(pids[urls[0]], signal.SIGKILL)  # mid-validate: some answers journaled, others to come
            answered_at_kill = len(_journal(killed / "run", "validate"))
            output, _ = build.communicate(timeout=1800)
            assert build.returncode == 0, output[-5000:]
            journal = _journal(killed / "run", "validate")
            assert len(journal) > answered_at_kill, "the kill came after the validate stage"
            twice = [h for h, n in Counter(e["hash"] for e in journal).items() if n > 1]
            assert not twice, f"{len(twice)} request(s) answered twice into the journal"

            assert f"restart 1/5 of {urls[0]}: exited with -9" in log.read_text()
            restarted = _ready(log, serve, 3)
            groups.update(restarted.values())
            assert restarted[urls[0]] != pids[urls[0]] and restarted[urls[1]] == pids[urls[1]]
            clean = tmp_path / "clean"
            build = _build(clean, _models(sim_url, urls))
            output, _ = build.communicate(timeout=1800)
            assert build.returncode == 0, output[-5000:]
        assert _answered_since_start(urls[0]) > 0, "the restarted replica got no request of the clean build"
        (records, rejected), (clean_records, clean_rejected) = (
            _dataset(killed / "run"),
            _dataset(clean / "run"),
        )
        # Kept and discarded texts alike: a discard holds the validator's whole answer (`raw`).
        assert len(records) + len(rejected) > 0
        pd.testing.assert_frame_equal(records, clean_records)
        pd.testing.assert_frame_equal(rejected, clean_rejected)
    finally:
        if serve.poll() is None:
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=120)
    assert serve.returncode == 0, log.read_text()[-3000:]
    left = _members(groups)  # vLLM's engine core and workers included
    assert not left, f"processes left after SIGTERM: {left}"


def _members(groups: set[int]) -> list[str]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, fields = stat.read_text().rsplit(")", 1)
        except OSError:  # the process ended
            continue
        state, _parent, group = fields.split()[:3]
        if int(group) in groups and state != "Z":
            found.append(name.split("(", 1)[1])
    return found
