"""Validate stage (Listing 4): alignment, discard, fixed fields, fallback, bad answers."""

from __future__ import annotations

import json

from lenses_data.annotation.prompts import get_template
from lenses_data.annotation.validation import make_batches
from lenses_data.config import PipelineConfig
from lenses_data.config.annotate import AnnotateConfig
from lenses_data.stages import validate, visual_validate
from tests.lenses_data.stages.annotate_fakes import ScriptedClient
from tests.lenses_data.stages.annotate_rows import frame, lens_row

LIT = "A lone oak tree stands on a grassy hill beneath dark clouds and a wooden fence."
FIG = "Rusty wire on the leaning posts turns the fence into a house of cards awaiting wind."
EMO = "Quiet dread hangs in the heavy air as evening settles over the empty pasture."
BG = "Low grey hills and a wide pasture stretch toward the horizon behind the lone tree."


def _items(request):
    return json.loads(request.after_image_text)


def _echo(request, edit=None):
    items = _items(request)
    for item in items:
        if edit:
            edit(item)
    return json.dumps(items)


def test_batch_per_image_and_item_outcomes():
    rows = [
        lens_row("i1", "caption", "Literal", LIT),
        lens_row("i1", "caption", "Figurative", FIG),
        lens_row("i1", "caption", "Emotional", EMO),
        lens_row("i1", "caption", "Background", BG),
    ]

    def edit(item):
        if item["Category"] == "Literal":
            item["Caption"] = item["Caption"].replace("stands", "stand tall")
        elif item["Category"] == "Emotional":
            item["Caption"] = ""
        elif item["Category"] == "Background":
            item["Category"] = "Literal"  # not allowed: not applied, recorded

    client = ScriptedClient(lambda request, attempt: _echo(request, edit))
    kept, rejected = validate.ValidateStage(PipelineConfig(), client=client).annotate_frame(frame(rows))

    assert len(client.requests) == 1
    request = client.requests[0]
    assert request.image_path is None and request.role == "validator"
    assert request.text == get_template("text_validation").text
    assert [i["Category"] for i in _items(request)] == ["Literal", "Figurative", "Emotional", "Background"]
    assert request.json_schema["minItems"] == request.json_schema["maxItems"] == 4

    out = kept.set_index("lens")
    assert out.loc["Literal", "text"] == LIT.replace("stands", "stand tall")
    assert out.loc["Literal", "original_text"] == LIT and bool(out.loc["Literal", "edited"])
    assert not bool(out.loc["Figurative", "edited"]) and out.loc["Figurative", "original_text"] == FIG
    # A changed Category is a mismatch the paper discards ("rather than silently reassigning labels").
    assert "Background" not in out.index
    reasons = rejected.set_index("record_id")["reason"].to_dict()
    assert reasons == {rows[2]["text_id"]: "validator_discarded", rows[3]["text_id"]: "fixed_field_changed"}
    message = rejected.set_index("record_id").loc[rows[3]["text_id"], "message"]
    assert "Category 'Background' -> 'Literal'" in message and "discarded" in message


def test_focus_change_discards_by_default_and_can_keep_the_original():
    rows = [lens_row("i1", "caption", "Literal", LIT, focus="oak")]

    def answer(request, attempt):
        return _echo(request, lambda i: i.update(Focus="fence", Caption=LIT.replace("lone", "single")))

    kept, rejected = validate.ValidateStage(PipelineConfig(), client=ScriptedClient(answer)).annotate_frame(
        frame(rows)
    )
    assert kept.empty and rejected["reason"].tolist() == ["fixed_field_changed"]

    keep = AnnotateConfig(on_fixed_field_change="keep_original")
    kept, rejected = validate.ValidateStage(
        PipelineConfig(annotate=keep), client=ScriptedClient(answer)
    ).annotate_frame(frame(rows))
    assert kept["text"].tolist() == [LIT] and kept["focus"].tolist() == ["oak"]  # answer not applied
    assert rejected["reason"].tolist() == ["fixed_field_changed"]


