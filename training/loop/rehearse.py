"""`lenses train --rehearse`: time the configured training step before a multi-day job starts.

Builds the configured retriever with `assemble_retriever`, as `build_retriever` does for
`train()` (the same LoRA, dtype, autocast, checkpointing and whatever else it applies), on a base
made from its model directory's config.json with random weights straight on the device; feeds
synthetic micro-batches of the real shapes (rehearsal_batches);
runs the step of `train()` (forward, loss / accumulation, backward, grad clip, fused AdamW step)
for warm-up and then timed micro-batches, and reports the figures of rehearsal_report (FLOPs from
rehearsal_flops). A batch that does not fit (CUDA out-of-memory, or over --memory-budget-gib) is
refused with the largest batch that fits, found by halving; a model whose weights alone do not fit
is refused too (building it is inside the same guard), naming no batch.
"""

from __future__ import annotations

import gc
import math
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import torch

from training.loop.inputs import to_device
from training.loop.rehearsal_batches import FILLER, Shape, patch_tokens, synthetic_batches, vision_tokens
from training.loop.rehearsal_flops import TokenCounts, flops_per_micro_batch, matmul_weights, padded_tokens
from training.loop.rehearsal_memory import NOT_FITTING, MemoryTracker, not_fitting_reason
from training.loop.rehearsal_report import (
    Measured,
    ParamCounts,
    known_peak_flops,
    model_refusal_text,
    project,
    refusal_text,
    report_dict,
)
from training.retriever.build import resolve_dtype
from training.retriever.config import TrainConfig


class RehearsalError(ValueError):
    """A rehearsal that cannot start here (no model directory, no GPU), worded for the user."""


@dataclass
class RehearsalOptions:
    gpus: int = 8  # GPUs of the projected run
    warmup: int = 1  # micro-batches (each followed by an optimizer step) before timing
    steps: int = 1  # timed optimizer steps of optim.accum_steps micro-batches each
    shape: Shape = field(default_factory=Shape)
    # default: the recipe's global batch, images_per_batch x accum_steps x optim.recipe_gpus, kept
    # whatever `gpus` is (the accumulation changes instead); a number here is another recipe's
    images_per_step: int | None = None
    recipe_steps: int | None = None  # default: optim.max_steps
    peak_tflops: float | None = None  # default: the card's known dense bf16 peak
    memory_budget_gib: float | None = None  # an injected cap (CUDA: a real allocator limit)
    random_weights: bool = True  # False: load the weights (model.path) as train() does


def _base_dir(cfg: TrainConfig) -> Path:
    if cfg.model.source == "local":
        if not cfg.model.path or not (Path(cfg.model.path) / "config.json").exists():
            raise RehearsalError(f"model.path must be a model directory with config.json: {cfg.model.path!r}")
        return Path(cfg.model.path)
    from training.dryrun.tiny import materialize_tiny_base

    return materialize_tiny_base(Path(cfg.run.out_dir) / "rehearsal-base", [" ".join(FILLER)], cfg.model.tiny)


def count_params(retriever: torch.nn.Module) -> ParamCounts:
    """All parameters; trainable; those of the decoder and the projector that runs; the tower's."""
    total = trainable = lm = vision = 0
    for name, p in retriever.named_parameters():
        total += p.numel()
        trainable += p.numel() if p.requires_grad else 0
        if "vision_tower" in name:
            vision += p.numel()
        elif not any(skip in name for skip in ("embed_tokens", "lm_head", "original_module")):
            lm += p.numel()  # lookups, the unused lm_head and peft's idle projector copy left out
    return ParamCounts(total, trainable, lm, vision)


def _micro_step(retriever, batch: dict, device, accum: int, tracker: MemoryTracker) -> None:
    """forward, loss, backward as train() does them on one process."""
    with tracker.forward():
        out = retriever(to_device(batch, device))
    tracker.check()
    if not math.isfinite(float(out["total"].detach())):
        raise FloatingPointError(f"non-finite loss in the rehearsal: {float(out['total'])}")
    (out["total"] / accum).backward()


