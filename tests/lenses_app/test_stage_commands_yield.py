"""Every stage command judges its stage's yield as `lenses run` judges the build's (issue 44): a
stage whose rejection share leaves its `yields` band writes its outputs, names the reasons' counts
on stderr and exits 5 (again on a rerun that skips every finished shard: the totals are the ones on
disk); with `--accept-yield` the same run exits 0 with a warning.

Each command reruns its stage on a copy of the sample run built by the commands themselves
(tests/lenses_app/conftest.py), with a config that puts the stage outside its band: the
simulator's content knobs where a model answers (every Listing 4 answer a discard, every filter
answer NO), a band the sample's counts cannot meet elsewhere (the sample's ingest rejects 20 of 50
files, so `max_rejected: 0` is left; split passes every image, so `min_rejected: 0.5` is)."""

from __future__ import annotations

import re
import shutil

import pytest

from lenses_data import io
from lenses_data.config import deep_merge
from lenses_data.publish.yields import YIELD_EXIT
from tests.lenses_app.conftest import COMMANDS, stage_command, write_config


def _band(stage: str, **band: float) -> dict:
    return {"yields": {"bands": {stage: band}}}


# command -> the config that puts its stage outside its band on the sample run
BREACH = {
    "ingest": _band("ingest", max_rejected=0.0),
    "dedupe": _band("dedupe", max_rejected=0.0),
    "filter": deep_merge({"simulator": {"yes_rate": 0.0}}, _band("filter", max_rejected=0.5)),
    "split": _band("split", min_rejected=0.5),
    "generate": _band("generate", min_rejected=0.5),
    "rules": _band("rules", max_rejected=0.0),
    "validate": {"simulator": {"content": {"text_discard_rate": 1.0}}},  # the issue's: the default band
    "visual-validate": deep_merge(
        {"simulator": {"content": {"visual_discard_rate": 1.0}}}, _band("visual_validate", max_rejected=0.05)
    ),
    "export": _band("export", min_rejected=0.5),
}


@pytest.mark.slow
@pytest.mark.parametrize("argv", COMMANDS, ids=[argv[0] for argv in COMMANDS])
def test_a_stage_outside_its_band_exits_5_with_its_reasons_unless_accepted(argv, run_copy, tmp_path, capsys):
    run, settings = run_copy
    stage = argv[0].replace("-", "_")
    config = write_config(tmp_path / "breach.yaml", deep_merge(settings, BREACH[argv[0]]))
    shutil.rmtree(io.stage_dir(run, stage))  # the stage is run again, not skipped,
    if "--simulate" in argv:  # and its model asked again, not answered from the journal
        shutil.rmtree(run / "journal")
    capsys.readouterr()

    assert stage_command(argv, config, run) == YIELD_EXIT == 5
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith(f"error: stage {stage} rejected")]
    found = re.match(rf"error: stage {stage} rejected (\d+) of (\d+) records .* reasons: (.*)$", line)
    assert found, line
    if argv[0] == "validate":  # every text discarded, and said so
        assert found.group(1) == found.group(2) and int(found.group(2)) > 100
        assert found.group(3) == f"validator_discarded {found.group(1)}"
    assert "--accept-yield" in err
    assert io.stage_is_complete(run, stage)  # the outputs are written: the stage is done, but suspect
    assert out.strip()  # and its summary shown
    # A rerun finds every shard done and skips it, but judges what is on disk: still out of band.
    assert stage_command(argv, config, run) == 5
    assert line in capsys.readouterr().err.splitlines()

    shutil.rmtree(io.stage_dir(run, stage))
    assert stage_command([*argv, "--accept-yield"], config, run) == 0
    err = capsys.readouterr().err
    assert f"warning: accepted: stage {stage} rejected {found.group(1)} of {found.group(2)}" in err
    assert io.stage_is_complete(run, stage)


def test_every_stage_command_lists_its_exit_codes(capsys):
    from lenses_app.cli import main

    for argv in COMMANDS:
        with pytest.raises(SystemExit):
            main([argv[0], "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--accept-yield" in text, argv
        assert "Exit codes: 0 done;" in text and "5 the stage's yield left its band" in text, argv