def test_misaligned_batch_falls_back_to_items():
    rows = [lens_row("i1", "caption", "Literal", LIT), lens_row("i1", "caption", "Emotional", EMO)]

    def answer(request, attempt):
        items = _items(request)
        if len(items) > 1:
            return json.dumps(items[:1])  # drops an item: count mismatch
        return json.dumps(items)

    client = ScriptedClient(answer)
    kept, rejected = validate.ValidateStage(PipelineConfig(), client=client).annotate_frame(frame(rows))
    assert sorted(kept["lens"].astype(str)) == ["Emotional", "Literal"] and rejected.empty
    assert [len(_items(r)) for r in client.calls] == [2, 2, 1, 1]  # ask, re-ask, then one by one


BAD_ANSWERS = {
    "invalid_json": "I cannot help with that.",
    "wrong_shape": json.dumps({"Caption": LIT, "Focus": "tree", "Category": "Literal"}),
    "extra_field": json.dumps([{"Caption": LIT, "Focus": "tree", "Category": "Literal", "Score": 1}]),
    "missing_field": json.dumps([{"Caption": LIT, "Category": "Literal"}]),
    "invalid_category": json.dumps([{"Caption": LIT, "Focus": "tree", "Category": "Scenic"}]),
    "empty_array": "[]",
    "count_mismatch": json.dumps([{"Caption": LIT, "Focus": "tree", "Category": "Literal"}] * 3000),
    "wrong_type": json.dumps([{"Caption": None, "Focus": "tree", "Category": "Literal"}]),
}


def test_reordered_batch_is_retried_item_by_item():
    rows = [
        lens_row("i1", "caption", "Literal", LIT, focus="oak"),
        lens_row("i1", "caption", "Emotional", EMO),
    ]

    def answer(request, attempt):
        items = _items(request)
        if len(items) > 1:
            items = items[::-1]
            items[0]["Caption"] = "Swapped text that would land on the wrong row if applied blindly here."
        return json.dumps(items)

    client = ScriptedClient(answer)
    kept, rejected = validate.ValidateStage(PipelineConfig(), client=client).annotate_frame(frame(rows))
    assert rejected.empty and [len(_items(r)) for r in client.calls] == [2, 1, 1]
    assert dict(zip(kept["lens"].astype(str), kept["text"], strict=True)) == {
        "Literal": LIT,
        "Emotional": EMO,
    }


def test_bad_answers_are_rejections_with_raw():
    rows = [lens_row(code, "caption", "Literal", LIT) for code in BAD_ANSWERS]
    client = ScriptedClient(lambda request, attempt: BAD_ANSWERS[request.key.split(":")[1]])
    kept, rejected = validate.ValidateStage(PipelineConfig(), client=client).annotate_frame(frame(rows))
    assert kept.empty
    reasons = dict(zip(rejected["image_id"], rejected["reason"], strict=True))
    assert reasons == {code: code for code in BAD_ANSWERS}
    raw = rejected.set_index("image_id")["raw"]
    assert all(raw[code] == answer for code, answer in BAD_ANSWERS.items())
    assert len(client.calls) == 2 * len(BAD_ANSWERS)  # each asked, re-asked once, then rejected


PLAIN_FIG = "Rusty wire on the leaning posts makes the fence look fragile in the coming wind."


def _edit_to(text):
    return ScriptedClient(lambda request, attempt: _echo(request, lambda i: i.update(Caption=text)))


def test_listing4_edit_that_removes_an_idiom_is_flagged_or_strictly_rejected():
    rows = [lens_row("i1", "caption", "Figurative", FIG)]
    kept, rejected = validate.ValidateStage(PipelineConfig(), client=_edit_to(PLAIN_FIG)).annotate_frame(
        frame(rows)
    )
    assert rejected.empty and kept["text"].tolist() == [PLAIN_FIG]
    assert list(kept["flags"].iloc[0]) == ["figurative_missing_idiom"] and list(kept["idioms"].iloc[0]) == []

    strict = AnnotateConfig(idiom_rules="strict")
    kept, rejected = validate.ValidateStage(
        PipelineConfig(annotate=strict), client=_edit_to(PLAIN_FIG)
    ).annotate_frame(frame(rows))
    assert kept.empty and rejected["reason"].tolist() == ["figurative_missing_idiom"]
    assert rejected["message"].iloc[0].startswith("after the validator's edit")


