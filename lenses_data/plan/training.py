"""Training's share of the GPU bill in a plan: from a rehearsal's JSON (`lenses train --rehearse
--json FILE`) or from the documented figures of issue 31, labelled as such. JSON only: no torch.

A recipe of S optimizer steps of I images on G GPUs, with B images per micro-batch per GPU that
take t seconds, is S x I / (B x G) micro-batches per GPU:

    wall = S x (I / (B x G)) x t,        GPU-hours = wall x G.
"""

from __future__ import annotations

import json
from pathlib import Path

from lenses_data.plan.schemas import PlanError, TrainingPlan

PAPER_STEPS = 10_000  # supplementary Sec. 7
PAPER_IMAGES_PER_STEP = 640  # 20 images x 8 GPUs x 4 accumulation steps

# Measured by a previous session in 2026-11 with the project's own training.loop.train.train(), one
# process, h200x8.yaml's per-GPU recipe (20 images x 2 captions, 512 px, LoRA r16, bf16 autocast,
# gradient checkpointing, fused AdamW) on a model of BGE-VL-MLLM-S1's dimensions with random weights
# and synthetic inputs of the real shapes (~3,090 tokens per image input, ~80 per caption); issue 31.
DOCUMENTED = {
    "h200": {"card": "H200 (139.8 GiB)", "seconds": 10.51, "allocated": 63.5, "reserved": 78.0},
    "h100": {"card": "H100 80GB (79.2 GiB)", "seconds": 11.36, "allocated": 63.5, "reserved": 78.0},
}
DOCUMENTED_SOURCE = (
    "documented figures (not this machine): measured 2026-11 by a previous session with the project's "
    "train() on one {card}, 20-image micro-batches of synthetic real-shape inputs, random weights (issue 31)"
)


def project_training(seconds: float, images_per_batch: int, steps: int, images_per_step: int, gpus: int):
    """(accumulation, wall hours, GPU-hours) of the recipe; the formula above."""
    if gpus < 1 or steps < 1 or images_per_step < 1 or images_per_batch < 1:
        raise ValueError("GPUs, steps, images per step and images per micro-batch must be positive")
    accumulation = images_per_step / (images_per_batch * gpus)
    wall = steps * accumulation * seconds / 3600
    return accumulation, wall, wall * gpus


def _plan(source, card, seconds, images, memory, steps, images_per_step, gpus) -> TrainingPlan:
    accumulation, wall, gpu_hours = project_training(seconds, images, steps, images_per_step, gpus)
    return TrainingPlan(
        source=source, card=card, seconds_per_micro_batch=seconds, images_per_micro_batch=images,
        peak_allocated_gib=memory[0], peak_reserved_gib=memory[1], steps=steps,
        images_per_step=images_per_step, gpus=gpus, accumulation=accumulation,
        wall_clock_hours=wall, gpu_hours=gpu_hours,
    )  # fmt: skip


def documented_training(
    card: str, gpus: int = 8, steps: int = PAPER_STEPS, images_per_step: int = PAPER_IMAGES_PER_STEP
) -> TrainingPlan:
    """The paper recipe (by default) priced at issue 31's measured seconds per micro-batch on `card`."""
    if card not in DOCUMENTED:
        raise PlanError(f"no documented training figures for {card!r}; known: {', '.join(DOCUMENTED)}")
    d = DOCUMENTED[card]
    source = DOCUMENTED_SOURCE.format(card=d["card"])
    return _plan(
        source, d["card"], d["seconds"], 20, (d["allocated"], d["reserved"]), steps, images_per_step, gpus
    )


def _gib(value) -> float | None:
    return value / 1024**3 if value is not None else None


def training_from_rehearsal(
    path: str | Path, gpus: int | None = None, steps: int | None = None, images_per_step: int | None = None
) -> TrainingPlan:
    """A rehearsal's measured seconds per micro-batch, its recipe unless overridden."""
    try:
        r = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise PlanError(f"cannot read the training rehearsal {path}: {error}") from None
    if not isinstance(r, dict) or r.get("schema") != "lenses-train-rehearsal/1":
        raise PlanError(f"{path} is not a `lenses train --rehearse --json` report")
    if not r.get("fits"):
        raise PlanError(f"{path}: the rehearsal did not fit, so it has no timing: {r.get('refusal')}")
    try:
        proj, memory = r["projection"], r["memory"]
        seconds, images = float(r["seconds_per_micro_batch"]), int(r["measured"]["images_per_batch"])
        source = f"rehearsal {path} (measured on {r['device']} at {r['measured_at']}, config {r['config']})"
        return _plan(
            source, r["device"], seconds, images,
            (_gib(memory.get("peak_allocated_bytes")), _gib(memory.get("peak_reserved_bytes"))),
            steps or int(proj["steps"]), images_per_step or int(proj["images_per_step"]), gpus or int(proj["gpus"]),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as error:
        raise PlanError(f"{path}: an incomplete rehearsal report ({error})") from None
