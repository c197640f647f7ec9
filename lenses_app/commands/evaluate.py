"""`lenses evaluate`: score the lens-slot retriever and baselines, write every report."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="evaluate a trained retriever: lens-aware metrics, baselines, ablations, reports",
        description="Compute the paper's retrieval metrics (per-lens R@K under the main paper's lens-slot "
        "protocol and the lens/full-gallery protocols, macro R@K over lenses, RSUM, LC/All/DCG@10, meanR/medR "
        "of the best and of all positives, mAP@R, IMP AUPRC with the same image's discarded texts as "
        "negatives), fallback rates, routing, similarity ablations, baselines (a CLIP fine-tuned on Lenses "
        "among them), the backbone-scaling and generator-swap tables (other builds' prompts or captions, the "
        "same model) and external benchmarks (ArtEmis, IRFL, COCO and Flickr30K) for one export split, and "
        "write metrics.json, report.md (the papers' tables first, rows it cannot produce marked) and "
        "routing.png to the output folder (definitions and the list of every table: docs/evaluation.md).",
    )
    parser.add_argument(
        "--config", required=True, help="EvalConfig YAML (or a name in training/configs/, e.g. eval-tiny)"
    )
    parser.add_argument("--out", help="output folder (overrides out_dir)")
    parser.add_argument("--export", help="export folder (overrides export_dir)")
    parser.add_argument(
        "--encodings", help="`lenses encode` folder of the lens model (overrides encodings_dir)"
    )
    parser.add_argument(
        "--split", choices=["train", "valid", "test"], help="split to evaluate (overrides split)"
    )
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from training.evaluation.config import load_eval_config
    from training.evaluation.run import run_evaluation, summary_lines

    overrides = {
        key: value
        for key, value in (
            ("out_dir", args.out),
            ("export_dir", args.export),
            ("encodings_dir", args.encodings),
            ("split", args.split),
        )
        if value is not None
    }
    try:
        cfg = load_eval_config(args.config, overrides)
        results, paths = run_evaluation(cfg)
    except (FileNotFoundError, ValueError) as err:  # bad config or inputs: a message, not a traceback
        print(f"lenses evaluate: error: {err}", file=sys.stderr)
        return 2
    for line in summary_lines(results):
        print(line)
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0
