"""A validator batch that changed is composed from each text's earlier answer (models/compose.py),
through the real stages, the production client and real HTTP to a scripted simulator whose calls
are counted: an earlier run validated four captions of one image in one batch (one text edited, one
discarded); a run whose rules left three of them sends nothing and keeps exactly what the earlier
run decided about those three; a batch with one text never answered goes out whole, as built.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from PIL import Image

from lenses_data import io
from lenses_data.config import config_from_dict
from lenses_data.models.client import ModelClient
from lenses_data.models.journal import read_run_journal, shard_journal_path
from lenses_data.models.reuse import forget_indexes
from lenses_data.schemas import LensText
from lenses_data.simulator.simulator import SimConfig, run_in_thread
from lenses_data.simulator.testing import sim_models_config, sim_stats
from lenses_data.stages._annotate import rejections_frame
from lenses_data.stages.base import run_stage
from lenses_data.stages.validate import ValidateStage
from lenses_data.stages.validator_base import ValidatorStage
from lenses_data.stages.visual_validate import VisualValidateStage
from tests.lenses_data.stages.annotate_rows import frame, lens_row

TEXTS = {
    "Literal": "A lone oak tree stands on a grassy hill beneath dark clouds and an old wooden fence.",
    "Emotional": "Quiet dread hangs in the heavy air as evening settles over the empty green pasture.",
    "Background": "Rolling farmland and a low stone wall fade into grey mist behind the solitary oak tree.",
    "Abstract": "Endurance takes shape as a single living thing holding its ground against the weather.",
}
EDITED = "A lone oak tree stands on a grassy hill beneath dark clouds beside an old wooden fence."
NEW = "A twisted branch of the old oak reaches like an open hand toward the storm over the hill."


@pytest.fixture(autouse=True)
def _fresh_indexes():
    forget_indexes()
    yield
    forget_indexes()


@pytest.fixture
def image(tmp_path: Path) -> Path:
    """The one image every text is about (the visual validator sends it)."""
    path = tmp_path / "oak.png"
    Image.new("RGB", (32, 32), (40, 120, 60)).save(path)
    return path


def _rows(image: Path, lenses: list[str], extra: str | None = None) -> list[dict[str, Any]]:
    rows = [lens_row("oak", "caption", lens, TEXTS[lens], split="test") for lens in lenses]
    if extra is not None:
        rows.append(lens_row("oak", "caption", "Figurative", extra, split="test"))
    return [{**row, "path": str(image)} for row in rows]


def _answer(rows: list[dict[str, Any]], order: list[int] | None = None) -> str:
    """The validator's answer: the Literal text edited, the Emotional one discarded, the rest kept;
    `order` returns the items in another order (an answer the stage must not apply as it is)."""
    items = []
    for row in rows:
        text = {"Literal": EDITED, "Emotional": ""}.get(row["lens"], row["text"])
        items.append({"Caption": text, "Focus": row["focus"], "Category": row["lens"]})
    return json.dumps([items[i] for i in order] if order else items)


def _rules_run(run: Path, rows: list[dict[str, Any]]) -> Path:
    """A run whose `rules` stage is complete with `rows` in one shard (real Parquet)."""
    io.write_shard(
        run, "rules", 0, frame([{k: v for k, v in r.items() if k != "path"} for r in rows]), LensText
    )
    io.write_rejections(run, "rules", 0, rejections_frame([]))
    io.mark_stage_complete(run, "rules", [0])
    return run


def _validate(
    cls: type[ValidatorStage], url: str, run: Path, image: Path, **models: Any
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run the stage on `run` as a build does (journal per shard); its rows and rejections."""
    if cls is VisualValidateStage:  # the visual validator reads its images from ingest's rows
        io.shard_path(run, "ingest", 0).parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"image_id": ["oak"], "path": [str(image)]}).to_parquet(io.shard_path(run, "ingest", 0))
    settings = {"run_dir": str(run), "models": {**sim_models_config([url]).model_dump(), **models}}
    config = config_from_dict(settings, environ={})
    client = ModelClient.from_config(config.models, journal_dir=run / "journal")
    stage = cls(config, client=client)
    stage.input_stage = "rules"
    try:
        run_stage(stage, run)
    finally:
        client.close()
    return io.read_stage(run, cls.name), io.read_rejections(run, cls.name)


def _calls(url: str) -> int:
    return int(sim_stats(url)["total_calls"])


def _decided(kept: pd.DataFrame, rejected: pd.DataFrame) -> dict[str, str]:
    """text id -> what the validator made of it: the kept text, or the rejection's reason."""
    out = dict(zip(kept["text_id"], kept["text"], strict=True))
    out.update(zip(rejected["record_id"], "rejected: " + rejected["reason"], strict=True))
    return out


