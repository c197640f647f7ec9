"""What `lenses run` shows: one line per stage (a live bar in a terminal), warnings, a funnel.

In a terminal each stage gets a progress bar that moves as its shards finish, with the records
read so far, their rate and the time left; warnings (the SIMULATED banner among them) print
above the bars. Without a terminal (CI, a pipe) each stage prints one plain line when it ends,
with no carriage-return animation. Both are a `StageObserver` of the flows (`flows.observers`).
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from lenses_data.stages.base import ShardStats


@dataclass
class _StageCount:
    shards: int
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    records_in: int = 0

    def rate(self) -> str:
        elapsed = time.monotonic() - self.started
        return f"{self.records_in / elapsed:,.1f} rec/s" if elapsed > 0 and self.records_in else ""


def stage_line(summary: dict[str, Any], seconds: float) -> str:
    """The one line a finished stage prints without a terminal."""
    shards, skipped = int(summary.get("shards", 0) or 0), int(summary.get("shards_skipped", 0) or 0)
    resumed = f" ({skipped} already done)" if skipped else ""
    return (
        f"{summary.get('stage', '?'):<16} {shards} shard(s){resumed}  in {summary.get('records_in', 0)}  "
        f"out {summary.get('records_out', 0)}  rejected {summary.get('rejected', 0)}  {seconds:.1f}s"
    )


def _write(stream: TextIO, line: str) -> None:
    # Not print(): inside a flow run with log_prints=True, Prefect turns print() into log records.
    stream.write(line + "\n")
    stream.flush()


class PlainStages:
    """One line per stage when it ends; for a stdout that is not a terminal."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.counts: dict[str, _StageCount] = {}

    def stage_started(self, stage: str, shards: int) -> None:
        self.counts[stage] = _StageCount(shards)

    def shard_finished(self, stage: str, stats: ShardStats) -> None:
        pass

    def stage_finished(self, summary: dict[str, Any]) -> None:
        count = self.counts.get(str(summary.get("stage")))
        seconds = time.monotonic() - count.started if count else 0.0
        _write(self.out, stage_line(summary, seconds))

    def warn(self, line: str) -> None:
        _write(sys.stderr, line)

    def __enter__(self) -> PlainStages:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _time_left_column(remaining: Any) -> Any:
    """`left 0:01:23` while a stage runs, nothing once it is done (a finished bar has no time left)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class TimeLeft(ProgressColumn):
        def render(self, task: Any) -> Text:
            return Text("") if task.finished else Text.assemble("left ", remaining.render(task))

    return TimeLeft()


class LiveStages:
    """A rich progress bar per stage, in a terminal; finished stages keep their line."""

    def __init__(self, out: TextIO) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = Console(file=out)
        self.progress = Progress(
            TextColumn("{task.fields[mark]} {task.description:<16}"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TextColumn("shards"),
            TextColumn("{task.fields[records]}"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            _time_left_column(TimeRemainingColumn()),
            console=self.console,
            # Our log handler prints through this console; nothing else should write under it.
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self.tasks: dict[str, Any] = {}
        self.counts: dict[str, _StageCount] = {}

    def stage_started(self, stage: str, shards: int) -> None:
        self.counts[stage] = _StageCount(shards)
        self.tasks[stage] = self.progress.add_task(stage, total=shards, mark=" ", records="", rate="")

    def shard_finished(self, stage: str, stats: ShardStats) -> None:
        count = self.counts[stage]
        count.done += 1
        count.records_in += stats.records_in
        self.progress.update(
            self.tasks[stage], advance=1, records=f"{count.records_in:,} records in", rate=count.rate()
        )

    def stage_finished(self, summary: dict[str, Any]) -> None:
        stage = str(summary.get("stage"))
        task = self.tasks.get(stage)
        if task is None:
            return
        counts = (
            f"in {summary.get('records_in', 0):,} out {summary.get('records_out', 0):,} "
            f"rejected {summary.get('rejected', 0):,}"
        )
        total = self.counts[stage].shards
        self.progress.update(task, completed=total, mark="✓", records=counts, rate=self.counts[stage].rate())
        self.progress.stop_task(task)

    def warn(self, line: str) -> None:
        self.progress.console.print(line, markup=False, highlight=False, style="yellow")

    def __enter__(self) -> LiveStages:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()


def stage_view(out: TextIO = sys.stdout) -> LiveStages | PlainStages:
    """Live bars when `out` is a terminal, plain lines otherwise."""
    return LiveStages(out) if out.isatty() else PlainStages(out)


class ViewHandler(logging.Handler):
    """Log records (warnings and up) printed through the stage view, above its bars."""

    def __init__(self, view: LiveStages | PlainStages, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self.view = view
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.view.warn(self.format(record))
        except Exception:  # noqa: BLE001 - logging must never break the run
            self.handleError(record)


def funnel_table(stages: list[dict[str, Any]]) -> str:
    """The build's funnel as a fixed-width table: stage, records in, out, rejected, and the model
    calls the stage sent and the answers it reused from earlier runs (their runs named below)."""
    from lenses_data.models.reuse_report import CALLS, reuse_sources_line, reused_total

    header = ("stage", "in", "out", "rejected", "calls", "reused")
    rows = [
        (
            str(s.get("stage")),
            str(s.get("records_in", 0)),
            str(s.get("records_out", 0)),
            str(s.get("rejected", 0)),
            str(s.get(CALLS, 0)),
            str(reused_total(s)),
        )
        for s in stages
    ]
    width = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(
            [row[0].ljust(width[0]), *(cell.rjust(w) for cell, w in zip(row[1:], width[1:], strict=True))]
        )

    sources = reuse_sources_line(stages)
    table = [line(header), "  ".join("-" * w for w in width), *(line(row) for row in rows)]
    return "\n".join([*table, *([sources] if sources else [])])
