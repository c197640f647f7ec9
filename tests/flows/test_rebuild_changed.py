"""Regenerate after a change on the same run directory, paying only for what changed.

The sample pool is built once against an external `lenses simulate` (real HTTP) that counts its
calls by request key; each test then changes a copy of that run and asserts what the rerun sent.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from lenses_data import io
from lenses_data.annotation.rules import words
from lenses_data.models.journal import read_run_journal
from lenses_data.stages.settings_guard import SETTINGS_FILE, SettingsChanged
from tests.flows.rebuild_support import (
    EARLY,
    build,
    calls,
    config_dict,
    copy_run,
    exported,
    json_of,
    near_copy,
    new_images,
    sent_since,
    snapshot,
    splits,
    with_changes,
    write_config,
)


@pytest.fixture(scope="module")
def built(prefect_harness, simulator, sample_pool, tmp_path_factory) -> dict:
    """One finished build of the sample pool; its calls are what a rebuild must not repeat."""
    root = tmp_path_factory.mktemp("built")
    config = config_dict(root / "run", sample_pool, simulator)
    before = calls(simulator)
    build(write_config(root / "config.yaml", config))
    return {"run": root / "run", "config": config, "sent": sent_since(simulator, before)}


def test_the_first_build_asked_every_model_stage(built):
    stages = {key.split(":")[0] for key in built["sent"]}
    assert stages == {"filter", "generate", "validate", "visual_validate"}


def _lost_a_caption(run: Path) -> set[tuple[str, str]]:
    """(image, kind) of the texts the lowered maximum rejects at rules, now and not before."""
    now = io.read_rejections(run, "rules")
    before = io.read_parquet_files(sorted((run / io.REPLACED_DIR).glob("*/rejections/rules-part-*.parquet")))
    new = now[~now["record_id"].isin(set(before["record_id"]))]
    texts = io.read_stage(run, "generate").set_index("text_id")
    assert set(new["reason"]) == {"word_count_high"} and len(new)
    return {(texts.loc[t, "image_id"], str(texts.loc[t, "kind"])) for t in new["record_id"]}


def test_a_lowered_caption_maximum_rebuilds_from_rules_sending_no_call(built, simulator, tmp_path):
    """Rules and what follows are redone; the stages before are kept; no model request is sent. An
    image that lost a caption makes a new validator batch (Listing 4 takes the texts of one image
    and kind together), and that batch is composed from each text's earlier answer."""
    run = copy_run(built["run"], tmp_path / "run")
    lowered = with_changes(built["config"], run, annotate={"caption_words": {"min": 8, "max": 20}})
    path = write_config(tmp_path / "config.yaml", lowered)
    untouched = snapshot(run, EARLY)
    old_settings = io.stage_dir(run, "rules").joinpath(SETTINGS_FILE).read_text()
    with pytest.raises(SettingsChanged, match=r"stage rules .*caption_words.*--rebuild-changed"):
        build(path)
    before = calls(simulator)
    build(path, rebuild_changed=True)
    sent = sent_since(simulator, before)
    print(
        f"lowered caption maximum: {sum(sent.values())} calls sent, the build sent {sum(built['sent'].values())}"
    )
    assert sent == {}
    lost = _lost_a_caption(run)
    journal = [e for e in read_run_journal(run) if e.key.startswith(("validate:", "visual_validate:"))]
    # Every validator answer of the rebuilt run came from the moved journals; those of the batches
    # that lost a caption were composed part by part (a batch's key names its image and kind).
    assert journal and all(e.source_run for e in journal)
    new_batches = {(e.key.split(":")[1], e.key.split(":")[2]) for e in journal if e.key not in built["sent"]}
    assert new_batches and new_batches <= lost
    assert all(e.parts for e in journal if e.key not in built["sent"])
    captions = exported(run, "captions")
    assert len(captions) and max(len(words(t)) for t in captions["text"]) <= 20
    assert snapshot(run, EARLY) == untouched  # the stages before rules are kept as they were
    replaced = list((run / io.REPLACED_DIR).iterdir())
    assert len(replaced) == 1 and replaced[0].name in old_settings
    assert {p.name for p in replaced[0].iterdir()} == {"rules", "validate", "visual_validate", "export",
                                                        "journal", "rejections"}  # fmt: skip
    before = calls(simulator)
    build(path, rebuild_changed=True)  # done: a rerun is a plain resume
    assert sent_since(simulator, before) == {} and len(list((run / io.REPLACED_DIR).iterdir())) == 1


