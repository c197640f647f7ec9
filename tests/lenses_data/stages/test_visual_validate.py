"""Visual-validate stage (Listing 5): test split only, image attached, same item rules."""

from __future__ import annotations

import json

from lenses_data.annotation.prompts import get_template
from lenses_data.config import PipelineConfig
from lenses_data.stages import visual_validate
from tests.lenses_data.stages.annotate_fakes import ScriptedClient
from tests.lenses_data.stages.annotate_rows import frame, lens_row

LIT = "A lone oak tree stands on a grassy hill beneath dark clouds and a wooden fence."
EMO = "Quiet dread hangs in the heavy air as evening settles over the empty pasture."


def test_only_test_split_is_checked_with_its_image():
    rows = [
        lens_row("t1", "caption", "Literal", LIT, split="test"),
        lens_row("t1", "caption", "Emotional", EMO, split="test"),
        lens_row("r1", "caption", "Literal", LIT, split="train"),
        lens_row("t2", "caption", "Literal", LIT, split="test"),
    ]

    def answer(request, attempt):
        items = json.loads(request.after_image_text)
        if request.image_path.endswith("t2.png"):
            return "[" + ", ".join(["{}"] * 3000) + "]"
        items[1]["Caption"] = ""  # discard the emotional caption of t1
        return json.dumps(items)

    client = ScriptedClient(answer)
    paths = {"t1": "/img/t1.png", "t2": "/img/t2.png", "r1": "/img/r1.png"}
    kept, rejected = visual_validate.VisualValidateStage(PipelineConfig(), client=client).annotate_frame(
        frame(rows), paths
    )

    assert {r.image_path for r in client.requests} == {"/img/t1.png", "/img/t2.png"}
    assert all(r.role == "visual_validator" for r in client.requests)
    assert client.requests[0].text == get_template("visual_validation").text
    assert sorted(kept["image_id"]) == ["r1", "t1"]
    reasons = dict(zip(rejected["image_id"], rejected["reason"], strict=True))
    assert reasons == {"t1": "validator_discarded", "t2": "count_mismatch"}
    assert rejected.set_index("image_id").loc["t2", "raw"].startswith("[{}, {}")


def test_missing_image_is_a_rejection():
    rows = [lens_row("t9", "caption", "Literal", LIT, split="test")]
    client = ScriptedClient(lambda request, attempt: "[]")
    kept, rejected = visual_validate.VisualValidateStage(PipelineConfig(), client=client).annotate_frame(
        frame(rows), {}
    )
    assert kept.empty and rejected["reason"].tolist() == ["missing_image_path"] and not client.requests
