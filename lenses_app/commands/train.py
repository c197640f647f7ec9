"""`lenses train`: fine-tune the lens-slot retriever (or the global-only baseline)."""

from __future__ import annotations

import argparse


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
    parser.set_defaults(func=handle)


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
    result = train(load_train_config(args.config, overrides), max_steps=args.max_steps)
    shutdown()
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun only rank 0 reports
        last = result.history[-1] if result.history else {}
        total = last.get("total", float("nan"))
        print(f"steps {result.start_step} -> {result.final_step}; last total loss {total:.4f}")
        print(f"checkpoint: {result.checkpoint}")
    return 0