def test_a_changed_validator_setting_sends_only_validator_calls(built, simulator, tmp_path):
    run = copy_run(built["run"], tmp_path / "run")
    role = dict(built["config"]["models"]["validator"])
    role["sampling"] = {**role.get("sampling", {}), "temperature": 0.3}
    changed = with_changes(built["config"], run)
    changed["models"]["validator"] = role
    untouched = snapshot(run, [*EARLY, "rules"])
    before = calls(simulator)
    build(write_config(tmp_path / "config.yaml", changed), rebuild_changed=True)
    sent = sent_since(simulator, before)
    print(f"changed validator setting: {dict(Counter(k.split(':')[0] for k in sent))} calls sent")
    assert {key.split(":")[0] for key in sent} <= {"validate", "visual_validate"}
    assert len([k for k in sent if k.startswith("validate:")]) == len(
        [k for k in built["sent"] if k.startswith("validate:")]
    )
    assert snapshot(run, [*EARLY, "rules"]) == untouched


def test_a_killed_regeneration_resumes(built, simulator, tmp_path):
    """Killed while moving the old outputs aside (its plan on disk, one stage moved), then killed
    again with rules half redone: a rerun with the flag finishes both and builds what an
    uninterrupted regeneration builds, sending no call for what was answered."""
    from lenses_data.stages.rebuild import PENDING

    run = copy_run(built["run"], tmp_path / "run")
    lowered = with_changes(built["config"], run, annotate={"caption_words": {"min": 8, "max": 20}})
    path = write_config(tmp_path / "config.yaml", lowered)
    digest = json_of(io.stage_dir(run, "rules") / SETTINGS_FILE)["digest"]
    plan = {"into": digest, "stages": ["rules", "validate", "visual_validate", "export"]}
    (run / io.REPLACED_DIR / digest).mkdir(parents=True)
    io.atomic_write_json(run / io.REPLACED_DIR / PENDING, plan)
    (run / "rules").rename(run / io.REPLACED_DIR / digest / "rules")  # the first rename, then the kill
    build(path, rebuild_changed=True, stop_after="rules")
    assert not (run / io.REPLACED_DIR / PENDING).exists()
    assert sorted(p.name for p in (run / io.REPLACED_DIR).iterdir()) == [digest]
    moved = run / io.REPLACED_DIR / digest
    assert {"validate", "visual_validate", "export"} <= {p.name for p in moved.iterdir()}
    assert not (run / "validate").exists() and (moved / "journal" / "validate").is_dir()
    io.shard_path(run, "rules", 1).unlink()  # killed in rules: one shard lost, no success marker
    (io.stage_dir(run, "rules") / io.SUCCESS_MARKER).unlink()
    before = calls(simulator)
    result = build(path, rebuild_changed=True)
    rules = next(s for s in result["stages"] if s["stage"] == "rules")
    assert rules["shards_skipped"] == rules["shards"] - 1
    assert sent_since(simulator, before) == {}
    assert len(list((run / io.REPLACED_DIR).iterdir())) == 1
    captions = exported(run, "captions")
    assert len(captions) and max(len(words(t)) for t in captions["text"]) <= 20


