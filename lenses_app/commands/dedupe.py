"""`lenses dedupe`: near-duplicate groups (perceptual hash + optional CLIP) and one survivor each."""

from __future__ import annotations

import argparse

from lenses_app.stage_command import add_config_options
from lenses_data.config.pipeline import DEDUPE, spec_of


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(DEDUPE, help=spec_of(DEDUPE).help)
    add_config_options(parser)
    parser.add_argument(
        "--calibrate",
        metavar="POOL",
        help="instead of deduping, report hash distances of the planted variants vs distinct images of a "
        "sample pool (from `lenses sample --out POOL`) and the recommended Hamming radius",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    import json

    from lenses_app.stage_command import report_accepted, resolve, stage_error
    from lenses_data.stages.dedupe import format_summary
    from lenses_data.stages.entry import run_entered_stage

    def show(summary: dict) -> None:
        print(json.dumps(summary, indent=1, default=str) if args.json else format_summary(summary))

    try:
        config = resolve(args)
        if args.calibrate:
            from lenses_data.dedupe.calibrate import calibrate, format_calibration

            result = calibrate(args.calibrate, config.dedupe.hash_kind)
            print(json.dumps(result, indent=1) if args.json else format_calibration(result))
            return 0
        summary = run_entered_stage(DEDUPE, config)  # lock, settings, setup/close, then its yield
    except Exception as error:  # noqa: BLE001 - an expected failure is one line and its exit code
        return stage_error(error, (ValueError,), show)
    show(summary)
    report_accepted(summary)
    return 0
