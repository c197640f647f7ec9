"""The rehearsal's figures: throughput, MFU and HFU, and the recipe's projection (no torch here).

FLOPs per micro-batch (rehearsal_flops, derived in docs/training.md#flops-per-micro-batch):
model FLOPs count what the step needs (real tokens, no recompute, nothing for the frozen tower's
backward) and are the basis of MFU; hardware FLOPs count what the GPU runs (padded tokens,
activation checkpointing's recompute as configured, the tower's backward when it has a graph) and
are the basis of HFU. Attention's O(L^2) products are left out of both (~10% at ~3,000 tokens).
MFU = model FLOPs / seconds per micro-batch / the card's dense bf16 peak; HFU the same with
hardware FLOPs.

Projection of a recipe on G GPUs: the recipe's optimizer step takes `images_per_step` images (its
global batch: images_per_batch x accum_steps x optim.recipe_gpus, unless --images-per-step names
another recipe); one GPU does a micro-batch of `images_per_batch`, so a step is images_per_step /
(images_per_batch x G) micro-batches per GPU (the accumulation on G GPUs) and

    wall = steps x accumulation x seconds per micro-batch,    GPU-hours = wall x G.

The rehearsal runs on one process: the gradient all-reduce and negative gathering across GPUs
(NCCL) are not in the figure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from lenses_data.plan.training import project_training

GIB = 1024**3

# Dense bf16 tensor-core peaks, in FLOP/s, matched by device name (first match wins). NVIDIA's data
# sheets print the peak with 2:4 sparsity and say the dense figure is half of it: H100 SXM 1,979 ->
# 989, H100 PCIe 1,513 -> 756, H100 NVL 1,671 -> 835 (H100 Tensor Core GPU datasheet); H200 SXM
# 1,979 -> 989, H200 NVL 1,671 -> 835 (H200 datasheet); A100 312 dense (A100 datasheet).
KNOWN_PEAKS: tuple[tuple[str, float], ...] = (
    ("H200 NVL", 835e12),
    ("H200", 989e12),
    ("H100 NVL", 835e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),  # SXM ("NVIDIA H100 80GB HBM3")
    ("A100", 312e12),
)


def known_peak_flops(device_name: str) -> float | None:
    """The dense bf16 peak of a known card named in `device_name`, else None (use --peak-tflops)."""
    for key, flops in KNOWN_PEAKS:
        if key.lower() in device_name.lower():
            return flops
    return None


@dataclass(frozen=True)
class ParamCounts:
    total: int
    trainable: int
    lm: int  # language-model decoder layers (LoRA included) and the projector that runs
    vision: int


@dataclass(frozen=True)
class Measured:
    """What the timed micro-batches gave (per micro-batch means)."""

    micro_batches: int
    seconds: float  # wall seconds of all timed micro-batches, optimizer steps included
    images_per_batch: int
    captions_per_batch: int
    lm_tokens: float  # real tokens per micro-batch (image + caption inputs)
    image_input_tokens: float  # mean real tokens of one image input
    caption_tokens: float  # mean real tokens of one caption input
    vision_tokens: float  # CLIP tokens per micro-batch (tiles x (patches + CLS))
    lm_padded_tokens: float = 0.0  # tokens the decoder computes (padded widths, per length chunk)
    patch_tokens: float = 0.0  # tiles x patches (the projector's inputs)
    prompts_per_image: float = 0.0  # mean prompts per image input
    image_input_padded_tokens: float = 0.0  # mean padded width of the image inputs


@dataclass(frozen=True)
class Projection:
    gpus: int
    steps: int
    images_per_step: int
    accumulation: float  # micro-batches per GPU per optimizer step
    wall_hours: float
    gpu_hours: float


def project(seconds_per_micro: float, images_per_batch: int, steps: int, images_per_step: int, gpus: int):
    """The recipe's wall time and GPU-hours (the formula lives with `lenses plan`, which reads it too)."""
    accumulation, wall_h, gpu_h = project_training(
        seconds_per_micro, images_per_batch, steps, images_per_step, gpus
    )
    return Projection(gpus, steps, images_per_step, accumulation, wall_h, gpu_h)


def throughput(flops: dict, m: Measured, peak_flops: float | None) -> dict:
    """Seconds per micro-batch, images/s, tokens/s, achieved TFLOP/s, MFU and HFU (None without a
    peak); `flops` is rehearsal_flops.flops_per_micro_batch's {"model": ..., "hardware": ...}."""
    sec = m.seconds / m.micro_batches
    model, hardware = flops["model"]["total"], flops["hardware"]["total"]
    return {
        "seconds_per_micro_batch": sec,
        "images_per_s": m.images_per_batch / sec,
        "tokens_per_s": m.lm_tokens / sec,
        "model_flops_per_micro_batch": model,
        "hardware_flops_per_micro_batch": hardware,
        "achieved_model_tflops": model / sec / 1e12,
        "achieved_hardware_tflops": hardware / sec / 1e12,
        "peak_tflops": peak_flops / 1e12 if peak_flops else None,
        "mfu": model / sec / peak_flops if peak_flops else None,
        "hfu": hardware / sec / peak_flops if peak_flops else None,
        "flops_breakdown": flops,
    }


