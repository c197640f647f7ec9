"""`lenses train-lora-clip`: the LoRA-CLIP baseline of seed 004 on IRFL's train split."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train-lora-clip",
        help="train the LoRA-CLIP baseline (seed 004) on IRFL's train split with hard literal negatives",
        description="Score IRFL's training phrases against their literal (distractor) images with the frozen "
        "open_clip model, keep the top-scored literal images as hard negatives, and train PEFT LoRA on "
        "the configured attention/projection layers (default: both towers, blocks 9-11) with L_dev. "
        "Writes <out>/adapter (for baselines.lora_clip.adapter_dir of `lenses evaluate`) and "
        "<out>/history.json. Models are loaded from local files only (docs/training.md).",
    )
    parser.add_argument(
        "--config", required=True, help="LoraClipConfig YAML, or a name in training/configs/ "
        "(lora-clip-vitb32, lora-clip-tiny)",
    )  # fmt: skip
    parser.add_argument("--out", help="run folder (overrides run.out_dir)")
    parser.add_argument("--pretrained", help="local open_clip checkpoint file (overrides clip.pretrained)")
    parser.add_argument("--train-csv", help="IRFL detection CSV (overrides data.train_csv)")
    parser.add_argument("--images", help="IRFL image folder (overrides data.images_dir)")
    parser.add_argument("--epochs", type=int, help="overrides optim.epochs")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from training.baselines.lora_clip.config import load_lora_clip_config
    from training.baselines.lora_clip.train import train_lora_clip

    overrides: dict = {"run": {}, "clip": {}, "data": {}, "optim": {}}
    for value, section, key in (
        (args.out, "run", "out_dir"),
        (args.pretrained, "clip", "pretrained"),
        (args.train_csv, "data", "train_csv"),
        (args.images, "data", "images_dir"),
        (args.epochs, "optim", "epochs"),
    ):
        if value is not None:
            overrides[section][key] = value
    try:
        result = train_lora_clip(load_lora_clip_config(args.config, overrides))
    except (FileNotFoundError, ValueError) as err:  # bad config or inputs: a message, not a traceback
        print(f"lenses train-lora-clip: error: {err}", file=sys.stderr)
        return 2
    print(f"{result.n_triples} triples; {result.n_trainable} of {result.n_total} parameters trained")
    print(f"L_dev over all triples: {result.loss_before:.4f} -> {result.loss_after:.4f}")
    print(f"adapter: {result.adapter_dir}")
    return 0
