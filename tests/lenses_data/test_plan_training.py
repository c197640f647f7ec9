"""`lenses plan --training-*`: training's GPU-hours from a rehearsal's JSON or documented figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lenses_app.cli import main
from lenses_data.plan import Plan, PlanError, documented_training, training_from_rehearsal
from tests.lenses_data.test_plan import real_run  # noqa: F401  (the fixture)


def _rehearsal(tmp_path: Path, **changes) -> Path:
    """A report in the shape `lenses train --rehearse --json` writes (the fields the plan reads)."""
    report = {
        "schema": "lenses-train-rehearsal/1",
        "config": "h200x8",
        "device": "NVIDIA H200",
        "measured_at": "2026-11-20T10:00:00+00:00",
        "fits": True,
        "seconds_per_micro_batch": 5.0,
        "measured": {"images_per_batch": 20},
        "memory": {"kind": "cuda", "peak_allocated_bytes": 60 * 1024**3, "peak_reserved_bytes": 70 * 1024**3},
        "projection": {"gpus": 8, "steps": 10_000, "images_per_step": 640},
        **changes,
    }
    path = tmp_path / "rehearsal.json"
    path.write_text(json.dumps(report))
    return path


def test_documented_figures_give_the_paper_recipe_hours() -> None:
    h200 = documented_training("h200")
    assert (h200.steps, h200.images_per_step, h200.gpus, h200.accumulation) == (10_000, 640, 8, 4)
    assert h200.wall_clock_hours == pytest.approx(116.8, abs=0.1)  # 320,000 micro-batches x 10.51 s / 8
    assert h200.gpu_hours == pytest.approx(934.2, abs=0.1)
    assert "documented" in h200.source and "2026-11" in h200.source
    h100 = documented_training("h100", gpus=16)
    assert h100.wall_clock_hours == pytest.approx(1_009.8 / 16, abs=0.1)
    with pytest.raises(PlanError, match="a100"):
        documented_training("a100")


def test_a_rehearsal_is_read_with_its_recipe_or_overrides(tmp_path: Path) -> None:
    t = training_from_rehearsal(_rehearsal(tmp_path))
    assert t.wall_clock_hours == pytest.approx(10_000 * 4 * 5.0 / 3600)
    assert t.gpu_hours == pytest.approx(t.wall_clock_hours * 8)
    assert (t.peak_allocated_gib, t.peak_reserved_gib) == (60, 70)
    assert "rehearsal" in t.source and "NVIDIA H200" in t.source
    four = training_from_rehearsal(_rehearsal(tmp_path), gpus=4)
    assert four.accumulation == 8 and four.wall_clock_hours == pytest.approx(2 * t.wall_clock_hours)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"fits": False, "refusal": "refused: 20 images"}, "did not fit"),
        ({"schema": "something-else"}, "not a `lenses train --rehearse"),
        ({"projection": {}}, "incomplete"),
    ],
)
def test_a_rehearsal_without_a_timing_is_refused(tmp_path: Path, changes, message) -> None:
    with pytest.raises(PlanError, match=message):
        training_from_rehearsal(_rehearsal(tmp_path, **changes))


def test_cli_adds_training_beside_the_build(real_run: Path, tmp_path: Path, capsys) -> None:  # noqa: F811
    out = tmp_path / "plan.json"
    argv = ["plan", "--run", str(real_run), "--candidates", "1000000", "--yields", "paper"]
    assert main([*argv, "--training-documented", "h200", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    plan = Plan.model_validate_json(out.read_text())
    assert plan.training is not None and plan.training.gpu_hours == pytest.approx(934.2, abs=0.1)
    share = plan.training.gpu_hours / (plan.training.gpu_hours + plan.total_gpu_hours)
    assert f"training is {share:.0%} of build + training GPU-hours" in printed
    assert "documented figures (not this machine)" in printed
    assert main([*argv, "--training-rehearsal", str(_rehearsal(tmp_path, fits=False))]) == 2
    assert "did not fit" in capsys.readouterr().err
