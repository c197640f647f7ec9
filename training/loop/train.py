"""The training loop (nanoGPT style): one function, read top to bottom.

Single process: `lenses train --config CFG`. Multi-GPU: `torchrun --nproc-per-node 8 -m
training.loop --config CFG` (or `lenses train` under torchrun); contrastive negatives are
gathered across ranks (training.loop.dist).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from training.retriever.config import TrainConfig, load_train_config

log = logging.getLogger(__name__)

COUNTERS = (
    "n_prompts_dropped",
    "n_captions_truncated",
    "n_images_too_long",
    "n_prompts_over_token_limit",
    "n_texts_sanitized",
)


@dataclass
class TrainResult:
    run_dir: Path
    start_step: int
    final_step: int
    history: list[dict] = field(default_factory=list)  # one dict of mean losses per optimizer step
    checkpoint: Path | None = None


def resolve_base(cfg: TrainConfig, records, ctx) -> Path:
    """Local base model directory; source=tiny materialises a random tiny base once (rank 0)."""
    from training.loop.dist import barrier

    if cfg.model.source == "local":
        if not cfg.model.path or not Path(cfg.model.path).exists():
            raise FileNotFoundError(
                f"model.path must be a local BGE-VL-MLLM-S1 directory, got {cfg.model.path!r}"
            )
        return Path(cfg.model.path)
    from training.dryrun.tiny import materialize_tiny_base

    base = Path(cfg.run.out_dir) / "base"
    if ctx.is_main:
        texts = [t for r in records for t, _ in r.captions + r.prompts]
        materialize_tiny_base(base, texts, cfg.model.tiny)
    barrier(ctx)
    return base


def _log_step(run_dir: Path, row: dict) -> None:
    with open(run_dir / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps(row) + "\n")
    log.info("step %(step)d lr %(lr).2e total %(total).4f tokens %(tokens)d (%(sec).1fs)", row)


@dataclass
class _Run:
    """Everything the loop needs, built by `_setup`."""

    cfg: TrainConfig
    ctx: object
    device: torch.device
    run_dir: Path
    base: Path
    retriever: torch.nn.Module
    model: torch.nn.Module  # DDP-wrapped retriever under torchrun, else the retriever
    optimizer: torch.optim.Optimizer
    step: int
    stop: int
    batches: object


def _setup(cfg: TrainConfig, max_steps: int | None) -> _Run:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from training.loop.checkpoint import latest_checkpoint, load_checkpoint
    from training.loop.data import BatchPlan, MicroBatchDataset, load_records, make_loader
    from training.loop.dist import init_distributed, make_gather
    from training.loop.inputs import Collator
    from training.loop.optim import build_optimizer
    from training.retriever.build import build_retriever, resolve_device

    device = resolve_device(cfg.run.device)
    ctx = init_distributed(device.type)
    device = torch.device("cuda", ctx.local_rank) if device.type == "cuda" else device
    torch.manual_seed(cfg.run.seed + ctx.rank)
    run_dir = Path(cfg.run.out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    records = load_records(
        cfg.data.export_dir, cfg.data.split, lenses=cfg.data.lenses, fraction=cfg.data.fraction
    )
    base = resolve_base(cfg, records, ctx).resolve()  # absolute: encode may run from elsewhere
    checkpointing = cfg.run.gradient_checkpointing
    retriever, processor, _ = build_retriever(
        cfg, base, device, checkpointing=device.type == "cuda" if checkpointing is None else checkpointing
    )
    retriever.gather = make_gather(ctx)
    optimizer = build_optimizer(retriever, cfg.optim)
    ckpt = latest_checkpoint(run_dir) if cfg.run.resume else None
    step = load_checkpoint(ckpt, retriever, optimizer) if ckpt is not None else 0
    if ckpt is not None:
        log.info("resumed from %s at step %d", ckpt, step)
    if ctx.is_main:
        processor.save_pretrained(run_dir / "processor")
    ddp_ids = [ctx.local_rank] if device.type == "cuda" else None
    model = DDP(retriever, device_ids=ddp_ids) if ctx.enabled else retriever

    accum, stop = cfg.optim.accum_steps, min(max_steps or cfg.optim.max_steps, cfg.optim.max_steps)
    d = cfg.data
    plan = BatchPlan(
        [len(r.captions) for r in records],
        d.images_per_batch,
        d.captions_per_image,
        cfg.run.seed,
        ctx.rank,
        ctx.world,
    )
    dataset = MicroBatchDataset(
        records, plan, Collator(processor, d, lens_mode=cfg.loss.mode == "lens"), d.image_size
    )
    loader = make_loader(
        dataset, step * accum, stop * accum, d.num_workers
    )  # micro-steps of the remaining run
    return _Run(cfg, ctx, device, run_dir, base, retriever, model, optimizer, step, stop, iter(loader))


def train(cfg: TrainConfig, max_steps: int | None = None) -> TrainResult:
    """Train (or resume) until cfg.optim.max_steps, or `max_steps` if given (a stop point that
    keeps the schedule of the full run, e.g. to test resume)."""
    from training.loop.checkpoint import save_checkpoint
    from training.loop.dist import reduce_mean
    from training.loop.inputs import to_device
    from training.loop.optim import lr_at, set_lr

    r = _setup(cfg, max_steps)
    ctx, accum, step = r.ctx, cfg.optim.accum_steps, r.step
    result = TrainResult(r.run_dir, step, step)
    r.model.train()
    t0 = time.time()
    while step < r.stop:
        lr = lr_at(step, cfg.optim)
        set_lr(r.optimizer, lr)
        sums: dict[str, float] = {}
        counts = dict.fromkeys((*COUNTERS, "tokens"), 0)  # tokens: this rank's real tokens
        for micro in range(accum):
            batch = next(r.batches)
            for key in COUNTERS:  # inputs shortened to fit the limits: reported, never silent
                counts[key] += int(batch[key])
            counts["tokens"] += int(batch["img_attention_mask"].sum() + batch["txt_attention_mask"].sum())
            batch = to_device(batch, r.device)
            sync = r.model.no_sync() if ctx.enabled and micro < accum - 1 else contextlib.nullcontext()
            with sync:  # bf16 autocast (GPU) lives in LensRetriever; losses are computed in float32
                out = r.model(batch)
                # x world: DDP averages over ranks, but every rank holds the full global-batch loss
                (out["total"] * ctx.world / accum).backward()
            for k, v in out.items():
                sums[k] = sums.get(k, 0.0) + float(reduce_mean(v.detach(), ctx)) / accum
        grad_norm = torch.nn.utils.clip_grad_norm_(r.retriever.parameters(), cfg.optim.grad_clip)
        r.optimizer.step()
        r.optimizer.zero_grad(set_to_none=True)
        step += 1
        row = {
            "step": step,
            "lr": lr,
            "grad_norm": float(grad_norm),
            "sec": round(time.time() - t0, 3),
            **sums,
            **counts,
        }
        if not math.isfinite(row["total"]):
            raise FloatingPointError(f"non-finite loss at step {step}: {row}")
        result.history.append(row)
        if ctx.is_main and (step % cfg.run.log_every == 0 or step == r.stop):
            _log_step(r.run_dir, row)
        if ctx.is_main and (step % cfg.run.save_every == 0 or step == r.stop):
            dump = cfg.model_dump(mode="json")
            result.checkpoint = save_checkpoint(
                r.run_dir, step, r.retriever, r.optimizer, dump, str(r.base), cfg.run.keep_last
            )
    result.final_step = step
    return result


def main(argv: list[str] | None = None) -> int:
    """torchrun entry point: `torchrun --nproc-per-node 8 -m training.loop --config CFG`."""
    parser = argparse.ArgumentParser(description="Train the lens-slot retriever")
    parser.add_argument("--config", required=True)
    parser.add_argument("--max-steps", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    result = train(load_train_config(args.config), max_steps=args.max_steps)
    log.info("finished at step %d (%s)", result.final_step, result.checkpoint)
    from training.loop.dist import shutdown

    shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