def _optimizer_step(retriever, optimizer, grad_clip: float) -> None:
    torch.nn.utils.clip_grad_norm_(retriever.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(retriever, optimizer, batches, cfg: TrainConfig, opts, device, tracker) -> float:
    """Warm-up, then `opts.steps` optimizer steps of accum micro-batches; returns their seconds."""
    accum = cfg.optim.accum_steps
    for i in range(opts.warmup):
        _micro_step(retriever, batches[i % len(batches)], device, 1, tracker)
        _optimizer_step(retriever, optimizer, cfg.optim.grad_clip)
    _sync(device)
    start = time.perf_counter()
    for i in range(opts.steps * accum):
        _micro_step(retriever, batches[i % len(batches)], device, accum, tracker)
        if (i + 1) % accum == 0:
            _optimizer_step(retriever, optimizer, cfg.optim.grad_clip)
    _sync(device)
    return time.perf_counter() - start


def _measured(batches: list[dict], micro: int, seconds: float, patch: int, chunks: int) -> Measured:
    n = len(batches)

    def mean(f) -> float:
        return sum(float(f(b)) for b in batches) / n

    img, txt = mean(lambda b: b["img_attention_mask"].sum()), mean(lambda b: b["txt_attention_mask"].sum())
    padded = mean(
        lambda b: (
            padded_tokens(b["img_attention_mask"], chunks) + padded_tokens(b["txt_attention_mask"], chunks)
        )
    )
    images, captions = batches[0]["img_input_ids"].shape[0], batches[0]["txt_input_ids"].shape[0]
    return Measured(
        micro, seconds, images, captions, img + txt, img / images, txt / captions,
        mean(lambda b: vision_tokens(b, patch)), padded, mean(lambda b: patch_tokens(b, patch)),
        mean(lambda b: (b["img_slot_lens"] >= 0).sum()) / images,
        mean(lambda b: b["img_attention_mask"].shape[1]),
    )  # fmt: skip


def _largest_fit(retriever, optimizer, processor, cfg, opts, device, tracker) -> int | None:
    """Halve the micro-batch until one micro-step and an optimizer step fit; None if 1 does not."""
    lens_mode = cfg.loss.mode == "lens"
    n = cfg.data.images_per_batch // 2
    while n >= 1:
        _release(optimizer, device, tracker)
        data = cfg.data.model_copy(update={"images_per_batch": n})
        try:
            (batch,) = synthetic_batches(processor, data, lens_mode, opts.shape, 1, cfg.run.seed)
            _micro_step(retriever, batch, device, 1, tracker)
            _optimizer_step(retriever, optimizer, cfg.optim.grad_clip)
            return n
        except NOT_FITTING:
            n //= 2
    return None


def _release(optimizer, device: torch.device, tracker: MemoryTracker) -> None:
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    tracker.reset()


def build_for_rehearsal(cfg: TrainConfig, base: Path, device, checkpointing: bool, random_weights: bool):
    """`build_retriever` (weights loaded), or the same assembly on a base built from the directory's
    config.json with random weights allocated straight on the device (no weight files; a 7B base
    is built on the card in seconds)."""
    from training.retriever.build import assemble_retriever, build_retriever

    if not random_weights:
        return build_retriever(cfg, base, device, checkpointing=checkpointing)
    from transformers import AutoProcessor, LlavaNextConfig, LlavaNextForConditionalGeneration

    processor = AutoProcessor.from_pretrained(str(base))
    processor.tokenizer.padding_side = "right"  # as build_retriever sets it
    kwargs = {"dtype": resolve_dtype(cfg.run.precision, device)}
    if cfg.model.attn_implementation:
        kwargs["attn_implementation"] = cfg.model.attn_implementation
    with torch.device(device):
        model = LlavaNextForConditionalGeneration._from_config(
            LlavaNextConfig.from_pretrained(str(base)), **kwargs
        )
    return assemble_retriever(cfg, model, processor, device, checkpointing=checkpointing)


def _meta(cfg: TrainConfig, opts, base: Path, device, config_name: str) -> dict:
    return {
        "config": config_name,
        "model_dir": str(base),
        "random_weights": opts.random_weights,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": str(resolve_dtype(cfg.run.precision, device)).removeprefix("torch."),
        "checkpointing": checkpointing_of(cfg, device),
        "speed": cfg.speed.model_dump(),
        "accum_steps": cfg.optim.accum_steps,
        "warmup_micro_batches": opts.warmup,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "torch": torch.__version__,
    }


def checkpointing_of(cfg: TrainConfig, device: torch.device) -> bool:
    """As train() resolves it: run.gradient_checkpointing, or on when running on a GPU."""
    setting = cfg.run.gradient_checkpointing
    return device.type == "cuda" if setting is None else setting


def _refusal(meta: dict, images: int, failure: str, largest: int | None, text: str) -> dict:
    return {**meta, "schema": "lenses-train-rehearsal/1", "fits": False, "images_per_batch": images,
            "reason": failure, "largest_fitting_images_per_batch": largest, "refusal": text}  # fmt: skip


def _build_guarded(cfg: TrainConfig, opts, base: Path, device, tracker: MemoryTracker):
    """(retriever, processor, optimizer, build seconds), or the reason the model does not fit."""
    from training.loop.optim import build_optimizer

    start = time.perf_counter()
    try:
        retriever, processor, _ = build_for_rehearsal(
            cfg, base, device, checkpointing_of(cfg, device), opts.random_weights
        )
        retriever.train()
        optimizer = build_optimizer(retriever, cfg.optim)
        tracker.attach(retriever, optimizer)
    except NOT_FITTING as error:  # the weights alone: no batch size helps
        return not_fitting_reason(error)
    return retriever, processor, optimizer, time.perf_counter() - start


def rehearse(cfg: TrainConfig, opts: RehearsalOptions, config_name: str = "") -> dict:
    """The rehearsal's report (`fits: false` with a refusal and the largest fitting batch)."""
    from training.retriever.build import resolve_device

    device = resolve_device(cfg.run.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RehearsalError("the config's run.device is cuda, but torch sees no CUDA device on this machine")
    device = torch.device("cuda", torch.cuda.current_device()) if device.type == "cuda" else device
    torch.manual_seed(cfg.run.seed)
    base = _base_dir(cfg)
    meta, images = _meta(cfg, opts, base, device, config_name), cfg.data.images_per_batch
    with MemoryTracker(device, opts.memory_budget_gib) as tracker:
        built = _build_guarded(cfg, opts, base, device, tracker)
        if isinstance(built, str):
            _release(None, device, tracker)
            return _refusal(meta, images, built, None, model_refusal_text(built))
        retriever, processor, optimizer, meta["build_seconds"] = built
        lens_mode = cfg.loss.mode == "lens"
        batches = synthetic_batches(processor, cfg.data, lens_mode, opts.shape, 2, cfg.run.seed)
        failure = None
        try:
            seconds = _timed(retriever, optimizer, batches, cfg, opts, device, tracker)
        except NOT_FITTING as error:  # handled below: the traceback holds the failed step's tensors
            failure = not_fitting_reason(error)
        if failure is not None:
            largest = _largest_fit(retriever, optimizer, processor, cfg, opts, device, tracker)
            return _refusal(meta, images, failure, largest, refusal_text(images, failure, largest))
        memory = tracker.report()
    return _report(cfg, opts, meta, retriever, batches, seconds, memory)


def _report(cfg: TrainConfig, opts, meta: dict, retriever, batches, seconds: float, memory: dict) -> dict:
    config = retriever.net.get_base_model().config
    patch = config.vision_config.patch_size
    measured = _measured(batches, opts.steps * cfg.optim.accum_steps, seconds, patch, cfg.speed.length_chunks)
    recipe = recipe_of(cfg, opts)
    proj = project(
        seconds / measured.micro_batches,
        measured.images_per_batch,
        opts.recipe_steps or cfg.optim.max_steps,
        recipe["images_per_step"],
        opts.gpus,
    )
    peak = opts.peak_tflops * 1e12 if opts.peak_tflops else known_peak_flops(meta["device"])
    weights = matmul_weights(retriever, meta["checkpointing"], cfg.speed.vision_no_grad)
    tokens = TokenCounts(
        measured.lm_tokens, measured.lm_padded_tokens, measured.vision_tokens, measured.patch_tokens
    )
    flops = flops_per_micro_batch(weights, tokens)
    report = report_dict(meta, count_params(retriever), measured, memory, peak, proj, flops)
    return {**report, "matmul_weights": asdict(weights), "recipe": recipe}


def recipe_of(cfg: TrainConfig, opts) -> dict:
    """The projected recipe's global batch: the config's (kept whatever --gpus is), or another one."""
    configured = cfg.data.images_per_batch * cfg.optim.accum_steps * cfg.optim.recipe_gpus
    return {
        "configured_images_per_step": configured,
        "configured_gpus": cfg.optim.recipe_gpus,
        "configured_accum_steps": cfg.optim.accum_steps,
        "images_per_step": opts.images_per_step or configured,
        "source": "--images-per-step" if opts.images_per_step else "config",
    }
