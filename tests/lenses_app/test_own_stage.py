"""A user's own stage without a fork: the documented example (docs/examples/own_stage) run exactly as
the docs say, rerun (resume), rerun with another setting (refused); a stage the config names that
cannot be imported, or declares no settings or no columns, refused at once (exit 2, nothing written)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lenses_data.config import ConfigError, config_from_dict
from lenses_data.schemas import LensText

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = Path("docs/examples/own_stage")
LENSES = str(Path(sys.executable).parent / "lenses")
COMMAND = [LENSES, "run", "--sample", "--config", str(EXAMPLE / "config.yaml")]


def _env(home: Path) -> dict[str, str]:
    """`PYTHONPATH=docs/examples/own_stage` as the docs write it, then this checkout's code."""
    path = os.pathsep.join([str(EXAMPLE), str(REPO_ROOT)])
    return {**os.environ, "PYTHONPATH": path, "PREFECT_HOME": str(home), "HF_HUB_OFFLINE": "1"}


def _lenses(cwd: Path, command: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=cwd, env=_env(cwd / ".prefect"), capture_output=True, text=True, timeout=timeout
    )


def _example_in(tmp_path: Path) -> Path:
    shutil.copytree(REPO_ROOT / EXAMPLE, tmp_path / EXAMPLE)
    return tmp_path


@pytest.mark.slow
def test_the_documented_own_stage_builds_resumes_and_guards_its_settings(tmp_path):
    cwd = _example_in(tmp_path)
    word = yaml.safe_load((cwd / EXAMPLE / "config.yaml").read_text())["pipeline"]["extra_stages"][0]
    run = cwd / "runs" / "own_stage"
    first = _lenses(cwd, COMMAND)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    lines = first.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:4] == ["stage", "in", "out", "rejected"])
    stages = [line.split()[0] for line in lines[header + 2 : lines.index("", header)]]  # the funnel
    assert stages[stages.index("rules") :][:3] == ["rules", "banned_words", "validate"]
    rejected = pd.concat(
        pd.read_parquet(p) for p in sorted((run / "rejections").glob("banned_words-part-*.parquet"))
    )
    assert len(rejected) > 0 and set(rejected["reason"]) == {"banned_word"}
    banned = word["settings"]["word"]
    ruled = pd.concat(pd.read_parquet(p) for p in sorted((run / "rules").glob("part-*.parquet")))
    assert set(rejected["record_id"]) == set(
        ruled.loc[ruled["text"].str.contains(banned, case=False), "text_id"]
    )
    for table in ("captions", "prompts"):
        texts = pd.read_parquet(run / "export" / f"{table}.parquet")
        assert len(texts) > 0 and not texts["text"].str.contains(banned, case=False).any()
    card = (run / "export" / "README.md").read_text()
    assert "| banned_words: kept |" in card and "| banned_words | banned_word |" in card
    manifest = json.loads((run / "export" / "manifest.json").read_text())
    assert "banned_words" in [c["stage"] for c in manifest["counts"]]
    settings = json.loads((run / "banned_words" / "_SETTINGS.json").read_text())
    assert settings["inputs"]["pipeline.banned_words.settings.word"] == banned

    written = {p: p.stat().st_mtime_ns for p in (run / "banned_words").glob("part-*.parquet")}
    again = _lenses(cwd, COMMAND)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in written} == written
    logs = sorted((run / "logs").glob("run-*.log"))
    shards = len(written)
    assert f"shards {shards} ({shards} skipped, already done)" in next(
        line for line in logs[-1].read_text().splitlines() if "stage banned_words: in=" in line
    )

    changed = yaml.safe_load((cwd / EXAMPLE / "config.yaml").read_text())
    changed["pipeline"]["extra_stages"][0]["settings"]["word"] = "kitchen"
    (cwd / "changed.yaml").write_text(yaml.safe_dump(changed))
    refused = _lenses(cwd, [LENSES, "run", "--sample", "--config", "changed.yaml"])
    assert refused.returncode == 2 and "pipeline.banned_words.settings.word" in refused.stderr
    assert {p: p.stat().st_mtime_ns for p in written} == written


class NoSettingsStage:
    """Declares its columns but not the settings that decide its rows."""

    reads = ("text_id",)
    writes = tuple(LensText.model_fields)


