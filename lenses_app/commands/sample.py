"""`lenses sample`: build the offline sample candidate pool."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sample",
        help="build a small real candidate pool (photos shipped with scikit-image/scikit-learn/matplotlib, "
        "near-duplicate variants, broken files, a CC3M-style TSV and sample_manifest.json)",
    )
    parser.add_argument(
        "--out", required=True, help="output folder (empty, or an earlier sample pool to rebuild)"
    )
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    import sys
    from collections import Counter

    from lenses_data.candidates.sample import MANIFEST, build_sample_pool

    try:
        manifest = build_sample_pool(args.out)
    except FileExistsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    kinds = Counter(entry["kind"].split(":", 1)[0] for entry in manifest["files"])
    print(f"sample pool written to {args.out} ({len(manifest['files'])} files: "
          + ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
          + f"; {len(manifest['tsv']['rows'])} TSV rows); see {MANIFEST}")  # fmt: skip
    return 0
