"""Where `lenses run`'s log records go: all of them to a file in the run directory; in the
terminal only warnings and errors (through the stage view), or everything with -v.

This is the CLI process's entry point configuring its own logging; library code never does.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from lenses_app.run_view import LiveStages, PlainStages, ViewHandler

FILE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def run_log_path(run_dir: str | Path) -> Path:
    """RUN/logs/run-<UTC time>.log: one file per `lenses run`, so a resumed run keeps the earlier log."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return Path(run_dir) / "logs" / f"run-{stamp}.log"


def _is_console(handler: logging.Handler) -> bool:
    consoles = (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
    return (
        isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
        and getattr(handler, "stream", None) in consoles
    )


def _loggers_with_handlers() -> list[logging.Logger]:
    """The root logger and every logger that does not pass its records up to it."""
    found = [logging.getLogger()]
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger) and not logger.propagate and logger.handlers:
            found.append(logger)
    return found


@contextlib.contextmanager
def run_logging(run_dir: str | Path, view: LiveStages | PlainStages, verbose: bool) -> Iterator[Path]:
    """Send every record to RUN/logs/run-*.log; unless `verbose`, the console shows warnings only."""
    path = run_log_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    file_handler = logging.FileHandler(path, encoding="utf-8")
    file_handler.setLevel(logging.DEBUG if verbose else logging.INFO)
    file_handler.setFormatter(logging.Formatter(FILE_FORMAT))
    root = logging.getLogger()
    saved_level = root.level
    root.setLevel(min(saved_level or logging.WARNING, file_handler.level))  # INFO lines reach the file
    added: list[tuple[logging.Logger, logging.Handler]] = []
    removed: list[tuple[logging.Logger, logging.Handler]] = []
    for logger in _loggers_with_handlers():
        consoles = [h for h in logger.handlers if _is_console(h)]
        if not verbose and (consoles or logger is root):
            for handler in consoles:
                logger.removeHandler(handler)
                removed.append((logger, handler))
            added.append((logger, ViewHandler(view)))
        added.append((logger, file_handler))
    for logger, handler in added:
        logger.addHandler(handler)
    if not verbose:
        logging.captureWarnings(True)  # Python warnings too go above the bars, not under them
    try:
        yield path
    finally:
        for logger, handler in added:
            logger.removeHandler(handler)
        for logger, handler in removed:
            logger.addHandler(handler)
        root.setLevel(saved_level)
        logging.captureWarnings(False)
        file_handler.close()
