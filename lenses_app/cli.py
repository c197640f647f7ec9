"""The `lenses` command line.

Every module in `lenses_app.commands` that defines `register(subparsers)` contributes its
subcommands, so a command appears in `lenses --help` exactly when its module ships.
Handlers import their heavy dependencies lazily: `lenses --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys
from collections.abc import Sequence

from lenses_app import commands
from lenses_data import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lenses",
        description="Build the Lenses dataset (five interpretive lenses) and train/evaluate its retriever.",
    )
    parser.add_argument("--version", action="version", version=f"lenses {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        register = getattr(module, "register", None)
        if callable(register):
            register(subparsers)
    return parser


# Prefect settings the CLI (a process entry point, not library code) sets unless the user did:
# no telemetry from a dataset build (its failures only add noise to the log on closed networks).
SAFE_PREFECT_DEFAULTS: dict[str, str] = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    # The embedded server `lenses run` starts gets 20 s by default, counted in its 0.1 s sleeps
    # only. Beside 8 CPU-bound jobs on 2 cores it needed more and the build failed at start
    # ("Timed out while attempting to connect to ephemeral Prefect API server"); a coordinator is
    # rarely idle, and waiting longer costs nothing when the server is up sooner.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "600",
}


# Arrow's allocator, chosen by the process entry point (never by library code) before pyarrow is
# imported: jemalloc hands freed pages back to the OS where mimalloc (pyarrow's default) keeps them.
# A 100k export in a fresh process peaked at 751 MiB with mimalloc and 575 MiB with jemalloc, the
# same outputs. A pyarrow built without jemalloc warns once and keeps its default.
ARROW_DEFAULTS: dict[str, str] = {"ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}


def apply_safe_prefect_defaults(environ: dict[str, str] | None = None) -> None:
    target = os.environ if environ is None else environ
    for name, value in {**SAFE_PREFECT_DEFAULTS, **ARROW_DEFAULTS}.items():
        target.setdefault(name, value)


def main(argv: Sequence[str] | None = None) -> int:
    apply_safe_prefect_defaults()
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Per-request HTTP logs drown the progress lines; keep them for --verbose.
    for noisy in ("httpx", "httpx2", "httpcore", "httpcore2", "openai"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