def test_ten_new_images_send_only_their_own_calls_and_keep_every_split(built, simulator, tmp_path):
    """One more source: eight new pictures, a near copy of a test image and one of a train image
    (larger, so the survivor rule alone would keep the copies).
    Only the new images are ingested and asked about; every earlier image keeps its split; the
    copy of the test image never reaches train."""
    run = copy_run(built["run"], tmp_path / "run")
    earlier_splits = splits(run)
    ingest = io.read_stage(run, "ingest").set_index("image_id")
    test_image = next(i for i, s in sorted(earlier_splits.items()) if s == "test")
    train_image = next(i for i, s in sorted(earlier_splits.items()) if s == "train")
    folder = new_images(tmp_path / "new", 8)
    near_copy(ingest.loc[test_image, "path"], folder / "copy-of-test.png")
    near_copy(ingest.loc[train_image, "path"], folder / "copy-of-train.png")
    grown = with_changes(built["config"], run)
    grown["ingest"]["sources"] = [*built["config"]["ingest"]["sources"], str(folder)]
    shards = sorted(p.name for p in io.stage_dir(run, "ingest").glob("part-*.parquet"))
    untouched = snapshot(run, ["ingest", "filter", "generate"])
    before = calls(simulator)
    result = build(write_config(tmp_path / "config.yaml", grown))  # no flag: an appended source is no change
    done = {s["stage"]: s for s in result["stages"]}
    assert done["filter"]["shards_skipped"] == len(shards) and done["filter"]["shards"] == len(shards) + 1
    assert done["dedupe"]["earlier_decisions"] == {"kept_as_they_were": len(ingest), "new_images": 10}
    assert not (run / io.REPLACED_DIR).exists()
    sent = sent_since(simulator, before)
    print(f"ten new images: {dict(Counter(k.split(':')[0] for k in sent))} calls sent")
    now = io.read_stage(run, "ingest")
    new_ids = set(now["image_id"]) - set(ingest.index)
    assert len(new_ids) == 10 and len(now) == len(ingest) + 10
    assert {key.split(":")[0] for key in sent} >= {"filter", "generate", "validate"}
    assert {key.split(":")[1] for key in sent} <= new_ids  # every call is about a new image
    grown_files = snapshot(run, ["ingest", "filter", "generate"])
    rewritten = {"ingest/_summary.json", *(f"{s}/{SETTINGS_FILE}" for s in ("ingest", "filter", "generate"))}
    assert {k: grown_files[k] for k in untouched if k not in rewritten} == {
        k: v for k, v in untouched.items() if k not in rewritten
    }  # every earlier shard, rejection file and journal is kept as it was
    assert sorted(p.name for p in io.stage_dir(run, "ingest").glob("part-*.parquet"))[: len(shards)] == shards
    after = splits(run)
    assert {i: after[i] for i in earlier_splits} == earlier_splits
    copy_id = now.loc[now["source"] == str(folder / "copy-of-test.png"), "image_id"].item()
    assert after.get(copy_id) in (None, "test")
    dedupe = io.read_stage(run, "dedupe").set_index("image_id")
    assert not dedupe.loc[copy_id, "kept"] and dedupe.loc[copy_id, "duplicate_of"] == test_image


def test_lenses_plan_says_what_a_regeneration_redoes_and_sends(built, tmp_path, capsys):
    """`lenses plan --rebuild-changed` on the run and a changed config, before anything runs."""
    from lenses_app.cli import main

    lowered = with_changes(built["config"], built["run"], annotate={"caption_words": {"min": 8, "max": 20}})
    validator = with_changes(built["config"], built["run"])
    validator["models"]["validator"] = {**validator["models"]["validator"], "sampling": {"temperature": 0.3}}
    out = {}
    for name, config in (("lowered", lowered), ("validator", validator)):
        path = write_config(tmp_path / f"{name}.yaml", config)
        before = snapshot(built["run"], ["rules", "validate"])
        assert (
            main(["plan", "--run", str(built["run"]), "--config", path, "--rebuild-changed", "--json", "-"])
            == 0
        )
        assert snapshot(built["run"], ["rules", "validate"]) == before  # a plan changes nothing
        out[name] = {s["stage"]: s for s in json.loads(capsys.readouterr().out)["regeneration"]}
    assert main(["plan", "--run", str(built["run"]), "--config", path, "--rebuild-changed"]) == 0
    table = capsys.readouterr().out
    print(table)  # the table a user reads (pytest -s)
    assert "validate        rebuilt" in table and "filter          kept" in table
    assert "regeneration: " in table and "GPU-hours; a new build: " in table
    asked = Counter(key.split(":")[0] for key in built["sent"])
    lowered, validator = out["lowered"], out["validator"]
    assert [s for s in lowered if lowered[s]["action"] == "kept"] == EARLY
    assert [s for s in lowered if lowered[s]["action"] == "rebuilt"] == [
        "rules",
        "validate",
        "visual_validate",
        "export",
    ]
    assert lowered["generate"]["requests"] == asked["generate"] and lowered["generate"]["sent_max"] == 0
    assert lowered["validate"]["sent_min"] == 0 and lowered["validate"]["sent_max"] == asked["validate"]
    assert "caption_words" in lowered["rules"]["why"]
    assert validator["rules"]["action"] == "kept" and validator["validate"]["action"] == "rebuilt"
    assert validator["validate"]["sent_min"] == asked["validate"] == validator["validate"]["requests"]
    assert 0 < validator["validate"]["gpu_hours_min"] == validator["validate"]["gpu_hours"]
    assert validator["visual_validate"]["sent_min"] == 0 and validator["filter"]["gpu_hours_max"] == 0
