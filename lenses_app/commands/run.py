"""`lenses run`: the whole `build-dataset` flow in this process with Prefect's local engine."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SIMULATED_BANNER = (
    "\n" + "!" * 78 + "\n"
    "!!  SIMULATED RUN: every model answer came from the built-in simulator, not from\n"
    "!!  InternVL3.5-38B or Qwen2.5-32B. The outputs are marked simulated=true and are\n"
    "!!  for checking the pipeline only, never for training or evaluation.\n" + "!" * 78
)


def register(subparsers: argparse._SubParsersAction) -> None:
    from lenses_data.stages.registry import STAGES

    commands = [name.replace("_", "-") for name in STAGES]
    parser = subparsers.add_parser(
        "run",
        help="run the whole pipeline (build-dataset flow) in-process",
        description=f"Run {' -> '.join(commands)} with Prefect's local engine (no Prefect server needed). "
        "A rerun of the same configuration resumes: finished shards and answered model calls are reused; "
        "a rerun whose settings change what a stage on disk produced stops with exit code 2, unless "
        "--rebuild-changed; sources appended to ingest.sources add only the new images. "
        "A terminal shows one progress line per stage, warnings and a final funnel (stage, in, out, "
        "rejected); -v shows every log line; the full log goes to RUN/logs/run-*.log. "
        "A stage whose rejection share leaves its band (config `yields`: e.g. validate discarding more "
        "than a quarter of the texts, where the paper discards a few percent) ends the build with exit "
        "code 5 and the reasons' counts; the dataset is still written. "
        "Exit codes: 0 built; 2 bad configuration or changed settings; 3 run directory in use by a "
        "live run; 4 model service failed (endpoint down or unable: a rerun resumes); 5 a stage's "
        "yield left its band (unless accepted).",
    )
    parser.add_argument(
        "--config", help="YAML config (default: configs/sample.yaml with --sample, else defaults)"
    )
    parser.add_argument(
        "--run", "--run-dir", dest="run_dir", help="run directory (overrides the config's run_dir)"
    )
    parser.add_argument(
        "--sample",
        action="store_true",
        help="build the bundled sample pool and answer every model call with the simulator (dry run)",
    )
    parser.add_argument("--simulate", action="store_true", help="use the simulator for model calls")
    parser.add_argument(
        "--stop-after",
        choices=commands,
        help="stop after this stage, e.g. dedupe",
    )
    parser.add_argument(
        "--rebuild-changed",
        action="store_true",
        help="on a run directory whose settings changed, redo the first changed stage and every later "
        "one; the earlier stages are kept, the old outputs are moved to RUN/_replaced/<settings digest>/ "
        "and their model answers are reused by request (without it such a rerun exits with code 2)",
    )
    parser.add_argument(
        "--reuse-answers-from",
        action="append",
        metavar="RUN_DIR",
        help="an earlier run directory whose journaled model answers this run reuses instead of asking "
        "again (same served model, request, sampling, seed and image); repeatable. Sets "
        "models.reuse_answers_from; failures are asked again",
    )
    parser.add_argument(
        "--accept-yield",
        action="store_true",
        help="accept a stage whose rejection share left its band (`yields.accept`): report it, exit 0",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,  # `lenses -v run` sets it too
        help="print every log line (Prefect's task states, shard and model progress) instead of "
        "one progress line per stage; either way the full log is written to RUN/logs/run-*.log",
    )
    parser.set_defaults(func=handle)


def _default_sample_config() -> str | None:
    from lenses_data.resources import resource_dir

    try:
        candidate = resource_dir("configs") / "sample.yaml"
    except FileNotFoundError:
        return None
    return str(candidate) if candidate.exists() else None


def handle(args: argparse.Namespace) -> int:
    from flows.build import build_dataset
    from flows.common import load_run_config
    from flows.observers import observing
    from lenses_app.run_logging import run_logging
    from lenses_app.run_view import stage_view
    from lenses_app.stage_command import MODEL_SERVICE_EXIT
    from lenses_data.config import ConfigError
    from lenses_data.models.types import ModelServiceError
    from lenses_data.publish.yields import YIELD_EXIT, YieldOutOfBand
    from lenses_data.runlock import RunDirectoryInUse, ensure_run_directory_free

    config_path = args.config or (_default_sample_config() if args.sample else None)
    params = {
        "config_path": config_path,
        "run_dir": args.run_dir,
        "sample": args.sample,
        "simulate": args.sample or args.simulate,
        "stop_after": args.stop_after.replace("-", "_") if args.stop_after else None,
        "rebuild_changed": args.rebuild_changed,
    }
    overrides: dict = {}
    if args.accept_yield:
        overrides["yields"] = {"accept": True}
    if args.reuse_answers_from:
        overrides["models"] = {
            "reuse_answers_from": [str(Path(r).resolve()) for r in args.reuse_answers_from]
        }
    if overrides:
        params["overrides"] = overrides
    verbose = bool(getattr(args, "verbose", False))
    try:
        run_dir = load_run_config(config_path, args.run_dir, params.get("overrides")).run_dir
        ensure_run_directory_free(run_dir)
        view = stage_view(sys.stdout)
        with run_logging(run_dir, view, verbose) as log_path, view, observing(view):
            result = build_dataset(**params)
    except RunDirectoryInUse as error:
        print(f"error: {error}", file=sys.stderr)
        return 3
    except ConfigError as error:  # a wrong setting is the user's to fix: one message, no traceback
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ModelServiceError as error:  # an outage or a server lacking a feature: no traceback here
        print(f"error: {error}", file=sys.stderr)
        return MODEL_SERVICE_EXIT
    except YieldOutOfBand as error:  # built, but suspect: the funnel, then why, then exit 5
        _quiet_prefect(verbose)
        _print_outcome(error.result, log_path)
        for breach in error.breaches:
            print(f"error: {breach.describe()}", file=sys.stderr)
        print(
            "error: the build's yield is out of band (config `yields`); look at the rejections, or accept "
            "it with --accept-yield",
            file=sys.stderr,
        )
        return YIELD_EXIT
    _quiet_prefect(verbose)
    _print_outcome(result, log_path)
    for line in result.get("accepted_yields", ()):
        print(f"warning: accepted: {line}", file=sys.stderr)
    return 0


def _quiet_prefect(verbose: bool) -> None:
    """Prefect's ephemeral server says goodbye at exit; the log file already has the run."""
    if not verbose:
        import logging

        logging.getLogger("prefect").setLevel(logging.WARNING)


def _print_outcome(result: dict, log_path: Path) -> None:
    from lenses_app.run_view import funnel_table

    run_dir = Path(result["run_dir"]).resolve()
    print()
    print(funnel_table(result["stages"]))
    export_dir = run_dir / "export"
    print(f"\nrun directory: {run_dir}")
    if export_dir.exists():
        print(
            f"dataset:       {export_dir}  (images/captions/prompts/rejections.parquet, manifest.json, README.md)"
        )
    report = export_dir / "report" / "index.html"
    if report.exists():
        print(f"report:        {report}  (open it in a browser: images, texts by lens, rejections)")
    print(f"log:           {log_path.resolve()}")
    if result.get("simulated"):
        print(SIMULATED_BANNER, file=sys.stderr)
