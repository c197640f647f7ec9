"""`lenses_data` log lines in the flow run's logs, for the duration of a run.

Library code never touches logging; the flow does, and undoes it when the run ends. Prefect's
own `PREFECT_LOGGING_EXTRA_LOGGERS=lenses_data` would attach the API handler too, but it leaves
the logger's level to the root logger (WARNING in a worker's flow process), so the INFO lines
(shard progress, ingest summaries) would still be lost; and it needs the setting in every
environment a worker starts. If it is set, the handler it attached is reused, not doubled.

Every record is sent with the build's own flow-run id, so the lines of the per-stage subflows
and their shard tasks show on the run a user opened (and in `prefect deployment run --watch`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from uuid import UUID

LOGGER_NAME = "lenses_data"


class _ToRootRun(logging.Filter):
    """Pass records made inside a Prefect run (others have no run to go to) and stamp the run id."""

    def __init__(self, flow_run_id: UUID) -> None:
        super().__init__()
        self.flow_run_id = flow_run_id

    def filter(self, record: logging.LogRecord) -> bool:
        from prefect.context import FlowRunContext, TaskRunContext

        task_context = TaskRunContext.get()
        if FlowRunContext.get() is None and task_context is None:
            return False  # e.g. the simulator's server thread: no run to attach the line to
        if getattr(record, "flow_run_id", None) is None:
            record.flow_run_id = self.flow_run_id
            if task_context is not None and getattr(record, "task_run_id", None) is None:
                record.task_run_id = task_context.task_run.id  # still linked to its shard task
        return True


@contextlib.contextmanager
def lenses_logs_to_run() -> Iterator[None]:
    """Send `lenses_data` records (INFO and up) to the current flow run while the block runs."""
    from prefect.context import FlowRunContext
    from prefect.logging.handlers import APILogHandler

    context = FlowRunContext.get()
    logger = logging.getLogger(LOGGER_NAME)
    if context is None or context.flow_run is None:
        yield
        return
    handler = None
    if not _attached(logger):  # else an outer flow of this process (or the setting) already sends them
        handler = APILogHandler()
        handler.addFilter(_ToRootRun(context.flow_run.id))
        logger.addHandler(handler)
    level = logger.level
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        if handler is not None:
            logger.removeHandler(handler)
        logger.setLevel(level)


def _attached(logger: logging.Logger) -> bool:
    from prefect.logging.handlers import APILogHandler

    return any(isinstance(h, APILogHandler) for h in logger.handlers)
