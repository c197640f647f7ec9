"""What every stage command shares: its config resolved once, and its failures as exit codes.

The exit codes are `lenses run`'s: 2 bad configuration or changed settings (the guard of
`lenses_data.stages.entry`), 3 run directory in use by a live run, 4 model service failed, 5 the
stage's yield left its band (`lenses_data.stages.entry.run_entered_stage`; `--accept-yield`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

# The epilog of every stage command's --help.
GUARD_EPILOG = (
    "Like `lenses run`, the command holds the run directory (exit 3 while a live run has it) and "
    "refuses settings that differ from those this stage's outputs on disk, or the next stage's, were "
    "made with (exit 2, each changed setting named as old -> new; nothing written). When the stage "
    "rejected a share of its input outside its band (config `yields`), its outputs are written, the "
    "reasons' counts go to stderr and the command exits 5, unless accepted (--accept-yield). Config: "
    "the file, then LENSES__ environment variables, then this command's flags. Exit codes: 0 done; 2 "
    "bad configuration, changed settings or unfinished input; 3 run directory in use; 4 model service "
    "failed; 5 the stage's yield left its band (unless accepted)."
)


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """`--run`, `--config`, `--accept-yield` and the guard's epilog, as every stage command has them."""
    parser.add_argument("--run", help="run directory (default: run_dir of the config)")
    parser.add_argument("--config", help="pipeline YAML config (default: built-in defaults)")
    parser.add_argument(
        "--accept-yield",
        action="store_true",
        help="accept a stage whose rejection share left its band (`yields.accept`): report it, exit 0",
    )
    parser.epilog = GUARD_EPILOG


# A model endpoint could not do the work (down after retries, or lacking a needed feature): the
# shard in progress wrote nothing and a rerun retries it.
MODEL_SERVICE_EXIT = 4


def resolve(args: argparse.Namespace, overrides: dict | None = None):
    """The command's config, resolved once: the file, the `LENSES__` environment, then the flags
    (`--run` and the command's own, as `overrides`)."""
    from lenses_data.config import deep_merge, resolve_config

    flags: dict[str, Any] = {"run_dir": args.run} if args.run else {}
    if getattr(args, "accept_yield", False):
        flags["yields"] = {"accept": True}
    return resolve_config(args.config, deep_merge(overrides or {}, flags))


def report_accepted(summary: dict[str, Any]) -> None:
    """An accepted breach of the stage's band (`--accept-yield`), as `lenses run` reports it."""
    import sys

    for line in summary.get("accepted_yields", ()):
        print(f"warning: accepted: {line}", file=sys.stderr)


def stage_error(
    error: Exception,
    bad_input: tuple[type[Exception], ...] = (),
    show: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Print an expected stage failure as one `error:` line and return its exit code, as `lenses
    run` does (2 configuration, changed settings or `bad_input`, 3 run directory in use, 4 model
    service, 5 yield out of band: the stage's summary through `show`, then each breach and its
    reasons); any other error is raised again with its traceback."""
    import sys

    from lenses_data.config import ConfigError
    from lenses_data.io import StageIncompleteError
    from lenses_data.models.types import ModelServiceError
    from lenses_data.publish.yields import YIELD_EXIT, YieldOutOfBand
    from lenses_data.runlock import RunDirectoryInUse

    if isinstance(error, YieldOutOfBand):  # written, but suspect: what it did, then why
        if show:
            show(error.result["stages"][-1])
        for breach in error.breaches:
            print(f"error: {breach.describe()}", file=sys.stderr)
        print("error: the stage's yield is out of band (config `yields`); look at its rejections, or "
              "accept it with --accept-yield", file=sys.stderr)  # fmt: skip
        return YIELD_EXIT

    codes = (
        ((ConfigError, StageIncompleteError, FileNotFoundError, *bad_input), 2),
        ((RunDirectoryInUse,), 3),
        ((ModelServiceError,), MODEL_SERVICE_EXIT),
    )
    for kinds, code in codes:
        if isinstance(error, kinds):
            print(f"error: {error}", file=sys.stderr)
            return code
    raise error
