"""The one entry without exceptions (issue 40 item 4): `lenses report` writes under the run lock;
`lenses ingest`, `dedupe`, `split` and `export` build their stage from the registry and run it
through `run_entered_stage`, so the stage's `setup` and `close` are called around `run_stage`.

The stages here are the real ones, registered under their names as subclasses that write one line
per call beside the run (a file a user could read), so what is observed is what ran."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lenses_app.cli import main
from lenses_data import io
from lenses_data.runlock import run_directory_lock
from lenses_data.stages import registry
from lenses_data.stages.dedupe import DedupeStage
from lenses_data.stages.export import ExportStage
from lenses_data.stages.ingest import IngestStage
from lenses_data.stages.split import SplitStage
from tests.lenses_app.conftest import stage_command, write_config


def _calls(config) -> Path:
    return Path(config.run_dir).parent / "calls.log"


class Recording:
    """Appends `setup`, `shard N`, `finish` and `close` to RUN/../calls.log as they happen."""

    def _note(self, what: str) -> None:
        with _calls(self.config).open("a") as log:
            log.write(f"{self.name} {what}\n")

    def setup(self) -> None:
        super().setup()
        self._note("setup")

    def process_shard(self, run: Path, shard: int):
        self._note(f"shard {shard}")
        return super().process_shard(run, shard)

    def finish(self, run: Path, shards: list[int], stats: list):
        self._note("finish")
        return super().finish(run, shards, stats)

    def close(self) -> None:
        self._note("close")
        super().close()


class RecordingIngest(Recording, IngestStage):
    pass


class RecordingDedupe(Recording, DedupeStage):
    pass


class RecordingSplit(Recording, SplitStage):
    pass


class RecordingExport(Recording, ExportStage):
    pass


RECORDING = {
    "ingest": RecordingIngest,
    "dedupe": RecordingDedupe,
    "split": RecordingSplit,
    "export": RecordingExport,
}


@pytest.mark.slow
@pytest.mark.parametrize("stage", list(RECORDING))
def test_a_global_stage_command_sets_up_runs_and_closes_the_registered_stage(
    stage, run_copy, tmp_path, monkeypatch
):
    run, settings = run_copy
    real = registry.stage_class  # the declared stage's class swapped for its recording subclass
    monkeypatch.setattr(
        registry,
        "stage_class",
        lambda name, config=None: RECORDING[name] if name == stage else real(name, config),
    )
    shutil.rmtree(io.stage_dir(run, stage))
    assert stage_command([stage], write_config(tmp_path / "sample.yaml", settings), run) == 0
    calls = (run.parent / "calls.log").read_text().splitlines()
    assert calls == [f"{stage} setup", f"{stage} shard 0", f"{stage} finish", f"{stage} close"]
    assert io.stage_is_complete(run, stage)


def test_report_is_refused_with_exit_3_while_a_live_run_holds_the_directory(run_copy, capsys):
    run, _ = run_copy
    report = run / "export" / "report"
    shutil.rmtree(report)
    with run_directory_lock(run):
        assert main(["report", "--run", str(run), "--n", "2"]) == 3
    assert "in use by a live run" in capsys.readouterr().err
    assert not report.exists()  # nothing written beside the live run
    assert main(["report", "--run", str(run), "--n", "2"]) == 0  # free again: written
    assert (report / "index.html").exists()
