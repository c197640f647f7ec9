"""What `lenses run` prints without a terminal: one plain line per finished stage, a funnel table."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from lenses_app.run_view import PlainStages, funnel_table, stage_view
from lenses_data.stages.base import ColumnMismatch, ShardStats, check_columns

SUMMARIES = [
    {"stage": "ingest", "shards": 1, "records_in": 50, "records_out": 30, "rejected": 20},
    {
        "stage": "visual_validate",
        "shards": 3,
        "shards_skipped": 1,
        "records_in": 273,
        "records_out": 273,
        "rejected": 0,
        "calls_sent": 12,
        "answers_reused": {"/runs/a": 250, "/runs/b": 11},
    },
]


def test_a_pipe_gets_one_plain_line_per_finished_stage() -> None:
    out = io.StringIO()
    view = stage_view(out)
    assert isinstance(view, PlainStages)
    for summary in SUMMARIES:
        view.stage_started(summary["stage"], summary["shards"])
        view.shard_finished(summary["stage"], ShardStats(summary["stage"], 0, records_in=1))
        view.stage_finished(summary)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in out.getvalue()
    assert lines[0].split()[:2] == ["ingest", "1"] and "in 50  out 30  rejected 20" in lines[0]
    assert "(1 already done)" in lines[1]


def test_funnel_table_has_stage_in_out_rejected_calls_sent_and_reused() -> None:
    table = funnel_table(SUMMARIES).splitlines()
    assert table[0].split() == ["stage", "in", "out", "rejected", "calls", "reused"]
    assert table[2].split() == ["ingest", "50", "30", "20", "0", "0"]
    assert table[3].split() == ["visual_validate", "273", "273", "0", "12", "261"]
    # Which runs the reused answers came from, per stage, in one line under the table.
    assert table[4:] == ["answers reused from /runs/a (visual_validate 250); /runs/b (visual_validate 11)"]
    assert len(funnel_table(SUMMARIES[:1]).splitlines()) == 3  # nothing reused: no such line


def test_declared_columns_are_checked_with_the_stage_named() -> None:
    frame = pd.DataFrame({"image_id": ["a"], "extra": [1]})
    check_columns("filter", frame, ("image_id",), "input shard 0", exact=False)
    with pytest.raises(
        ColumnMismatch, match=r"stage filter: output shard 0 .*missing \['path'\]; unexpected \['extra'\]"
    ):
        check_columns("filter", frame, ("image_id", "path"), "output shard 0", exact=True)


def test_a_terminal_shows_time_left_only_while_a_stage_runs() -> None:
    from rich.console import Console

    from lenses_app.run_view import LiveStages

    view = LiveStages(io.StringIO())
    view.stage_started("filter", 2)
    view.shard_finished("filter", ShardStats("filter", 0, records_in=5))

    def rendered() -> str:
        console = Console(file=io.StringIO(), width=200, force_terminal=False)
        console.print(view.progress.get_renderable())
        return console.file.getvalue()  # type: ignore[attr-defined]

    assert "left" in rendered()
    view.stage_finished({"stage": "filter", "records_in": 10, "records_out": 8, "rejected": 2})
    finished = rendered()
    assert "in 10 out 8 rejected 2" in finished and "left" not in finished
