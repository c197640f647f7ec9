"""Answers reused across runs: what a regeneration sends, against the full build, on the sample pool.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_answer_reuse.py --latency 0.05 --write /tmp/reuse.md

Every build is `lenses run --config` in its own process (Prefect's local engine), every model role
answered by one external `lenses simulate` process that counts its calls (`GET /sim/stats`, reset
before each build). The builds, in order, all from this script in one session:

  full      a new run directory: the baseline (every call sent)
  rerun     `full` again on its own run directory, unchanged
  reuse     a new run directory with `models.reuse_answers_from: [full]`
  rule      as `reuse`, with the caption word maximum lowered 22 -> 20 (a CPU rule)
  seed      as `reuse`, with the validator's sampling seed set to 7

Per build: calls the simulator received, answers reused (the build's funnel), caption ids equal
to `full`'s, wall seconds and the ratio of `full`'s wall time to it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
LENSES = str(Path(sys.executable).parent / "lenses")


def write_config(path: Path, run: Path, pool: Path, url: str, reuse: Path | None, change: dict) -> None:
    from lenses_data.config.models import ROLES
    from lenses_data.merge import deep_merge

    config = yaml.safe_load((REPO / "configs" / "sample.yaml").read_text())
    roles = {role: {"model": f"test/{role}", "base_urls": [url], "timeout_s": 30} for role in ROLES}
    models = {**roles, "probe": False, "reuse_answers_from": [str(reuse)] if reuse else []}
    config.update(run_dir=str(run), models=models, yields={"accept": True})
    config["ingest"]["sources"] = [str(pool), str(pool / "cc3m.tsv")]
    path.write_text(yaml.safe_dump(deep_merge(config, change)))


def build(name: str, folder: Path, pool: Path, url: str, reuse: Path | None, change: dict, run: str) -> dict:
    config = folder / f"{name}.yaml"
    write_config(config, folder / run, pool, url, reuse, change)
    httpx.post(url.removesuffix("/v1") + "/sim/reset", timeout=5)
    started = time.perf_counter()
    done = subprocess.run([LENSES, "run", "--config", str(config)], capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}")
    calls = httpx.get(url.removesuffix("/v1") + "/sim/stats", timeout=5).json()["total_calls"]
    manifest = json.loads((folder / run / "export" / "manifest.json").read_text())
    captions = sorted(pd.read_parquet(folder / run / "export" / "captions.parquet")["text_id"])
    reused = {
        stage: sum(item.get("answers_reused", {}).values()) for stage, item in manifest["model_calls"].items()
    }
    return {"build": name, "calls": calls, "wall_s": wall, "reused_in_journal": reused, "captions": captions}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency", type=float, default=0.05, help="simulated seconds per answer")
    parser.add_argument("--write", type=Path, help="write the markdown table here")
    args = parser.parse_args()

    from lenses_data.candidates.sample import build_sample_pool
    from lenses_data.simulator.testing import spawn_simulator

    with tempfile.TemporaryDirectory(prefix="bench-reuse-") as tmp:
        folder = Path(tmp)
        pool = folder / "pool"
        build_sample_pool(pool)
        with (folder / "sim.log").open("w") as log:
            process, url = spawn_simulator(["--yes-rate", "0.85", "--latency", str(args.latency)], log=log)
        try:
            full = folder / "full"
            plan = [
                ("full", None, {}, "full"),
                ("rerun", None, {}, "full"),
                ("reuse", full, {}, "reuse"),
                ("rule", full, {"annotate": {"caption_words": {"min": 8, "max": 20}}}, "rule"),
                ("seed", full, {"models": {"validator": {"sampling": {"seed": 7}}}}, "seed"),
            ]
            rows = [build(name, folder, pool, url, reuse, change, run) for name, reuse, change, run in plan]
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    base = rows[0]
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.node()} "
        f"({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}), simulator latency {args.latency} s, "
        "`benchmarks/bench_answer_reuse.py`.",
        "",
        "| build | calls sent | answers reused (journal) | same caption ids as full | wall s | full / this |",
        "|---|---:|---:|---|---:|---:|",
    ]
    for row in rows:
        same = "yes" if row["captions"] == base["captions"] else f"no ({len(row['captions'])})"
        reused = sum(row["reused_in_journal"].values())
        lines.append(
            f"| {row['build']} | {row['calls']} | {reused} | {same} | {row['wall_s']:.1f} "
            f"| {base['wall_s'] / row['wall_s']:.2f}x |"
        )
    text = "\n".join(lines)
    print(text)
    print(json.dumps([{k: v for k, v in r.items() if k != "captions"} for r in rows], indent=1))
    if args.write:
        args.write.write_text(text + "\n")


if __name__ == "__main__":
    main()
