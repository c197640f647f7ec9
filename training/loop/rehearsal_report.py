"""The rehearsal's figures: throughput, estimated MFU and the recipe's projection (no torch here).

FLOPs per micro-batch (an estimate; documented in docs/training.md):

    6 x N_lm x lm_tokens  +  2 x N_vision x vision_tokens

N_lm: language-model and projector parameters without the token embedding (a lookup, no
matmul); lm_tokens: the real (unpadded) tokens of the micro-batch's image and caption inputs.
6 = forward 2 + backward 4, the usual count for a trained path. Here the LM weights are frozen
(LoRA), so the weight-gradient half of the backward is skipped, but gradient checkpointing
recomputes the forward (2), so 6 N stays the hardware count to within LoRA's share. The vision
tower is frozen and before every trainable weight: forward only, 2 N per patch token.
Attention's O(L^2) FLOPs are left out (an underestimate of ~10% at ~3,000-token inputs).
MFU = FLOPs per micro-batch / seconds per micro-batch / the card's dense bf16 peak.

Projection of a recipe on G GPUs: each optimizer step takes `images_per_step` images; one GPU
does a micro-batch of `images_per_batch`, so a step is images_per_step / (images_per_batch x G)
micro-batches per GPU (the accumulation steps) and

    wall = steps x accumulation x seconds per micro-batch,    GPU-hours = wall x G.

The rehearsal runs on one process: the gradient all-reduce and negative gathering across GPUs
(NCCL) are not in the figure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from lenses_data.plan.training import project_training

GIB = 1024**3

# Dense (not sparse) bf16 tensor-core peaks from NVIDIA's data sheets, in FLOP/s; matched by name.
KNOWN_PEAKS: tuple[tuple[str, float], ...] = (
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),  # SXM and NVL
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
    lm: int  # language model + projector, token embedding left out
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
    vision_tokens: float  # CLIP patch tokens per micro-batch (tiles x patches)


def flops_per_micro_batch(params: ParamCounts, m: Measured) -> float:
    return 6.0 * params.lm * m.lm_tokens + 2.0 * params.vision * m.vision_tokens


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


def throughput(params: ParamCounts, m: Measured, peak_flops: float | None) -> dict:
    """Seconds per micro-batch, images/s, tokens/s, achieved TFLOP/s and MFU (None without a peak)."""
    sec = m.seconds / m.micro_batches
    flops = flops_per_micro_batch(params, m)
    return {
        "seconds_per_micro_batch": sec,
        "images_per_s": m.images_per_batch / sec,
        "tokens_per_s": m.lm_tokens / sec,
        "flops_per_micro_batch": flops,
        "achieved_tflops": flops / sec / 1e12,
        "peak_tflops": peak_flops / 1e12 if peak_flops else None,
        "mfu": flops / sec / peak_flops if peak_flops else None,
    }


def report_dict(meta: dict, params: ParamCounts, m: Measured, memory: dict, peak_flops, proj) -> dict:
    """The rehearsal's JSON (schema lenses-train-rehearsal/1); `lenses plan` reads it."""
    return {
        "schema": "lenses-train-rehearsal/1",
        **meta,
        "fits": True,
        "params": asdict(params),
        "measured": asdict(m),
        **throughput(params, m, peak_flops),
        "memory": memory,
        "projection": asdict(proj),
        "flops_formula": "6 x N_lm x lm_tokens + 2 x N_vision x vision_tokens (attention left out)",
        "not_included": "cross-GPU communication (gradient all-reduce, negative gathering): one process",
    }


def _gib(value) -> str:
    if value is None:
        return "n/a"
    return f"{value / GIB:.1f} GiB" if value >= GIB else f"{value / 1024**2:.1f} MiB"


def format_report(r: dict) -> str:
    """The report a user reads (the JSON carries the same figures)."""
    m, p, mem = r["measured"], r["projection"], r["memory"]
    mfu = f"{r['mfu']:.1%} of {r['peak_tflops']:.0f} TFLOP/s" if r["mfu"] is not None else "n/a (no peak)"
    lines = [
        f"rehearsal on {r['device']} ({r['dtype']}, checkpointing {r['checkpointing']}): "
        f"{m['images_per_batch']} images + {m['captions_per_batch']} captions per micro-batch, "
        f"~{m['image_input_tokens']:,.0f} tokens per image input, ~{m['caption_tokens']:,.0f} per caption",
        f"timed {m['micro_batches']} micro-batches after {r['warmup_micro_batches']} warm-up",
        f"  seconds per micro-batch  {r['seconds_per_micro_batch']:.3f}",
        f"  images/s                 {r['images_per_s']:.2f}",
        f"  tokens/s                 {r['tokens_per_s']:,.0f}",
        f"  estimated TFLOP/s        {r['achieved_tflops']:.3g} (MFU {mfu})",
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
        f"  ({r['not_included']} not included)",
    ]
    return "\n".join(lines)


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
