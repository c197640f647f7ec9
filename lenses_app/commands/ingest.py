"""`lenses ingest`: decode-check, hash and record candidate images from one or more sources."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ingest",
        help="read image folders, CC3M-style TSV/CSV, img2dataset Parquet, WebDataset .tar or WikiArt roots "
        "into RUN/ingest (accepted images) and RUN/rejections (everything refused, with a reason)",
    )
    parser.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="SRC",
        help="a source (repeatable); kind detected from the path, or forced with a prefix like tsv:PATH; "
        "default: ingest.sources of the config",
    )
    parser.add_argument("--run", help="run directory (default: run_dir of the config)")
    parser.add_argument("--config", help="pipeline YAML config (default: built-in defaults)")
    parser.add_argument("--workers", type=int, help="decode processes (overrides ingest.workers)")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    import sys

    from lenses_data.config import ConfigError, load_config

    try:
        config = load_config(args.config)
    except (ConfigError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.workers is not None:
        config.ingest.workers = max(1, args.workers)
    from lenses_data.stages.ingest_exec import start_decoders

    start_decoders(config.ingest.workers)  # the decoders' imports overlap the ones below
    from lenses_data.candidates.sources import SourceError
    from lenses_data.stages.ingest import run_ingest

    try:
        summary = run_ingest(args.source, args.run or config.run_dir, config)
    except (ConfigError, SourceError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(summary.format())
    return 0
