"""`lenses split`: train/valid/test by image; dedupe split groups never straddle two splits."""

from __future__ import annotations

import argparse

from lenses_app.stage_command import add_config_options
from lenses_data.config.pipeline import SPLIT, spec_of


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(SPLIT, help=spec_of(SPLIT).help)
    add_config_options(parser)
    parser.add_argument(
        "--input",
        choices=("auto", "filter", "dedupe"),
        help="which survivors to split (overrides split.input_stage; auto: filter if complete, else dedupe)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    import json

    from lenses_app.stage_command import report_accepted, resolve, stage_error
    from lenses_data.stages.entry import run_entered_stage
    from lenses_data.stages.split import format_summary

    def show(summary: dict) -> None:
        print(json.dumps(summary, indent=1, default=str) if args.json else format_summary(summary))

    try:
        config = resolve(args, {"split": {"input_stage": args.input}} if args.input else None)
        summary = run_entered_stage(SPLIT, config)  # lock, settings, setup/close, then its yield
    except Exception as error:  # noqa: BLE001 - an expected failure is one line and its exit code
        return stage_error(error, (ValueError,), show)
    show(summary)
    report_accepted(summary)
    return 0
