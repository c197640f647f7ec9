"""`lenses report`: the build report of an export, a static page to look at images and their texts."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    description = (
        "Write a static, self-contained HTML report of an export (EXPORT/report/index.html plus 256 px "
        "WebP thumbnails): a paged gallery of N images with their prompts and captions by lens, "
        "near-duplicate groups (kept beside removed, each removal's signal, distance and threshold; the "
        "largest groups and those nearest each threshold first), rejections by stage and reason with "
        "examples, and the dataset card's funnel and Table-1 counts. Opens from disk; loads nothing from the network. The export writes "
        "one too (export.report_images). It holds the run directory while it writes, as the stage "
        "commands do. Exit codes: 0 written; 2 no export or a bad option; 3 run directory in use by a "
        "live run."
    )
    parser = subparsers.add_parser(
        "report", help="write the build report (report/index.html)", description=description
    )
    parser.add_argument("--run", required=True, help="run directory (its export: RUN/export)")
    parser.add_argument("--export", help="export folder (default: RUN/export)")
    parser.add_argument("--out", help="report folder (default: EXPORT/report)")
    parser.add_argument("--n", type=int, default=200, help="images in the gallery (default: 200)")
    parser.add_argument("--examples", type=int, default=5, help="examples per rejection reason (default: 5)")
    parser.add_argument(
        "--groups",
        type=int,
        default=24,
        help="near-duplicate groups shown, most informative first (default: 24)",
    )
    parser.add_argument("--seed", type=int, default=0, help="where the gallery's block of image ids starts")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from lenses_app.stage_command import stage_error
    from lenses_data.publish.report import write_report
    from lenses_data.stages.entry import guarded_run

    export = Path(args.export) if args.export else Path(args.run) / "export"
    if not (export / "manifest.json").exists():
        print(f"error: no export in {export} (run `lenses export --run {args.run}` first)", file=sys.stderr)
        return 2
    if min(args.n, args.examples, args.groups) < 0:
        print("error: --n, --examples and --groups must be 0 or more", file=sys.stderr)
        return 2
    try:  # it reads the run: held like every stage command (exit 3 while a live run writes it)
        with guarded_run(args.run):
            done = write_report(
                args.run,
                export,
                args.out,
                n=args.n,
                examples=args.examples,
                groups=args.groups,
                seed=args.seed,
            )
    except Exception as error:  # noqa: BLE001 - an expected failure is one line and its exit code
        return stage_error(error)
    print(
        f"report: {Path(done['index']).resolve()}  ({done['images']} images, {done['groups']} near-duplicate "
        f"groups, {done['reasons']} rejection reasons; {done['bytes'] / 1e6:.1f} MB, {done['seconds']:.1f} s)"
    )
    return 0
