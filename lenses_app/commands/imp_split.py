"""`lenses imp-split`: the IMP (seed 003) Easy/Medium/Hard split of an export split's true pairs."""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "imp-split",
        help="split an export split's image-caption pairs into Easy/Medium/Hard by CLIP-ensemble voting",
        description="Calibrate a matching threshold per open_clip model (F1 argmax of its precision-recall "
        "curve on the calibration table of imp.calibration, unless the model has a fixed threshold), let "
        "the voters of imp.models vote on every caption of the split with its own image (the tie_breaker "
        "decides ties), and write <out>/imp/difficulty.parquet and thresholds.json. Easy: every voter "
        "accepts; Hard: the ensemble rejects; Medium: the rest. Models are loaded from local files only. "
        "`lenses evaluate` with the same config adds the per-difficulty metrics (docs/evaluation.md).",
    )
    parser.add_argument("--config", required=True, help="EvalConfig YAML with an `imp` section")
    parser.add_argument("--out", help="output folder (overrides out_dir; files go to <out>/imp/)")
    parser.add_argument("--export", help="export folder (overrides export_dir)")
    parser.add_argument("--split", choices=["train", "valid", "test"], help="split (overrides split)")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from training.evaluation.config import load_eval_config
    from training.evaluation.imp.split import write_imp_split

    overrides = {
        key: value
        for key, value in (("out_dir", args.out), ("export_dir", args.export), ("split", args.split))
        if value is not None
    }
    try:
        cfg = load_eval_config(args.config, overrides)
        paths = write_imp_split(cfg)
    except (FileNotFoundError, ValueError) as err:  # bad config or inputs: a message, not a traceback
        print(f"lenses imp-split: error: {err}", file=sys.stderr)
        return 2
    summary = json.loads(paths["thresholds"].read_text())
    print("pairs per difficulty: " + ", ".join(f"{k} {v}" for k, v in summary["counts"].items()))
    for name, info in summary["models"].items():
        print(f"{info['role']} {name}: threshold {info['threshold']:.4f} ({info['source']})")
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0
