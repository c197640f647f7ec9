"""Chaos: build-dataset against a faulty simulator, SIGKILLed twice at random points, then resumed.

The final dataset must equal a fault-free run of the same configuration (same ids, same texts),
with nothing lost or duplicated, and model calls answered twice at most as often as requests
were in flight when the process died.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lenses_data.config.models import ROLES
from lenses_data.simulator.testing import sim_stats, spawn_simulator
from tests.support.prefect_server import prefect_env

LENSES = str(Path(sys.executable).parent / "lenses")
MAX_CONCURRENCY = 4
MAX_WORKERS = 2
FAULTS = {"http_500": 0.06, "hang": 0.03, "malformed_json": 0.06, "drop": 0.03}


def _start_simulator(tmp_path: Path, name: str, faults: dict[str, float]) -> tuple[subprocess.Popen, str]:
    args = ["--yes-rate", "0.85", "--latency", "0.02"]
    if faults:
        args += ["--faults", json.dumps(faults), "--faults-until-attempt", "3"]
    with (tmp_path / f"{name}.log").open("w") as log:
        return spawn_simulator(args, log=log)


def _write_config(path: Path, run: Path, sources: list[str], base_url: str) -> Path:
    role = {"base_urls": [base_url], "timeout_s": 1.5, "max_concurrency": MAX_CONCURRENCY}
    models = {r: {**role, "model": "test/" + r} for r in ROLES}
    models["retry"] = {"backoff_base_s": 0.01, "backoff_max_s": 0.05, "max_attempts": 8, "max_reasks": 4}
    config = {
        "run_dir": str(run),
        "shard_size": 8,
        "ingest": {"sources": sources, "workers": 1},
        "split": {"valid": 0.15, "test": 0.3, "seed": "chaos"},
        "models": models,
        "orchestration": {"max_workers": MAX_WORKERS, "retry_delay_s": 0},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _run(
    config: Path, env: dict[str, str], log: Path, kill_at_calls: int | None = None, sim_url: str = ""
) -> bool:
    """Run `lenses run`; with `kill_at_calls`, SIGKILL it once the simulator has seen that many calls.

    Killing at a call count, not a time, puts the kill inside the model stages on any machine speed.
    Returns True when the run finished by itself (exit code 0 asserted), False when it was killed.
    """
    with log.open("a") as out:
        proc = subprocess.Popen(
            [LENSES, "run", "--config", str(config)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 900
        while proc.poll() is None and time.monotonic() < deadline:
            if kill_at_calls is not None and sim_stats(sim_url)["total_calls"] >= kill_at_calls:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return False
            time.sleep(0.05)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            raise TimeoutError("lenses run did not finish in 900 s")
    assert proc.returncode == 0, log.read_text()[-5000:]
    return True


def _dataset(run: Path) -> dict[str, pd.DataFrame]:
    export = run / "export"
    images = pd.read_parquet(export / "images.parquet")[["image_id", "split"]]
    texts = {
        name: pd.read_parquet(export / f"{name}.parquet")[
            ["text_id", "image_id", "lens", "text", "focus", "edited"]
        ]
        for name in ("captions", "prompts")
    }
    return {"images": images, **texts}


@pytest.fixture
def simulators(tmp_path: Path) -> Iterator[dict[str, str]]:
    clean, clean_url = _start_simulator(tmp_path, "sim-clean", {})
    faulty, faulty_url = _start_simulator(tmp_path, "sim-faulty", FAULTS)
    try:
        yield {"clean": clean_url, "faulty": faulty_url}
    finally:
        for proc in (clean, faulty):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
def test_killed_twice_with_faults_resumes_to_the_fault_free_dataset(
    prefect_server, simulators, sample_pool, tmp_path
):
    api_url, home = prefect_server
    env = prefect_env(home, api_url)
    sources = [str(sample_pool), str(sample_pool / "cc3m.tsv")]

    clean_run = tmp_path / "clean"
    clean_cfg = _write_config(tmp_path / "clean.yaml", clean_run, sources, simulators["clean"])
    assert _run(clean_cfg, env, tmp_path / "clean.log")

    chaos_run = tmp_path / "chaos"
    chaos_cfg = _write_config(tmp_path / "chaos.yaml", chaos_run, sources, simulators["faulty"])
    # Random kill points, drawn as model-call counts (a run makes ~150 calls with faults on).
    rng = random.Random(int(os.environ.get("LENSES_CHAOS_SEED", "7")))
    first = rng.randint(15, 60)
    kill_points = [first, first + rng.randint(20, 50)]
    kills = 0
    for point in kill_points:
        if not _run(chaos_cfg, env, tmp_path / "chaos.log", point, simulators["faulty"]):
            kills += 1
    assert kills == 2, f"the run finished before kill point {kill_points[kills]}"
    assert _run(chaos_cfg, env, tmp_path / "chaos.log")

    clean, chaos = _dataset(clean_run), _dataset(chaos_run)
    for name in ("images", "captions", "prompts"):
        left = clean[name].sort_values(list(clean[name].columns[:2])).reset_index(drop=True)
        right = chaos[name].sort_values(list(chaos[name].columns[:2])).reset_index(drop=True)
        pd.testing.assert_frame_equal(left, right, obj=name)
        key = "text_id" if name != "images" else "image_id"
        assert not chaos[name][key].duplicated().any(), f"duplicated {key} in {name}"

    clean_repeats = _repeated_answers(sim_stats(simulators["clean"]))
    stats = sim_stats(simulators["faulty"])
    repeated = _repeated_answers(stats)
    # Requests answered (fault-free) more than once: those in flight when a kill landed, beyond the
    # repeats a fault-free run has too (one request asked by two shards: each shard owns its journal).
    in_flight_bound = clean_repeats + kills * MAX_WORKERS * MAX_CONCURRENCY
    assert sum(stats["faults"].values()) > 0, "no fault was injected"
    assert repeated <= in_flight_bound, (
        f"{repeated} answered calls repeated (bound {in_flight_bound}, {clean_repeats} without kills)"
    )


def _repeated_answers(stats: dict) -> int:
    """Fault-free answers beyond the first per request. Capability probes (key `probe:<role>`) are
    asked once per process by design, so a rerun repeats them: not counted."""
    keys = stats["answer_keys"]
    return sum(n - 1 for h, n in stats["answers"].items() if not keys.get(h, "").startswith("probe:"))
