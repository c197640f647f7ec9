"""Failures that explain themselves: which errors are retried, and the one line a failed run shows.

A config or parameter error is the same on every attempt, so it is never retried and fails the
run at once with one line that names the problem.
Transient errors (an endpoint down after the client's own retries, a dropped connection, an
unexplained crash) keep the task retries of `orchestration.task_retries`; flow runs are never
retried by Prefect (`FLOW_RETRIES`): a rerun resumes instead. The flow turns any
error into a Failed state whose message is that line, logs it as its first error line and sends
it as an event, so the UI, `prefect flow-run inspect` and `prefect deployment run --watch` show it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from lenses_data.config import ConfigError
from lenses_data.models.types import (
    CapabilityMissing,
    EndpointUnavailable,
    ModelServiceError,
    SystemicFailure,
)
from lenses_data.publish.yields import YieldOutOfBand
from lenses_data.runlock import RunDirectoryInUse

T = TypeVar("T")

# The same on every attempt: retrying only delays the error (and repeats its traceback).
PERMANENT: tuple[type[BaseException], ...] = (
    ConfigError,
    RunDirectoryInUse,
    CapabilityMissing,
    SystemicFailure,  # the same request to the same server fails the same way
    YieldOutOfBand,  # the same funnel on every attempt
    ValueError,  # also pydantic's ValidationError and the stages' "no sources"
    TypeError,
    LookupError,
    AttributeError,
    NotImplementedError,
    ImportError,
    FileNotFoundError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
)
STAGE_NOTE = "lenses stage: "

# Every flow of the pipeline passes this as `retries`: Prefect never retries a flow run by itself.
# Since Prefect 3.9 a flow that returns a Failed state (as every flow here does on an error) is
# retried when it has `retries`, also ones it took from PREFECT_FLOWS_DEFAULT_RETRIES at import; a
# retry would rerun the failed stage's model (GPU) work in the same run. Transient shard errors are
# retried by the shard tasks (`retry_transient`); anything beyond is a rerun, whose stages skip the
# shards on disk and whose model client replays every answered request from the shard's journal.
FLOW_RETRIES = 0


class ParameterError(ValueError):
    """A flow parameter that cannot work (e.g. a stop_after that is not a stage)."""


def is_transient(error: BaseException) -> bool:
    """True when another attempt may succeed. Unknown errors count as transient (a crash, an OOM kill)."""
    if isinstance(error, EndpointUnavailable):  # down after the client's retries; may come back
        return True
    return not isinstance(error, PERMANENT)


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """`retry_condition_fn` of the shard tasks: retry transient errors only."""
    error = state.data if isinstance(state.data, BaseException) else None
    if error is None:
        try:
            state.result(raise_on_failure=True)
        except BaseException as raised:  # noqa: BLE001 - any stored exception is what we classify
            error = raised
    if error is None or is_transient(error):
        return True
    from prefect import get_run_logger

    # One line here; the traceback is printed once, where the run ends (it travels with the error).
    get_run_logger().error("not retried (the same on every attempt): %s", explain(error))
    return False


def mark_stage(error: BaseException, stage: str) -> BaseException:
    """Record which stage failed, for the failure line."""
    if stage_of(error) is None:
        error.add_note(f"{STAGE_NOTE}{stage}")
    return error


def stage_of(error: BaseException) -> str | None:
    for note in getattr(error, "__notes__", ()):
        if note.startswith(STAGE_NOTE):
            return note[len(STAGE_NOTE) :]
    return None


def _kind(error: BaseException) -> str:
    if isinstance(error, ConfigError):
        return "config error"
    if isinstance(error, ParameterError):
        return "parameter error"
    if isinstance(error, RunDirectoryInUse):
        return "run directory busy"
    if isinstance(error, EndpointUnavailable):
        return "model endpoint unavailable (transient: a rerun resumes, answered calls are journaled)"
    if isinstance(error, SystemicFailure):
        return "model role's answers unusable for most of a shard (nothing rejected)"
    if isinstance(error, ModelServiceError):
        return "model endpoint cannot do the work"
    if isinstance(error, YieldOutOfBand):
        return "built, but a stage's yield is absurd (the dataset is written; nothing handed off)"
    return type(error).__name__


def explain(error: BaseException) -> str:
    """One line: where (stage), what kind, and the error's own first line."""
    text = str(error).strip().splitlines()
    detail = text[0] if text else repr(error)
    stage = stage_of(error)
    where = f"stage {stage}: " if stage else ""
    return f"{where}{_kind(error)}: {detail}"


def run_explained(body: Callable[[], T]) -> Any:
    """Run a flow body; an error ends the run Failed with its one-line explanation as message.

    The line is the flow's first error log line. The exception stays the state's data, so a
    caller of the flow (e.g. `lenses run`) still gets the original exception raised, and a
    deployed run's engine prints its traceback once as the run ends.
    """
    from prefect import get_run_logger
    from prefect.states import Failed

    try:
        return body()
    except Exception as error:
        line = explain(error)
        get_run_logger().error(line)  # the traceback travels with the error: printed once, where the run ends
        announce_failure(line)
        return Failed(message=line, data=error)


def announce_failure(line: str) -> None:
    """A `lenses.flow-run.failed` event about this run, named by the failure line.

    `prefect deployment run --watch` prints every event of the run as `<event> * <resource name>`,
    also on a server that does not stream logs (PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED is off by
    default), so the reason is on the watcher's screen either way; automations can match it too.
    """
    from prefect.events import emit_event
    from prefect.runtime import flow_run

    run_id = flow_run.get_id()
    if not run_id:
        return
    emit_event(
        event="lenses.flow-run.failed",
        resource={"prefect.resource.id": f"lenses.failure.{run_id}", "prefect.resource.name": line},
        related=[{"prefect.resource.id": f"prefect.flow-run.{run_id}", "prefect.resource.role": "flow-run"}],
    )
    from prefect.events.worker import EventsWorker

    EventsWorker.drain_all(timeout=5)  # sent before the Failed state ends the watch
