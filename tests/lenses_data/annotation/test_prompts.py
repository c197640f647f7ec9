"""The five templates render from one lens-definition file and one phrase bank, and say what
Listings 1-5 of the supplementary say."""

from __future__ import annotations

import shutil

import pytest

from lenses_data.annotation.phrase_bank import default_phrase_bank
from lenses_data.annotation.prompts import (
    TEMPLATE_NAMES,
    TemplateError,
    get_template,
    load_template,
    prompts_dir,
)

LENS_LINES = [
    "- Literal: Describes concrete objects and actions that are directly visible in the image.",
    "- Emotional: Focuses on the mood or feeling of the scene or characters (for example, loneliness, joy, "
    "tension), not just what things look like.",
    "- Background: Describes the context, setting, environment, style, or artistic technique that frames "
    "the main subject but is not itself the main focus, or focuses on background objects.",
]

KEY_INSTRUCTIONS = {
    "filter": [
        "You are given an image.",
        "clearly different non-literal interpretations in the Figurative or Abstract categories",
        "Answer YES only if you are fully confident",
        "If you are not completely certain that this requirement is met, answer NO.",
        "only Literal, only Emotional, or only Background focused should also be answered with NO",
        "Output exactly one word: YES or NO.",
        '(for example, "bad apple", "black box", "dirty money")',
    ],
    "image_side_prompts": [
        "Generate a set of text PROMPTS",
        "stop when further prompts would overlap",
        'Each prompt is self-contained (no "this image" or "this photo"), with 10-28 words.',
        "Rotate syntax (imperative, descriptive, contrastive clause, rhetorical question)",
        "Figurative prompts MUST include at least one idiom from PHRASE_BANK",
        "Literal or Background prompts MUST NOT contain idioms from PHRASE_BANK.",
        "target about 40 percent of prompts to be idiomatic (round up)",
        '{"Prompt": "<text>", "Focus": "<object/region/idea>", "Category": '
        '"Literal|Figurative|Emotional|Abstract|Background"}',
        "INTERNAL CHECK (do not print)",
    ],
    "captions": [
        'distinct way of "seeing" the same picture',
        "For every Figurative caption, you MUST include at least one phrase from PHRASE_BANK",
        "Literal and Background captions SHOULD NOT use PHRASE_BANK items.",
        "ensure at least 40 percent of captions use at least one PHRASE_BANK item",
        "Keep it concise (8-22 words)",
        "CATEGORIES (produce at least one caption per category)",
        "Ensure at least 70 percent token difference between captions",
        '"Caption": "<text>",',
    ],
    "text_validation": [
        "You are a validator and light editor for captions and prompts",
        "Remove machine artifacts (leftover labels, extra quotes, truncation, placeholders).",
        "Do not change Focus or Category. If they clearly cannot match, discard the item.",
        "outputting an empty string for the Caption/Prompt value",
        '"Caption" | "Prompt": "<final text or \\"\\" if discarded>",',
    ],
    "visual_validation": [
        "using the image as the source of truth",
        "supported by the IMAGE",
        "remove or soften that part of the text while keeping the rest grounded",
        "Do not change Category or Focus.",
        "Do not add new idioms.",
        "Return a JSON array with the same structure as the input",
        ", while still being conceptually connected to the visible content.",
        ", but still rooted in what the image suggests.",
    ],
}


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_template_has_key_instructions_and_shared_definitions(name):
    template = get_template(name)
    for phrase in KEY_INSTRUCTIONS[name]:
        assert phrase in template.text, phrase
    for line in LENS_LINES:
        assert line in template.text
    assert "{{" not in template.text and "PROMPT-" not in template.text
    assert template.listing == TEMPLATE_NAMES.index(name) + 1


def test_phrase_bank_sets_per_listing():
    prompts, captions = get_template("image_side_prompts").text, get_template("captions").text
    bank = default_phrase_bank()
    for idiom in bank.idioms_for("captions"):
        assert idiom.text in prompts and idiom.text in captions
    for idiom in bank.add_ons:
        assert idiom.text in prompts and idiom.text not in captions
    assert "Add ons" in prompts and "Add ons" not in captions
    assert "Systems, Tech & Operations (modern idioms and jargon widely used metaphorically)" in captions
    assert "Pandora's box (opened)" in captions
    for name in ("filter", "text_validation", "visual_validation"):
        assert "smoking gun" not in get_template(name).text


def test_hashes_distinct_and_stable():
    hashes = {name: get_template(name).hash for name in TEMPLATE_NAMES}
    assert len(set(hashes.values())) == 5
    assert all(len(h) == 16 for h in hashes.values())
    assert load_template("captions").hash == hashes["captions"]


def test_hash_changes_with_the_shared_definitions(tmp_path):
    folder = tmp_path / "prompts"
    shutil.copytree(prompts_dir(), folder)
    before = {name: load_template(name, folder).hash for name in TEMPLATE_NAMES}
    definitions = folder / "lens_definitions.yaml"
    definitions.write_text(definitions.read_text().replace("directly visible", "plainly visible"))
    after = {name: load_template(name, folder).hash for name in TEMPLATE_NAMES}
    assert all(before[n] != after[n] for n in TEMPLATE_NAMES)
    assert "plainly visible" in load_template("filter", folder).text


def test_bad_templates_are_clear_errors(tmp_path):
    folder = tmp_path / "prompts"
    shutil.copytree(prompts_dir(), folder)
    (folder / "broken.txt").write_text("---\nlisting: 9\ntitle: x\nrole: filter\n---\nSee {{nonsense}}\n")
    (folder / "nofront.txt").write_text("no front matter\n")
    with pytest.raises(TemplateError, match="unknown placeholder"):
        load_template("broken", folder)
    with pytest.raises(TemplateError, match="front matter"):
        load_template("nofront", folder)
    with pytest.raises(TemplateError, match="no prompt template"):
        load_template("missing", folder)


def test_readme_cites_the_source():
    readme = (prompts_dir() / "README.md").read_text()
    assert "Listing 1" in readme and "Listing 5" in readme and "Sec. 12" in readme


def test_resources_found_from_env_override(tmp_path, monkeypatch):
    # An installed copy (share/lenses-data) or an override folder is used the same way.
    folder = tmp_path / "prompts"
    shutil.copytree(prompts_dir(), folder)
    (folder / "filter.txt").write_text((folder / "filter.txt").read_text().replace("an image.", "a picture."))
    monkeypatch.setenv("LENSES_RESOURCES_DIR", str(tmp_path))
    assert prompts_dir() == folder
    assert load_template("filter").text.startswith("You are given a picture.")
