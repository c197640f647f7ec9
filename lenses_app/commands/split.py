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
    from pathlib import Path

    from lenses_app.stage_command import resolve, stage_error

    try:
        config = resolve(args, {"split": {"input_stage": args.input}} if args.input else None)
        from lenses_data.stages.base import run_stage
        from lenses_data.stages.entry import guarded_stage
        from lenses_data.stages.split import SplitStage, format_summary

        with guarded_stage(SPLIT, config):  # the lock, then the settings check
            summary = run_stage(SplitStage(config), Path(config.run_dir))
    except Exception as error:  # noqa: BLE001 - an expected failure is one line and its exit code
        return stage_error(error, (ValueError,))
    print(json.dumps(summary, indent=1, default=str) if args.json else format_summary(summary))
    return 0