def _visual(rows, client, settings):
    paths = {r["image_id"]: f"/images/{r['image_id']}.png" for r in rows}
    return visual_validate.VisualValidateStage(
        PipelineConfig(annotate=settings), client=client
    ).annotate_frame(frame(rows), paths)


def test_listing5_edit_that_removes_an_idiom_survives_even_in_strict_mode():
    # Listing 5: "You may remove or simplify them if they conflict with the visual content."
    rows = [lens_row("i1", "caption", "Figurative", FIG, split="test")]
    for settings in (AnnotateConfig(), AnnotateConfig(idiom_rules="strict")):
        kept, rejected = _visual(rows, _edit_to(PLAIN_FIG), settings)
        assert rejected.empty and kept["text"].tolist() == [PLAIN_FIG]
        assert bool(kept["edited"].iloc[0]) and kept["original_text"].tolist() == [FIG]
        assert list(kept["flags"].iloc[0]) == ["figurative_missing_idiom"]


def test_listing5_fragment_removal_below_the_word_limit_survives_listing4_does_not():
    # Listing 5 may "remove or soften" an ungrounded fragment; Listing 4 only edits lightly, so its
    # edits are re-checked like generator output (a flag by default, a rejection with `reject`).
    short = "Quiet dread hangs over the pasture."  # 6 words, below the captions' 8
    rows = [lens_row("i1", "caption", "Emotional", EMO, split="test")]
    for mode in ("flag", "reject"):
        kept, rejected = _visual(rows, _edit_to(short), AnnotateConfig(word_limits=mode))
        assert rejected.empty and list(kept["flags"].iloc[0]) == ["word_count_low"]

    def _listing4(mode: str):
        config = PipelineConfig(annotate=AnnotateConfig(word_limits=mode))
        return validate.ValidateStage(config, client=_edit_to(short)).annotate_frame(frame(rows))

    kept, rejected = _listing4("flag")
    assert rejected.empty and list(kept["flags"].iloc[0]) == ["word_count_low"]
    kept, rejected = _listing4("reject")
    assert kept.empty and rejected["reason"].tolist() == ["word_count_low"]


def test_edits_that_add_damage_are_rejected_and_added_idioms_flagged():
    rows = [lens_row("i1", "caption", "Emotional", EMO, split="test")]
    damaged = "Caption: " + EMO

    def _text(rows, client, settings):
        return validate.ValidateStage(PipelineConfig(annotate=settings), client=client).annotate_frame(
            frame(rows)
        )

    for run in (_text, _visual):
        kept, rejected = run(rows, _edit_to(damaged), AnnotateConfig())
        assert kept.empty and rejected["reason"].tolist() == ["artifact_label"]
    added = "Quiet dread hangs in the heavy air as the empty pasture nears a tipping point."
    kept, rejected = _visual(rows, _edit_to(added), AnnotateConfig(idiom_rules="strict"))
    assert rejected.empty and list(kept["flags"].iloc[0]) == ["validator_added_idiom"]


def test_unedited_texts_keep_the_flags_of_the_rules_stage():
    row = {**lens_row("i1", "caption", "Figurative", PLAIN_FIG), "flags": ["figurative_missing_idiom"]}
    kept, rejected = validate.ValidateStage(PipelineConfig(), client=_edit_to(PLAIN_FIG)).annotate_frame(
        frame([row])
    )
    assert rejected.empty and list(kept["flags"].iloc[0]) == ["figurative_missing_idiom"]


def test_batches_are_split_by_size_and_kind():
    rows = [lens_row("i1", "caption", "Literal", f"{LIT} {n}") for n in range(5)]
    rows.append(lens_row("i1", "prompt", "Literal", LIT))
    batches = make_batches(rows, 2)
    assert [len(b) for b in batches] == [2, 2, 1, 1]
    assert {b[0]["kind"] for b in batches} == {"caption", "prompt"}
