"""`lenses train`: fine-tune the lens-slot retriever (or the global-only baseline)."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train the lens-slot retriever from an export folder (resumes from the latest checkpoint)",
        description="Fine-tune BGE-VL-MLLM (or the tiny test model) with LoRA, lens tokens and the lens-aware "
        "losses of the paper. Under torchrun every rank runs this command and negatives are gathered across "
        "ranks. The run resumes from RUN/checkpoints/ unless --no-resume is given.",
    )
    parser.add_argument(
        "--config", required=True, help="TrainConfig YAML, or a name in training/configs/ (tiny, h200x8)"
    )
    parser.add_argument("--export", help="export folder (overrides data.export_dir)")
    parser.add_argument("--out", help="run folder for checkpoints and metrics (overrides run.out_dir)")
    parser.add_argument("--model-path", help="local BGE-VL-MLLM-S1 directory (overrides model.path)")
    parser.add_argument("--max-steps", type=int, help="stop at this step, keeping the configured LR schedule")
    parser.add_argument(
        "--mode", choices=["lens", "global"], help="lens model or global-only baseline (overrides loss.mode)"
    )
    parser.add_argument(
        "--no-resume", action="store_true", help="start from step 0 even if checkpoints exist"
    )
    _rehearsal_arguments(parser)
    parser.set_defaults(func=handle)


def _rehearsal_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "rehearsal (--rehearse)",
        "Time the configured training step on this machine before a long run: the retriever built from "
        "the model directory's config.json with random weights on the device (no weight files, no export "
        "needed), synthetic micro-batches of the real shapes, warm-up then timed micro-batches. Prints "
        "seconds per micro-batch, images/s, tokens/s, peak memory, model and hardware FLOPs (MFU, HFU) and "
        "the recipe's wall time and GPU-hours on --gpus GPUs. Exit 2 when the model or the batch does not "
        "fit, naming the largest batch that does.",
    )
    group.add_argument("--rehearse", action="store_true", help="rehearse instead of training")
    group.add_argument(
        "--gpus",
        type=int,
        default=8,
        help="GPUs of the projected run (default 8); the recipe's global batch (images_per_batch x accum_steps "
        "x optim.recipe_gpus) is kept and the accumulation changes",
    )
    group.add_argument("--warmup", type=int, default=1, help="warm-up micro-batches (default 1)")
    group.add_argument(
        "--rehearse-steps",
        type=int,
        default=1,
        help="timed optimizer steps of optim.accum_steps micro-batches",
    )
    group.add_argument(
        "--images-per-step",
        type=int,
        help="another recipe's images per optimizer step (default: the config's, images_per_batch x "
        "accum_steps x optim.recipe_gpus)",
    )
    group.add_argument(
        "--recipe-steps", type=int, help="optimizer steps of the projected recipe (default optim.max_steps)"
    )
    group.add_argument(
        "--worst-case",
        action="store_true",
        help="max_prompts_per_image prompts and max_caption_tokens captions (default: prompts per image "
        "drawn from the paper's distribution, so batches pad as real ones do)",
    )
    group.add_argument(
        "--prompts-per-image",
        type=int,
        help="the same number of prompts for every image instead of the drawn ones (no padding between them)",
    )
    group.add_argument(
        "--peak-tflops", type=float, help="the card's dense bf16 peak (known: H100, H200, A100)"
    )
    group.add_argument(
        "--memory-budget-gib",
        type=float,
        help="cap memory at this (CUDA: an allocator limit; CPU: the tensor-size estimate) to test a smaller card",
    )
    group.add_argument(
        "--load-weights", action="store_true", help="load the real weights instead of random ones"
    )
    group.add_argument(
        "--json", dest="json_out", help="also write the report as JSON here (lenses plan reads it)"
    )


def _rehearse(args: argparse.Namespace, cfg) -> int:
    import json
    from pathlib import Path

    from training.loop.rehearsal_batches import Shape
    from training.loop.rehearsal_report import format_report
    from training.loop.rehearse import RehearsalError, RehearsalOptions, rehearse

    opts = RehearsalOptions(
        gpus=args.gpus,
        warmup=args.warmup,
        steps=args.rehearse_steps,
        shape=Shape.worst_case(cfg.data)
        if args.worst_case
        else Shape(prompts_per_image=args.prompts_per_image),
        images_per_step=args.images_per_step,
        recipe_steps=args.recipe_steps,
        peak_tflops=args.peak_tflops,
        memory_budget_gib=args.memory_budget_gib,
        random_weights=not args.load_weights,
    )
    try:
        report = rehearse(cfg, opts, args.config)
    except RehearsalError as error:  # no model directory, no GPU: one clear line
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if not report["fits"]:
        print(f"error: {report['refusal']}", file=sys.stderr)
        return 2
    print(format_report(report))
    return 0


def handle(args: argparse.Namespace) -> int:
    import os

    from training.loop.dist import shutdown
    from training.loop.train import train
    from training.retriever.config import load_train_config

    overrides: dict = {"data": {}, "run": {}, "loss": {}, "model": {}}
    if args.model_path:
        overrides["model"]["path"] = args.model_path
    if args.export:
        overrides["data"]["export_dir"] = args.export
    if args.out:
        overrides["run"]["out_dir"] = args.out
    if args.mode:
        overrides["loss"]["mode"] = args.mode
    if args.no_resume:
        overrides["run"]["resume"] = False
    cfg = load_train_config(args.config, overrides)
    if args.rehearse:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            print("error: --rehearse runs in one process; start it without torchrun", file=sys.stderr)
            return 2
        return _rehearse(args, cfg)
    result = train(cfg, max_steps=args.max_steps)
    shutdown()
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun only rank 0 reports
        last = result.history[-1] if result.history else {}
        total = last.get("total", float("nan"))
        print(f"steps {result.start_step} -> {result.final_step}; last total loss {total:.4f}")
        print(f"checkpoint: {result.checkpoint}")
    return 0
