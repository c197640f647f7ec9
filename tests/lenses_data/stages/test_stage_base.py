"""The stage protocol's shared parts (stages/base.py) pinned whole: a shard's stats and the stage
summary, the column checks' messages, `run_stage`'s observer calls and progress lines, and
`ShardedStage.process_shard` with a model client (its journal file, its simulated-answer count),
resumed shards and the success marker. Real Parquet shards in a temporary run directory."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from lenses_data import io
from lenses_data.config import PipelineConfig
from lenses_data.models.journal import shard_journal_path
from lenses_data.models.progress import simulated_banner
from lenses_data.schemas import LensText, column_names
from lenses_data.stages.base import (
    ColumnMismatch,
    ShardedStage,
    ShardStats,
    check_columns,
    log_simulated,
    rejected_records,
    run_stage,
    summarize,
)
from tests.lenses_data.stages.annotate_rows import lens_row

LENS_TEXT_COLUMNS = column_names(LensText)


class TaggedText(LensText):
    """An input stage's richer rows: `load_input` must still return only LensText's columns."""

    tag: str


class JournalingClient:
    """A model client that counts simulator answers and opens one journal per shard."""

    def __init__(self, simulated_answers: int) -> None:
        self.simulated_answers = simulated_answers
        self.journals: list[Path] = []
        self.journal_open = False
        self.asked_inside_journal: list[bool] = []

    @contextlib.contextmanager
    def shard_journal(self, path: Path) -> Iterator[None]:
        self.journals.append(path)
        self.journal_open = True
        try:
            yield
        finally:
            self.journal_open = False

    def ask(self, n: int) -> None:
        self.asked_inside_journal.append(self.journal_open)
        self.simulated_answers += n

    def close(self) -> None:
        pass


class EchoStage(ShardedStage):
    """Keeps each text, rejects those saying 'bad'; asks the client (if any) once per kept row."""

    name = "echo"
    output_settings = ()  # a test stage: nothing in a config changes what it keeps
    input_stage = "generate"
    model = LensText
    reads = ("text_id", "text")
    writes = tuple(LENS_TEXT_COLUMNS)

    def __init__(self, client: JournalingClient | None = None, extra_column: bool = False) -> None:
        super().__init__(PipelineConfig(), client)
        self.extra_column = extra_column
        self.calls: list[tuple[Any, Any, list[str]]] = []

    def transform(self, run: Path, shard: int, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        self.calls.append((run, shard, list(frame.columns)))
        bad = frame["text"].str.contains("bad")
        rejected = [
            {"stage": self.name, "record_id": tid, "reason": "bad_text", "message": "says bad"}
            for tid in frame.loc[bad, "text_id"]
        ]
        kept = frame.loc[~bad].reset_index(drop=True)
        if self.client is not None:
            self.client.ask(len(kept))
        if self.extra_column:
            kept["tag"] = "x"
        return kept, pd.DataFrame(rejected)


def write_input(run: Path, shard: int, texts: list[str]) -> None:
    rows = [
        {**lens_row("i1", "caption", "Literal", text, candidate=n), "tag": "t"}
        for n, text in enumerate(texts)
    ]
    io.write_shard(run, "generate", shard, pd.DataFrame(rows), TaggedText)
    io.mark_stage_complete(run, "generate", [shard])


def test_shard_stats_to_dict_names_every_field_and_copies_the_dicts():
    stats = ShardStats("echo", 4, 5, 3, 2, skipped=True, reasons={"bad": 2}, extra={"simulated_answers": 1})
    as_dict = stats.to_dict()
    assert as_dict == {
        "stage": "echo",
        "shard": 4,
        "records_in": 5,
        "records_out": 3,
        "rejected": 2,
        "skipped": True,
        "reasons": {"bad": 2},
        "extra": {"simulated_answers": 1},
    }
    as_dict["reasons"]["bad"] = 0
    assert stats.reasons == {"bad": 2}


def test_summarize_adds_up_every_shard():
    stats = [
        ShardStats("echo", 1, 5, 3, 2, reasons={"y": 1, "x": 1}, extra={"simulated_answers": 4}),
        ShardStats("echo", 0, 4, 4, 0, skipped=True, reasons={"x": 2}),
        ShardStats("echo", 2, 1, 0, 1, reasons={"a": 1}),
    ]
    summary = summarize("echo", stats)
    assert summary == {
        "stage": "echo",
        "shards": 3,
        "shards_skipped": 1,
        "records_in": 10,
        "records_out": 7,
        "rejected": 3,
        "reasons": {"a": 1, "x": 3, "y": 1},
        "simulated_answers": 4,
    }
    assert list(summary["reasons"]) == ["a", "x", "y"]


def test_log_simulated_warns_once_only_when_answers_were_simulated(caplog):
    logger = logging.getLogger("tests.stage_base")
    with caplog.at_level(logging.INFO, logger="tests.stage_base"):
        log_simulated({"stage": "generate", "simulated_answers": 3}, logger)
        for quiet in (
            {"stage": "rules"},
            {"stage": "rules", "simulated_answers": None},
            {"simulated_answers": 0},
        ):
            log_simulated(quiet, logger)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, f"generate: {simulated_banner(3)}")
    ]


def test_rejected_records_counts_records_not_rows():
    assert rejected_records(pd.DataFrame({"record_id": ["a", "a", "b"], "reason": ["r", "s", "r"]})) == 2
    assert rejected_records(pd.DataFrame({"reason": ["r", "s"]})) == 2  # no ids: every row a record
    assert rejected_records(pd.DataFrame()) == 0


def test_check_columns_names_the_stage_and_every_differing_column():
    declared = ("a", "b")
    check_columns("s", pd.DataFrame(columns=["a", "b", "c"]), declared, "input", exact=False)
    cases = [
        (pd.DataFrame(columns=["a", "c"]), "missing ['b']; unexpected ['c']"),
        (pa.table({"a": [1]}), "missing ['b']"),
        (pd.DataFrame(columns=["b", "a", "c"]), "unexpected ['c']"),
    ]
    for table, differences in cases:
        with pytest.raises(ColumnMismatch) as raised:
            check_columns("s", table, declared, "output shard 2", exact=True)
        assert (
            str(raised.value) == f"stage s: output shard 2 columns differ from its declaration: {differences}"
        )


def test_answer_client_says_which_stage_has_no_client():
    with pytest.raises(RuntimeError) as raised:
        EchoStage().answer_client()
    assert str(raised.value) == "stage echo: built without a model client, cannot ask the model"


def test_process_shard_journals_counts_simulated_answers_and_resumes(tmp_path):
    write_input(tmp_path, 3, ["a calm lake", "a bad photo", "a red barn"])
    client = JournalingClient(simulated_answers=5)  # earlier shards' answers are not this shard's
    stage = EchoStage(client)
    summary = run_stage(stage, tmp_path)
    # transform saw the run, the shard and LensText's columns only (the input model's, not TaggedText's)
    assert stage.calls == [(tmp_path, 3, LENS_TEXT_COLUMNS)]
    assert client.journals == [shard_journal_path(tmp_path, "echo", 3)]
    assert client.asked_inside_journal == [True]
    expected = {
        "stage": "echo",
        "shards": 1,
        "shards_skipped": 0,
        "records_in": 3,
        "records_out": 2,
        "rejected": 1,
        "reasons": {"bad_text": 1},
        "simulated_answers": 2,
    }
    assert summary == expected
    assert io.read_marker(tmp_path, "echo") == {
        "stage": "echo",
        "shards": ["part-00003.parquet"],
        "stats": expected,
    }
    resumed = stage.process_shard(tmp_path, 3)  # done: counted from its files, nothing asked
    assert resumed == ShardStats("echo", 3, 3, 2, 1, skipped=True, reasons={"bad_text": 1})
    assert len(stage.calls) == 1
    # A runner may hand back a skipped shard's stats without counts (a cached task): finish
    # counts it from the files.
    stale = [ShardStats("echo", 3, skipped=True)]
    assert stage.finish(tmp_path, [3], stale) == {**expected, "shards_skipped": 1, "simulated_answers": 0}


def test_process_shard_without_client_or_rejections_reports_no_extras(tmp_path):
    write_input(tmp_path, 0, ["a calm lake"])
    stats = EchoStage().process_shard(tmp_path, 0)
    assert stats == ShardStats("echo", 0, 1, 1, 0)
    assert (stats.reasons, stats.extra) == ({}, {})


def test_process_shard_checks_declared_columns_naming_stage_and_shard(tmp_path):
    write_input(tmp_path, 3, ["a calm lake"])
    reader = EchoStage()
    reader.reads = ("text_id", "nope")
    with pytest.raises(ColumnMismatch) as raised:
        reader.process_shard(tmp_path, 3)
    assert str(raised.value) == (
        "stage echo: input shard 3 (generate) columns differ from its declaration: missing ['nope']"
    )
    with pytest.raises(ColumnMismatch) as raised:
        EchoStage(extra_column=True).process_shard(tmp_path, 3)
    assert (
        str(raised.value)
        == "stage echo: output shard 3 columns differ from its declaration: unexpected ['tag']"
    )
    assert not io.shard_path(tmp_path, "echo", 3).exists()


def test_finish_refuses_a_skipped_shard_whose_output_is_gone(tmp_path):
    write_input(tmp_path, 0, ["a calm lake"])
    stage = EchoStage()
    stage.process_shard(tmp_path, 0)
    io.shard_path(tmp_path, "echo", 0).unlink()
    with pytest.raises(FileNotFoundError) as raised:
        stage.finish(tmp_path, [0], [ShardStats("echo", 0, skipped=True)])
    assert str(raised.value) == "stage 'echo': cannot mark complete, missing shards ['part-00000.parquet']"


class PlainStage:
    """A stage of the bare protocol: its `finish` adds its own keys, not the common counts."""

    name = "plain"
    input_stage = None
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    def input_shards(self, run: Path) -> list[int]:
        return [0, 1]

    def process_shard(self, run: Path, shard: int) -> ShardStats:
        return ShardStats(
            self.name, shard, records_in=shard + 2, records_out=shard + 1, rejected=1, skipped=shard == 1
        )

    def finish(self, run: Path, shards: list[int], stats: list[ShardStats]) -> dict[str, Any]:
        return {"finished": shards}

    def setup(self) -> None: ...

    def close(self) -> None: ...


class RecordingObserver:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def stage_started(self, stage: str, shards: int) -> None:
        self.calls.append(("started", stage, shards))

    def shard_finished(self, stage: str, stats: ShardStats) -> None:
        self.calls.append(("shard", stage, stats))

    def stage_finished(self, summary: dict[str, Any]) -> None:
        self.calls.append(("finished", summary))


def test_run_stage_tells_the_observer_and_logs_each_shard(tmp_path, caplog):
    stage = PlainStage()
    observer = RecordingObserver()
    in_reverse = lambda indices: (stage.process_shard(tmp_path, i) for i in reversed(indices))  # noqa: E731
    before = time.monotonic()
    with caplog.at_level(logging.INFO, logger="lenses_data.stages.base"):
        summary = run_stage(stage, tmp_path, map_shards=in_reverse, observer=observer)
    took = time.monotonic() - before
    assert summary == {
        "stage": "plain",
        "shards": 2,
        "shards_skipped": 1,
        "records_in": 5,
        "records_out": 3,
        "rejected": 2,
        "reasons": {},
        "simulated_answers": 0,
        "finished": [0, 1],
    }
    first, second = stage.process_shard(tmp_path, 1), stage.process_shard(tmp_path, 0)
    assert observer.calls == [
        ("started", "plain", 2),
        ("shard", "plain", first),
        ("shard", "plain", second),
        ("finished", summary),
    ]
    shard_lines = [r for r in caplog.records if r.msg.startswith("%s: shard")]
    elapsed = [r.args[-1] for r in shard_lines]
    assert [r.getMessage() for r in shard_lines] == [
        f"plain: shard 1/2 (skipped, already done) in=3 out=2 rejected=1, {elapsed[0]:.1f}s elapsed",
        f"plain: shard 2/2 (done) in=2 out=1 rejected=1, {elapsed[1]:.1f}s elapsed",
    ]
    assert 0 <= elapsed[0] <= elapsed[1] <= took  # seconds since the stage started, not a clock reading
