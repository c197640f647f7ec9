"""The validators on the model stages' one loop, through the production client over HTTP against
the simulator: a bad batch is re-asked item by item, a bad answer about one item becomes a rejection
through `failed_rejections` (its reason code, raw answer and text id), a usable one goes through
`to_rows`; an infrastructure failure (5xx, a dropped connection, after the retries) fails the shard:
nothing written, nothing rejected.

The simulator is scripted per request key (`SimConfig.scripted`: one answer per attempt); the keys
come from the stage's own `build_request`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from PIL import Image

from lenses_data import io
from lenses_data.config import PipelineConfig, config_from_dict
from lenses_data.models import types as codes
from lenses_data.models.client import ModelClient
from lenses_data.models.types import EndpointUnavailable, ModelRequest
from lenses_data.schemas import LensText
from lenses_data.simulator.simulator import SimConfig, run_in_thread
from lenses_data.simulator.testing import sim_models_config, sim_stats
from lenses_data.stages._annotate import rejections_frame
from lenses_data.stages.base import run_stage
from lenses_data.stages.validate import ValidateStage
from lenses_data.stages.validator_base import ValidatorStage
from lenses_data.stages.visual_validate import VisualValidateStage
from tests.lenses_data.stages.annotate_rows import frame, lens_row

MAX_REASKS = 1
LIT = "A lone oak tree stands on a grassy hill beneath dark clouds and a wooden fence."
EMO = "Quiet dread hangs in the heavy air as evening settles over the empty pasture."
# Image -> its two captions; "bad" gets an unusable batch answer, "good" a usable one. The texts
# differ per image: the client sends identical requests once.
ROWS = [
    lens_row(image, "caption", lens, text.replace("the", f"the {image}", 1), split="test")
    for image in ("bad", "good")
    for lens, text in (("Literal", LIT), ("Emotional", EMO))
]


class Recorded:
    """Which of the base loop's hooks each unit reached (a spy on the real stage class)."""

    def __init__(self, cls: type[ValidatorStage]) -> None:
        self.to_rows: list[list[str]] = []
        self.failed: list[list[str]] = []
        spy = self

        class Spied(cls):  # type: ignore[valid-type, misc]
            def to_rows(self, unit, result):
                spy.to_rows.append([r["text_id"] for r in unit])
                return super().to_rows(unit, result)

            def failed_rejections(self, unit, request, result):
                spy.failed.append([r["text_id"] for r in unit])
                return super().failed_rejections(unit, request, result)

        self.cls = Spied


def _echo(request: ModelRequest, empty_lens: str | None = None) -> str:
    """The validator's answer keeping every item, or emptying (discarding) one lens's text."""
    items = json.loads(request.after_image_text or "[]")
    for item in items:
        if item["Category"] == empty_lens:
            item["Caption"] = ""
    return json.dumps(items)


def _script(stage: ValidatorStage, rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Answers by request key: "bad"'s batch never parses, then its Literal item is kept and its
    Emotional item never parses; "good"'s batch is answered with its Emotional text discarded."""
    bad, good = rows[:2], rows[2:]
    request = stage.build_request
    return {
        request(bad).key: ["not json at all"],
        request(bad[:1]).key: [_echo(request(bad[:1]))],
        request(bad[1:]).key: ['[{"Caption": "unclosed'],
        request(good).key: [_echo(request(good), empty_lens="Emotional")],
    }


def _calls_per_key(url: str) -> dict[str, int]:
    stats = sim_stats(url)
    counts: dict[str, int] = {}
    for digest, calls in stats["calls"].items():
        counts[stats["keys"][digest]] = counts.get(stats["keys"][digest], 0) + calls
    return counts


def _with_images(rows: list[dict[str, Any]], folder: Path) -> tuple[pd.DataFrame, dict[str, str]]:
    paths = {}
    for index, image_id in enumerate(sorted({r["image_id"] for r in rows})):
        paths[image_id] = str(folder / f"{image_id}.png")
        Image.new("RGB", (16, 16), (90 * index, 40, 200)).save(paths[image_id])
    return frame(rows), paths


@pytest.mark.parametrize("cls", [ValidateStage, VisualValidateStage])
def test_a_bad_batch_is_reasked_by_item_and_each_answer_goes_through_the_loops_hooks(
    cls: type[ValidatorStage], tmp_path: Path
) -> None:
    df, paths = _with_images(ROWS, tmp_path)
    sendable = [{**r, "path": paths[r["image_id"]]} for r in ROWS]  # the rows as the stage sends them
    recorded = Recorded(cls)
    script = _script(cls(PipelineConfig()), sendable)
    with run_in_thread(SimConfig(scripted=script)) as url:
        client = ModelClient(sim_models_config([url], max_reasks=MAX_REASKS))
        stage = recorded.cls(PipelineConfig(), client=client)
        try:
            kept, rejected = (
                stage.annotate_frame(df) if cls is ValidateStage else stage.annotate_frame(df, paths)
            )
        finally:
            client.close()
        calls = _calls_per_key(url)

    ids = [r["text_id"] for r in ROWS]
    # Every scripted request was asked; an unusable answer 1 + MAX_REASKS times, then given up.
    assert set(calls) == set(script)
    assert sorted(calls.values()) == [1, 1, 1 + MAX_REASKS, 1 + MAX_REASKS]
    # The first round's usable answer, then the re-asked items, all through the base's hooks.
    assert recorded.to_rows == [ids[2:], ids[:1]]
    assert recorded.failed == [ids[1:2]]
    assert sorted(kept["text_id"]) == sorted([ids[0], ids[2]])
    assert kept.columns.tolist() == list(LensText.model_fields)  # the image path is not a column
    by_id = rejected.set_index("record_id")
    assert by_id["reason"].to_dict() == {ids[1]: codes.INVALID_JSON, ids[3]: "validator_discarded"}
    assert by_id.loc[ids[1], "raw"] == '[{"Caption": "unclosed'
    assert "after 2 attempt(s)" in by_id.loc[ids[1], "message"]
    assert set(rejected["stage"]) == {cls.name}


def _rules_run(run: Path) -> Path:
    """A run whose `rules` stage is complete with ROWS in one shard (real Parquet)."""
    io.write_shard(run, "rules", 0, frame(ROWS), LensText)
    io.write_rejections(run, "rules", 0, rejections_frame([]))
    io.mark_stage_complete(run, "rules", [0])
    return run


@pytest.mark.parametrize(
    ("fault", "code"), [("http_500", codes.SERVER_ERROR), ("drop", codes.TRANSPORT_ERROR)]
)
def test_an_infrastructure_failure_fails_the_validator_shard_and_rejects_nothing(
    fault: str, code: str, tmp_path: Path
) -> None:
    run = _rules_run(tmp_path / "run")
    recorded = Recorded(ValidateStage)
    with run_in_thread(SimConfig(faults={fault: 1.0})) as url:
        models = sim_models_config([url], max_attempts=2, down_grace_s=0).model_dump()
        config = config_from_dict({"run_dir": str(run), "models": models}, environ={})
        client = ModelClient.from_config(config.models, journal_dir=run / "journal")
        try:
            with pytest.raises(EndpointUnavailable) as raised:
                run_stage(recorded.cls(config, client=client), run)
        finally:
            client.close()
    assert raised.value.code == code and raised.value.role == "validator"
    assert recorded.failed == [] and recorded.to_rows == []  # never an answer about the items
    assert not io.shard_path(run, "validate", 0).exists()
    assert not io.rejection_path(run, "validate", 0).exists()