class NoColumnsStage:
    """Declares its settings but not its columns."""

    output_settings = ("settings",)


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        ("no_such_module_here:Stage", "cannot import 'no_such_module_here'"),
        (f"{__name__}:Missing", f"module '{__name__}' has no class 'Missing'"),
        (f"{__name__}:NoSettingsStage", "declares no output_settings"),
        (f"{__name__}:NoColumnsStage", "declares no reads / writes"),
    ],
)
def test_a_stage_that_cannot_run_is_refused_at_once(tmp_path, cls, expected):
    cwd = _example_in(tmp_path)
    config = yaml.safe_load((cwd / EXAMPLE / "config.yaml").read_text())
    config["pipeline"]["extra_stages"][0]["cls"] = cls
    (cwd / "bad.yaml").write_text(yaml.safe_dump(config))
    done = _lenses(cwd, [LENSES, "run", "--sample", "--config", "bad.yaml"], timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert (
        done.stderr.startswith("error: ")
        and expected in done.stderr
        and "pipeline.extra_stages" in done.stderr
    )
    assert "Traceback" not in done.stdout + done.stderr
    assert not (cwd / "runs").exists()  # nothing written


def _extra(**entry) -> dict:
    base = {
        "name": "banned_words",
        "cls": "banned_words:BannedWordStage",
        "after": "rules",
        "settings": {"word": "x"},
    }
    return {"pipeline": {"extra_stages": [{**base, **entry}]}}


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"after": "export"}, "after='export' is not a stage before export"),
        ({"after": "nowhere"}, "after='nowhere' is not a stage before export"),
        ({"name": "validate"}, "stage name 'validate' is taken"),
        ({"role": "painter"}, "unknown role 'painter'"),
        ({"settings": {}}, "settings of banned_words: Field required"),
        ({"settings": {"word": "x", "colour": 1}}, "Extra inputs are not permitted"),
    ],
)
def test_a_misplaced_or_misconfigured_own_stage_is_a_config_error(monkeypatch, entry, expected):
    monkeypatch.syspath_prepend(str(REPO_ROOT / EXAMPLE))
    with pytest.raises(ConfigError, match="extra_stages") as error:
        config_from_dict(_extra(**entry), environ={})
    assert expected in str(error.value)


def test_own_stages_are_placed_after_their_stage_and_read_its_rows(monkeypatch):
    """Two stages after rules run in the order given; validate reads the last one's rows."""
    from lenses_data.stages.registry import build_stage, pipeline_order

    monkeypatch.syspath_prepend(str(REPO_ROOT / EXAMPLE))
    two = _extra()
    two["pipeline"]["extra_stages"].append({**two["pipeline"]["extra_stages"][0], "name": "second_words"})
    config = config_from_dict(two, environ={})
    order = pipeline_order(config)
    assert order[order.index("rules") :][:4] == ["rules", "banned_words", "second_words", "validate"]
    assert build_stage("banned_words", config).input_stage == "rules"
    second = build_stage("second_words", config)
    assert (second.name, second.input_stage, second.settings.word) == ("second_words", "banned_words", "x")
    assert build_stage("validate", config, with_client=False).input_stage == "second_words"


def test_an_own_stage_is_judged_against_its_own_band(monkeypatch):
    """The build's yield check reads a user stage's band from its entry (`bands_of_run`)."""
    from lenses_data.config.yields import bands_of_run
    from lenses_data.publish.yields import out_of_band

    monkeypatch.syspath_prepend(str(REPO_ROOT / EXAMPLE))
    config = config_from_dict(_extra(max_rejected=0.05), environ={})
    summary = {"stage": "banned_words", "records_in": 300, "rejected": 150, "reasons": {"banned_word": 150}}
    breaches = out_of_band([summary], config.yields, bands_of_run(config))
    assert [(b.stage, b.band.max_rejected) for b in breaches] == [("banned_words", 0.05)]
    assert out_of_band([summary], config.yields) == []  # without the run's bands: not judged


def test_an_own_stage_is_guarded_with_its_own_settings(monkeypatch):
    """The settings guard records a user stage's class and settings: another word is another digest,
    for it and every stage after it."""
    from lenses_data.stages.registry import pipeline_order
    from lenses_data.stages.settings_guard import expected_settings

    monkeypatch.syspath_prepend(str(REPO_ROOT / EXAMPLE))
    one, other = (config_from_dict(_extra(settings={"word": w}), environ={}) for w in ("harbor", "kitchen"))
    order = pipeline_order(one)
    before, after = expected_settings(one, order), expected_settings(other, order)
    assert before["banned_words"]["inputs"] == {
        "pipeline.banned_words.cls": "banned_words:BannedWordStage",
        "pipeline.banned_words.settings.word": "harbor",
    }
    changed = [name for name in order if before[name]["digest"] != after[name]["digest"]]
    assert changed == order[order.index("banned_words") :]