FLOPS_FORMULA = (
    "model: 4 N_lm_base x real LM tokens + 6 N_lora x real LM tokens + (6 N_proj - 2 N_proj_first) x patches "
    "+ 2 N_vision x vision tokens; hardware: the same on padded tokens, + 2 N x tokens of every "
    "checkpointed layer's recompute, + the frozen tower's backward when it has a graph; attention's "
    "O(L^2) products left out of both (docs/training.md#flops-per-micro-batch)"
)


def report_dict(meta: dict, params: ParamCounts, m: Measured, memory: dict, peak_flops, proj, flops) -> dict:
    """The rehearsal's JSON (schema lenses-train-rehearsal/1); `lenses plan` reads it."""
    return {
        "schema": "lenses-train-rehearsal/1",
        **meta,
        "fits": True,
        "params": asdict(params),
        "measured": asdict(m),
        **throughput(flops, m, peak_flops),
        "memory": memory,
        "projection": asdict(proj),
        "flops_formula": FLOPS_FORMULA,
        "not_included": "cross-GPU communication (gradient all-reduce, negative gathering): one process",
    }


def _gib(value) -> str:
    if value is None:
        return "n/a"
    return f"{value / GIB:.1f} GiB" if value >= GIB else f"{value / 1024**2:.1f} MiB"


def _utilisation(r: dict, key: str) -> str:
    return f"{r[key]:.1%} of {r['peak_tflops']:.0f} TFLOP/s" if r[key] is not None else "n/a (no peak)"


def _recipe_line(r: dict) -> str:
    """What the projection keeps: the recipe's global batch, whatever --gpus is."""
    rec, p = r.get("recipe"), r["projection"]
    if rec is None:
        return ""
    if rec["source"] != "config":
        return (
            f"  another recipe (--images-per-step): {p['images_per_step']:,} images per step, not the "
            f"config's {rec['configured_images_per_step']:,}"
        )
    if p["gpus"] == rec["configured_gpus"]:
        return f"  the recipe's global batch: {p['images_per_step']:,} images per step, as configured"
    return (
        f"  the recipe's global batch is kept: {p['images_per_step']:,} images per step, written for "
        f"{rec['configured_gpus']} GPUs x {rec['configured_accum_steps']} accumulation steps; on {p['gpus']} "
        f"GPU(s) that is {p['accumulation']:g} accumulation steps (--images-per-step for another recipe)"
    )


def format_report(r: dict) -> str:
    """The report a user reads (the JSON carries the same figures)."""
    m, p, mem = r["measured"], r["projection"], r["memory"]
    lines = [
        f"rehearsal on {r['device']} ({r['dtype']}, checkpointing {r['checkpointing']}): "
        f"{m['images_per_batch']} images + {m['captions_per_batch']} captions per micro-batch, "
        f"~{m['prompts_per_image']:.1f} prompts per image, ~{m['image_input_tokens']:,.0f} tokens per image "
        f"input (padded to ~{m['image_input_padded_tokens']:,.0f}), ~{m['caption_tokens']:,.0f} per caption",
        f"timed {m['micro_batches']} micro-batches after {r['warmup_micro_batches']} warm-up",
        f"  seconds per micro-batch  {r['seconds_per_micro_batch']:.3f}",
        f"  images/s                 {r['images_per_s']:.2f}",
        f"  tokens/s                 {r['tokens_per_s']:,.0f}",
        f"  model FLOPs              {r['model_flops_per_micro_batch']:.3g} per micro-batch: "
        f"{r['achieved_model_tflops']:.3g} TFLOP/s, MFU {_utilisation(r, 'mfu')} (estimated)",
        f"  hardware FLOPs           {r['hardware_flops_per_micro_batch']:.3g} per micro-batch (padding and "
        f"recompute included): {r['achieved_hardware_tflops']:.3g} TFLOP/s, HFU {_utilisation(r, 'hfu')}",
    ]
    if mem["kind"] == "cuda":
        lines.append(
            f"  peak memory              {_gib(mem['peak_allocated_bytes'])} allocated, "
            f"{_gib(mem['peak_reserved_bytes'])} reserved of {_gib(mem['device_total_bytes'])}"
        )
    else:
        lines.append(
            f"  peak memory              n/a on CPU; tensor estimate {_gib(mem['estimated_bytes'])} "
            f"(weights, grads, optimizer, activations saved for backward); "
            f"process peak RSS {_gib(mem['peak_rss_bytes'])}"
        )
    lines += [
        f"projection: {p['steps']:,} steps x {p['images_per_step']:,} images on {p['gpus']} GPU(s) "
        f"({p['accumulation']:g} micro-batches per GPU per step): "
        f"{p['wall_hours']:,.1f} h wall, {p['gpu_hours']:,.1f} GPU-hours",
        _recipe_line(r),
        f"  ({r['not_included']} not included)",
    ]
    return "\n".join(line for line in lines if line)


def model_refusal_text(reason: str) -> str:
    return (
        f"refused: the model itself does not fit this card ({reason}). No micro-batch size helps: a card "
        "with more memory, or fewer weights on it, is needed."
    )


def refusal_text(images: int, reason: str, largest: int | None) -> str:
    head = f"refused: {images} images per micro-batch do not fit ({reason})."
    if largest is None:
        return head + " Not even 1 image fits: a larger card, or less memory per image, is needed."
    return (
        f"{head} The largest that fits (halving): {largest} images per micro-batch "
        f"(data.images_per_batch: {largest}). Keeping the images per optimizer step needs "
        f"{images // largest}x the accumulation steps, and each micro-batch then holds "
        f"{images // largest}x fewer in-batch negatives, which changes the recipe."
    )
