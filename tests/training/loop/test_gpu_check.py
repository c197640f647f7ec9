"""benchmarks/gpu_check.py, the one command for a lent GPU, at tiny size on the CPU: its JSON and
markdown carry every item's figures, an item that fails does not stop the others, and the time
budget skips what does not fit, with the reason, and still writes both files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_check  # noqa: E402

ITEMS = "model_dir,rehearsal_shipped,profile,clip,lever_checkpoint_skip_last=1"


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    command = [sys.executable, str(ROOT / "benchmarks/gpu_check.py"), "--tiny", "--out", str(tmp_path), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)


def test_tiny_gpu_check_writes_every_figure(tmp_path):
    done = _run(tmp_path, "--items", ITEMS)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["schema"] == "lenses-gpu-check/1" and report["mode"] == "tiny"
    items = report["items"]
    assert list(items) == ITEMS.split(",")
    assert all(item["status"] == "ok" and item["seconds"] >= 0 for item in items.values()), items
    shipped = items["rehearsal_shipped"]["result"]
    assert shipped["fits"] and shipped["speed"]["vision_no_grad"] and shipped["checkpointing"]
    assert shipped["hardware_flops_per_micro_batch"] > shipped["model_flops_per_micro_batch"] > 0
    assert shipped["flops_breakdown"]["hardware"]["lm_recompute"] > 0  # checkpointing on, as shipped
    lever = items["lever_checkpoint_skip_last=1"]["result"]
    assert lever["speed"]["checkpoint_skip_last"] == 1 and not lever["speed"]["vision_no_grad"]
    assert lever["projection"]["images_per_step"] == shipped["projection"]["images_per_step"]  # recipe kept
    assert lever["matmul_weights"]["lm_layers_checkpointed"] == 1
    profile = items["profile"]["result"]
    assert profile["checkpointed_layers_tagged"] > 0 and len(profile["top_operators"]) > 5
    shares = profile["shares_of_busy_time"]
    assert set(shares) == {"attention", "matmul", "recompute", "optimizer"}
    assert 0 < shares["matmul"] < 1 and 0 < shares["recompute"] < 1 and 0 < shares["attention"] < 1
    clip = items["clip"]["result"]
    assert clip["end_to_end_images_per_s"] > 0 and clip["encoder_images_per_s"] > 0
    assert clip["end_to_end_vs_encoder"] == pytest.approx(
        clip["end_to_end_images_per_s"] / clip["encoder_images_per_s"]
    )
    page = (tmp_path / "gpu_check.md").read_text()
    for heading in (
        "| item | status | seconds | note |",
        "## Rehearsals",
        "## CLIP",
        "## Profile of one training step",
    ):
        assert heading in page
    assert (
        "| rehearsal_shipped | vision_no_grad |" in page
        and "| lever_checkpoint_skip_last=1 | checkpoint_skip_last=1 |" in page
    )


def test_a_spent_budget_skips_every_item_and_still_writes_both_files(tmp_path):
    done = _run(tmp_path, "--budget-s", "0")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["items"] and all(i["status"] == "skipped" for i in report["items"].values())
    assert all(i["reason"].startswith("time budget: 0 s left of 0 s") for i in report["items"].values())
    assert "| model_dir | skipped |" in (tmp_path / "gpu_check.md").read_text()


def test_the_budget_skips_what_does_not_fit_and_runs_what_still_does():
    """A fake clock: each item costs its estimate; one too large for what is left is skipped, the
    next smaller one still runs, and a failing item is recorded without stopping the rest."""
    now = [0.0]
    ran = []

    def item(name: str, cost: float, fail: bool = False):
        def run():
            now[0] += cost
            ran.append(name)
            if fail:
                raise RuntimeError("out of memory")
            return {"cost": cost}

        return gpu_check.Item(name, lambda: cost, run)

    items = [item("a", 3), item("b", 5), item("c", 1, fail=True), item("d", 1), item("e", 1)]
    results = gpu_check.run_items(items, budget_s=5, clock=lambda: now[0])
    assert ran == ["a", "c", "d"]
    assert results["b"] == {
        "status": "skipped",
        "reason": "time budget: 2 s left of 5 s, this item needs ~5 s",
    }
    assert results["c"]["status"] == "failed" and "RuntimeError: out of memory" in results["c"]["error"]
    assert results["d"] == {"status": "ok", "result": {"cost": 1}, "seconds": 1}
    assert results["e"]["status"] == "skipped"


def test_the_wheels_named_for_a_bare_gpu_machine():
    """The Makefile downloads, at this project's pins, every package the check imports that a GPU
    image with torch lacks (docs/training.md#the-gpu-check)."""
    makefile = (ROOT / "Makefile").read_text()
    names = next(line for line in makefile.splitlines() if line.startswith("GPU_WHEEL_NAMES"))
    for name in ("pydantic", "pydantic_core", "annotated-types", "typing-inspection", "open_clip_torch", "ftfy",
                 "wcwidth", "transformers", "peft"):  # fmt: skip
        assert f" {name}" in names
    pins = (ROOT / "constraints.txt").read_text().lower()
    for name in names.split(":=")[1].split():
        assert f"\n{name.lower()}==" in pins, name
    assert "--python-version 3.12" in makefile and "manylinux2014_x86_64" in makefile
    assert ".gpu-wheels/" in (ROOT / ".gitignore").read_text()
