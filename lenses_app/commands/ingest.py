"""`lenses ingest`: decode-check, hash and record candidate images from one or more sources.

`--source` and `--workers` are explicit overrides of `ingest.sources` / `ingest.workers`; the run
goes through `lenses_data.stages.entry` (lock and settings guard) like every stage command."""

from __future__ import annotations

import argparse

from lenses_app.stage_command import add_config_options
from lenses_data.config.pipeline import INGEST, spec_of


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(INGEST, help=spec_of(INGEST).help)
    parser.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="SRC",
        help="a source (repeatable); kind detected from the path, or forced with a prefix like tsv:PATH; "
        "default: ingest.sources of the config",
    )
    add_config_options(parser)
    parser.add_argument("--workers", type=int, help="decode processes (overrides ingest.workers)")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from lenses_app.stage_command import resolve, stage_error
    from lenses_data.candidates.sources import SourceError

    try:
        flags: dict = {"ingest": {"sources": args.source}} if args.source else {}
        if args.workers is not None:
            flags = {"ingest": {**flags.get("ingest", {}), "workers": max(1, args.workers)}}
        config = resolve(args, flags)
        from lenses_data.stages.ingest_exec import start_decoders

        start_decoders(config.ingest.workers)  # the decoders' imports overlap the ones below
        from lenses_data.stages.entry import guarded_stage
        from lenses_data.stages.ingest import checked_sources, run_ingest

        checked_sources(config.ingest.sources, config)  # a missing source says so, whatever the run holds
        with guarded_stage(INGEST, config):  # the lock, then the settings check
            summary = run_ingest(config.ingest.sources, config.run_dir, config)
    except Exception as error:  # noqa: BLE001 - an expected failure is one line and its exit code
        return stage_error(error, (SourceError, ValueError))
    print(summary.format())
    return 0
