"""Generate stage (Listings 2-3): schema, rows, and every kind of bad answer."""

from __future__ import annotations

import json

import pandas as pd

from lenses_data.config import PipelineConfig
from lenses_data.config.annotate import AnnotateConfig
from lenses_data.ids import text_id
from lenses_data.stages import generate
from tests.lenses_data.stages.annotate_fakes import ScriptedClient

GOOD_CAPTION = [
    {
        "Caption": "A lone oak tree stands on a grassy hill beneath dark clouds.",
        "Focus": "oak",
        "Category": "Literal",
    },
    {
        "Caption": "The leaning fence is a house of cards in the wind.",
        "Focus": "fence",
        "Category": "Figurative",
    },
]
GOOD_PROMPT = [
    {
        "Prompt": "Describe the oak tree on the grassy hill and the clouds gathering above it.",
        "Focus": "oak",
        "Category": "Literal",
    },
]
BAD = {
    "not_json": "Here are some captions: a tree, a hill.",
    "object": json.dumps(GOOD_CAPTION[0]),
    "extra": json.dumps([{**GOOD_CAPTION[0], "Confidence": 0.9}]),
    "missing": json.dumps([{"Caption": "A tree on a hill under the clouds today.", "Category": "Literal"}]),
    "category": json.dumps([{**GOOD_CAPTION[0], "Category": "Poetic"}]),
    "empty": "[]",
    "thousands": json.dumps(GOOD_CAPTION * 2500),
    "wrong_type": json.dumps([{**GOOD_CAPTION[0], "Focus": 7}]),
}
EXPECTED = {
    "not_json": "invalid_json",
    "object": "wrong_shape",
    "extra": "extra_field",
    "missing": "missing_field",
    "category": "invalid_category",
    "empty": "empty_array",
    "thousands": "too_many_items",
    "wrong_type": "wrong_type",
}


def _answer(request, attempt):
    image_id, kind = request.key.split(":")[1:3]
    if image_id == "good":
        return json.dumps(GOOD_CAPTION if kind == "caption" else GOOD_PROMPT)
    return BAD[image_id] if kind == "caption" else json.dumps(GOOD_PROMPT)


def test_generate_rows_and_bad_answers():
    ids = ["good", *BAD]
    frame = pd.DataFrame({"image_id": ids, "path": [f"/img/{i}.png" for i in ids], "split": "train"})
    client = ScriptedClient(_answer)
    texts, rejected = generate.GenerateStage(
        PipelineConfig(annotate=AnnotateConfig(candidates_per_image=1)), client=client
    ).annotate_frame(frame)

    good = texts[texts["image_id"] == "good"].set_index("kind")
    assert sorted(texts[texts["image_id"] == "good"]["lens"].astype(str)) == [
        "Figurative",
        "Literal",
        "Literal",
    ]
    figurative = texts[texts["lens"] == "Figurative"].iloc[0]
    assert list(figurative["idioms"]) == ["house of cards"]
    row = good.loc["prompt"]
    assert row["text_id"] == text_id("good", "prompt", "Literal", 0, GOOD_PROMPT[0]["Prompt"])
    assert row["prompt_name"] == "image_side_prompts" and row["split"] == "train"
    # every bad caption answer is one rejection with its own code and the raw answer kept
    caption_rejections = rejected[rejected["record_id"].str.contains(":caption:")]
    got = dict(zip(caption_rejections["image_id"], caption_rejections["reason"], strict=True))
    assert got == EXPECTED
    raw = caption_rejections.set_index("image_id")["raw"]
    assert raw["not_json"] == BAD["not_json"] and raw["thousands"] == BAD["thousands"]
    # bad images still got their (good) prompts
    assert set(texts[texts["kind"] == "prompt"]["image_id"]) == set(ids)


def test_generate_request_and_candidates():
    frame = pd.DataFrame({"image_id": ["good"], "path": ["/img/good.png"], "split": "test"})
    client = ScriptedClient(_answer)
    settings = AnnotateConfig(candidates_per_image=3, seed=10, kinds=["caption"], max_items_per_answer=12)
    texts, rejected = generate.GenerateStage(PipelineConfig(annotate=settings), client=client).annotate_frame(
        frame
    )
    assert rejected.empty
    assert sorted(r.seed for r in client.requests) == [10, 11, 12]
    schema = client.requests[0].json_schema
    assert schema["type"] == "array" and schema["maxItems"] == 12 and schema["minItems"] == 1
    assert set(schema["$defs"]["CaptionItem"]["properties"]) == {"Caption", "Focus", "Category"}
    # same texts from three candidates: distinct ids because the candidate index is part of the id
    assert texts["text_id"].nunique() == 6 and sorted(set(texts["candidate_index"])) == [0, 1, 2]


def test_generate_repeated_item_is_rejected_not_duplicated():
    frame = pd.DataFrame({"image_id": ["r"], "path": ["/img/r.png"], "split": "train"})
    client = ScriptedClient(lambda request, attempt: json.dumps([GOOD_CAPTION[0], GOOD_CAPTION[0]]))
    texts, rejected = generate.GenerateStage(
        PipelineConfig(annotate=AnnotateConfig(kinds=["caption"])), client=client
    ).annotate_frame(frame)
    assert len(texts) == 1 and rejected["reason"].tolist() == ["duplicate_item"]