@pytest.mark.parametrize("cls", [ValidateStage, VisualValidateStage])
def test_a_smaller_batch_is_composed_from_the_earlier_answers_and_sends_nothing(
    image: Path, cls: type[ValidatorStage], tmp_path: Path
) -> None:
    four, three = _rows(image, list(TEXTS)), _rows(image, ["Literal", "Emotional", "Background"])
    stage = cls(config_from_dict({}, environ={}))
    script = {stage.build_request(four).key: (_answer(four),)}
    with run_in_thread(SimConfig(scripted=script)) as url:
        first = _rules_run(tmp_path / "first", four)
        before_first = _decided(*_validate(cls, url, first, image))
        assert _calls(url) == 1
        second = _rules_run(tmp_path / "second", three)
        after = _decided(*_validate(cls, url, second, image, reuse_answers_from=[str(first)]))
        assert _calls(url) == 1  # nothing sent: every text of the new batch was answered before
    assert after == {row["text_id"]: before_first[row["text_id"]] for row in three}
    assert (
        after[three[0]["text_id"]] == EDITED and after[three[1]["text_id"]] == "rejected: validator_discarded"
    )
    (entry,) = read_run_journal(second)
    assert entry.key == stage.build_request(three).key and entry.attempts == 0
    assert entry.source_run == str(first.resolve()) and entry.parts and len(entry.parts) == 3


def test_a_batch_with_a_text_never_answered_goes_out_whole(image: Path, tmp_path: Path) -> None:
    four = _rows(image, list(TEXTS))
    grown = _rows(image, ["Literal", "Background", "Abstract"], extra=NEW)
    stage = ValidateStage(config_from_dict({}, environ={}))
    script = {
        stage.build_request(four).key: (_answer(four),),
        stage.build_request(grown).key: (_answer(grown),),
    }
    with run_in_thread(SimConfig(scripted=script)) as url:
        first = _rules_run(tmp_path / "first", four)
        _validate(ValidateStage, url, first, image)
        second = _rules_run(tmp_path / "second", grown)
        kept, _ = _validate(ValidateStage, url, second, image, reuse_answers_from=[str(first)])
        asked = {sim_stats(url)["keys"][d]: n for d, n in sim_stats(url)["calls"].items()}
    assert asked == {stage.build_request(four).key: 1, stage.build_request(grown).key: 1}
    assert len(kept) == 4 and NEW in set(kept["text"])
    (entry,) = read_run_journal(second)
    assert entry.source_run is None and entry.attempts == 1 and entry.parts and len(entry.parts) == 4


def test_parts_of_a_reordered_answer_fail_the_alignment_check_and_the_items_are_asked_alone(
    image: Path,
    tmp_path: Path,
) -> None:
    """The earlier batch came back reordered, so the stage asked each item alone; composing from
    that batch's elements gives a misaligned answer, which the stage refuses: it asks item by
    item, and each single request is an earlier answer too. Nothing is sent, nothing misapplied."""
    four, three = _rows(image, list(TEXTS)), _rows(image, ["Literal", "Emotional", "Background"])
    stage = ValidateStage(config_from_dict({}, environ={}))
    script = {stage.build_request(four).key: (_answer(four, order=[1, 0, 2, 3]),)}
    script |= {stage.build_request([row]).key: (_answer([row]),) for row in four}
    with run_in_thread(SimConfig(scripted=script)) as url:
        first = _rules_run(tmp_path / "first", four)
        before = _decided(*_validate(ValidateStage, url, first, image))
        assert _calls(url) == 5  # the batch, then each of its four items alone
        second = _rules_run(tmp_path / "second", three)
        after = _decided(*_validate(ValidateStage, url, second, image, reuse_answers_from=[str(first)]))
        assert _calls(url) == 5
    assert after == {row["text_id"]: before[row["text_id"]] for row in three}
    assert after[three[0]["text_id"]] == EDITED


def test_parts_answered_by_another_served_model_are_asked_again(image: Path, tmp_path: Path) -> None:
    """The earlier answers came from other weights (the served identity differs): no composition."""
    four, three = _rows(image, list(TEXTS)), _rows(image, ["Literal", "Emotional", "Background"])
    stage = ValidateStage(config_from_dict({}, environ={}))
    script = {
        stage.build_request(four).key: (_answer(four),),
        stage.build_request(three).key: (_answer(three),),
    }
    with run_in_thread(SimConfig(scripted=script)) as url:
        first = _rules_run(tmp_path / "first", four)
        _validate(ValidateStage, url, first, image)
        journal = shard_journal_path(first, "validate", 0)
        entry = json.loads(journal.read_text())
        entry["served"] = json.dumps({"id": "simulated/test/validator", "root": "other/weights"})
        journal.write_text(json.dumps(entry) + "\n")
        second = _rules_run(tmp_path / "second", three)
        _validate(ValidateStage, url, second, image, reuse_answers_from=[str(first)])
        assert _calls(url) == 2  # the smaller batch was sent
