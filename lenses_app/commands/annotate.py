"""`lenses filter | generate | rules | validate | visual-validate | export`: run one stage.

One command per stage of the declaration (`lenses_data.config.pipeline`) that has no command module
of its own, named and described there; a stage added to the declaration gets its command here. Each
command runs its stage over every shard of the run in this process (finished shards are
skipped, answered model calls are replayed from the run's journal) and prints the stage summary.
Like `lenses run`, each goes through `lenses_data.stages.entry`: a live run on the directory is
refused (exit 3), and so are settings that differ from those the stage's outputs on disk (or the
next stage's) were made with (exit 2, the changed settings named, nothing written).
`--simulate` answers model calls with the built-in simulator on 127.0.0.1 (outputs are marked
simulated).
"""

from __future__ import annotations

import argparse

from lenses_app.stage_command import add_config_options, resolve, stage_error
from lenses_data.config.pipeline import BUILTIN_STAGES, EXPORT, spec_of


def register(subparsers: argparse._SubParsersAction) -> None:
    """One command per declared stage without a command module of its own (`StageSpec.own_command`),
    named and described as the declaration says (`visual_validate` -> `lenses visual-validate`)."""
    for spec in BUILTIN_STAGES:
        if spec.own_command:
            continue
        parser = subparsers.add_parser(spec.name.replace("_", "-"), help=spec.help, description=spec.help)
        add_config_options(parser)
        parser.add_argument(
            "--simulate", action="store_true", help="answer model calls with the built-in simulator (dry run)"
        )
        parser.set_defaults(func=handle_stage, stage=spec.name)
    register_export(subparsers)


def register_export(subparsers: argparse._SubParsersAction) -> None:
    """`lenses export`: the export stage, or the dataset written elsewhere (`--out`)."""
    parser = subparsers.add_parser(EXPORT, help=spec_of(EXPORT).help)
    add_config_options(parser)
    parser.add_argument(
        "--out",
        help="output folder (default: RUN/export); elsewhere, the run is only read: the lock is held, "
        "no settings are checked against or recorded in RUN/export",
    )
    parser.add_argument(
        "--embed-images",
        action="store_true",
        default=None,
        help="write the image bytes into the Hugging Face images config (hf/images/, ~500 MB shards) so a "
        "copied export keeps its images (config: export.embed_images)",
    )
    parser.add_argument(
        "--embed-max-side",
        type=int,
        metavar="PX",
        help="embed JPEGs re-encoded to at most PX on the longer side, e.g. 512; implies --embed-images "
        "(default: the original files' bytes; config: export.embed_max_side)",
    )
    parser.set_defaults(func=handle_export)


def handle_stage(args: argparse.Namespace) -> int:
    import json

    from lenses_app.stage_command import report_accepted
    from lenses_data.stages.base import log_simulated
    from lenses_data.stages.entry import run_entered_stage

    def show(summary: dict) -> None:
        log_simulated(summary)
        print(json.dumps(summary, indent=1, sort_keys=True, default=str))

    try:
        config = resolve(args)
        summary = run_entered_stage(args.stage, config, scope=_simulated if args.simulate else None)
    except Exception as error:  # noqa: BLE001 - an expected failure is one line and its exit code
        return stage_error(error, show=show)
    show(summary)
    report_accepted(summary)
    return 0


def _simulated(config):
    """`--simulate`: the built-in simulator answers the model calls, inside the lock."""
    import sys

    from lenses_data.simulator.dryrun import simulated_models

    print("SIMULATED: model answers come from the built-in simulator", file=sys.stderr)
    return simulated_models(config)


def _embed_overrides(args: argparse.Namespace) -> dict:
    """--embed-images/--embed-max-side as explicit overrides of `export` (validated with the config)."""
    update: dict = {}
    if args.embed_images or args.embed_max_side is not None:
        update["embed_images"] = True
    if args.embed_max_side is not None:
        update["embed_max_side"] = args.embed_max_side
    from pydantic import ValidationError

    from lenses_data.config import ConfigError
    from lenses_data.config.export import ExportConfig

    try:  # the flag's own bounds, in the flag's name
        ExportConfig.model_validate(update)
    except ValidationError as error:
        raise ConfigError(f"--embed-max-side: {error.errors()[0]['msg']}") from None
    return {"export": update} if update else {}


def handle_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from lenses_app.stage_command import report_accepted
    from lenses_data.stages.entry import guarded_run, run_entered_stage
    from lenses_data.stages.export import export_dataset

    show = None
    try:
        config = resolve(args, _embed_overrides(args))
        run = Path(config.run_dir)
        show = _export_printer(Path(args.out) if args.out else run / "export", config.export.embed_images)
        if args.out:  # written elsewhere: the lock (it reads the run), no settings recorded in RUN/export
            with guarded_run(run):
                manifest = export_dataset(run, Path(args.out), config)
        else:
            manifest = run_entered_stage(EXPORT, config)
    except Exception as error:  # noqa: BLE001 - an expected failure is one line and its exit code
        return stage_error(error, show=show)
    show(manifest)
    report_accepted(manifest)
    return 0


def _export_printer(out, embedded: bool):
    """Where the dataset went and how to load it (also for an export whose yield left its band)."""
    import sys

    def show(manifest: dict) -> None:
        tables = manifest.get("tables", {})
        print(
            f"dataset written to {out.resolve()}: " + ", ".join(f"{k} {v:,} rows" for k, v in tables.items())
        )
        images = "with the image bytes" if embedded else "images as build-machine paths"
        print(f"Hugging Face: datasets.load_dataset({str(out.resolve())!r}, 'captions'); {images}")
        if manifest.get("simulated"):
            print(
                "SIMULATED: this export contains simulated model answers; do not train on it", file=sys.stderr
            )

    return show
