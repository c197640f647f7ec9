"""`lenses ingest`: decode-check, hash and record candidate images from one or more sources.

`--source` and `--workers` are explicit overrides of `ingest.sources` / `ingest.workers`; the run
goes through `lenses_data.stages.entry.run_entered_stage` (lock, settings guard, the stage's
setup/close, `run_stage`, its yield judged) like every stage command."""

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
    import time

    from lenses_app.stage_command import report_accepted, resolve, stage_error
    from lenses_data.candidates.sources import SourceError

    started = time.monotonic()
    show = None
    try:
        flags: dict = {"ingest": {"sources": args.source}} if args.source else {}
        if args.workers is not None:
            flags = {"ingest": {**flags.get("ingest", {}), "workers": max(1, args.workers)}}
        config = resolve(args, flags)
        from lenses_data.stages.ingest_exec import start_decoders

        start_decoders(config.ingest.workers)  # the decoders' imports overlap the ones below
        from lenses_data.stages.entry import run_entered_stage
        from lenses_data.stages.ingest import checked_sources

        checked_sources(config.ingest.sources, config)  # a missing source says so, whatever the run holds
        show = _printer(config.run_dir, started)
        summary = run_entered_stage(INGEST, config)  # lock, settings, run_stage, then its yield
    except Exception as error:  # noqa: BLE001 - an expected failure is one line and its exit code
        return stage_error(error, (SourceError, ValueError), show)
    show(summary)
    report_accepted(summary)
    return 0


def _printer(run: str, started: float):
    """Print what RUN/ingest holds (its `_summary.json`, also when the stage was already done)."""
    import json
    import time
    from collections import Counter
    from pathlib import Path

    from lenses_data import io
    from lenses_data.stages.ingest import STAGE, SUMMARY_FILE, IngestSummary

    def show(_: dict) -> None:
        written = json.loads((io.stage_dir(run, STAGE) / SUMMARY_FILE).read_text())
        print(
            IngestSummary(
                Path(run), written["sources"], written["accepted"], Counter(written["rejected"]),
                Counter(written["skipped"]), written["shards"], time.monotonic() - started,
            ).format()
        )  # fmt: skip

    return show
