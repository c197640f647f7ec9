"""The phrase-bank lexicon and its matcher."""

from __future__ import annotations

import pytest

from lenses_data.annotation.phrase_bank import default_phrase_bank, stem

BANK = default_phrase_bank()


def test_lexicon_has_fifteen_families_and_add_ons():
    assert len(BANK.families) == 15
    assert sum(len(idioms) for _, _, idioms in BANK.families) == 121  # as printed in Listings 2-3
    assert all(len(idioms) >= 7 for _, _, idioms in BANK.families)
    assert len(BANK.add_ons) == 20
    names = [name for name, _, _ in BANK.families]
    assert names[0] == "Warnings & Evidence" and names[-1] == "Renewal, Cycles & Resilience"


def test_listings_use_explicit_sets():
    prompt_set = {i.text for i in BANK.idioms_for("image_side_prompts")}
    caption_set = {i.text for i in BANK.idioms_for("captions")}
    assert "tip of the iceberg" in prompt_set and "tip of the iceberg" not in caption_set
    assert caption_set < prompt_set
    assert "Add ons" in BANK.render("image_side_prompts")
    assert "Add ons" not in BANK.render("captions")


@pytest.mark.parametrize(
    ("text", "idiom"),
    [
        ("Two HOUSES of cards lean on each other", "house of cards"),
        ("Her vote tipped the scales at last", "tipping the scales"),
        ("One more stone tips the scales", "tipping the scales"),
        ("Hobson\u2019s choice between two doors", "Hobson's choice"),
        ("a double edged sword of progress", "double-edged sword"),
        ("the canary in the coal mine of the city", "canary in a coal mine"),
        ("a catch 22 for the driver", "Catch-22"),
        ("burning bridges behind the riders", "burn bridges"),
        ("he burnt his bridges long ago", "burn bridges"),
        ("an ace up her sleeve", "ace up the sleeve"),
        ("no use crying over spilt milk", "crying over spilled milk"),
        ("The writing is on the wall.", "writing on the wall"),
        ("a birds-eye view of the whole debate", "bird's eye view"),
        ("she walked a minefield of etiquette", "walking a minefield"),
        ("Pandora's box, opened wide", "Pandora's box (opened)"),
        ("gatekeepers at every door", "gatekeeper"),
        ("the tide is turning for the fleet", "tide turns"),
        ("garbage in; garbage out", "garbage in, garbage out"),
        ("running on fumes after midnight", "running on fumes"),
        ("Sisyphean tasks pile up", "Sisyphean task"),
    ],
)
def test_matcher_handles_inflection_case_punctuation(text, idiom):
    # Whether the words are read literally is a separate question (tests below): count both.
    found = [m.idiom for m in BANK.find(text, include_literal=True)]
    assert idiom in found


def test_match_reports_family_and_span():
    text = "A red flag beside the red tape."
    matches = BANK.find(text)
    assert [(m.idiom, m.family) for m in matches] == [
        ("red flag", "Warnings & Evidence"),
        ("red tape", "Add ons"),
    ]
    assert text[matches[0].start : matches[0].end] == "red flag"


def test_no_false_positives_on_plain_text():
    assert BANK.find("A red boat floats on a calm blue lake near a wooden house.") == []
    assert BANK.find("Cards are stacked in a small house.") == []


def test_listing_restriction():
    assert BANK.find("the tip of the iceberg", "captions") == []
    assert [m.idiom for m in BANK.find("the tip of the iceberg", "image_side_prompts")] == [
        "tip of the iceberg"
    ]


def test_stem_is_consistent_across_inflections():
    assert stem("tipped") == stem("tipping") == stem("tip")
    assert stem("houses") == stem("house")
    assert stem("spilling") == stem("spill")
    assert stem("red") == "red"


@pytest.mark.parametrize(
    ("text", "idiom"),
    [
        ("A red flag flutters from the mast of the old fishing boat.", "red flag"),
        ("There is a red flag flapping on the pole by the gate.", "red flag"),
        ("An acrobat walks a tightrope strung high above the circus crowd.", "tightrope"),
        ("Sunlight glints on thin ice on a pond at the edge of the woods.", "thin ice"),
        ("A brass revolving door turns slowly at the hotel entrance.", "revolving door"),
        ("Sunlight pours through the glass ceiling of the old atrium.", "glass ceiling"),
        ("A black swan glides across the misty lake at dawn.", "black swan"),
        ("A closed book rests on the desk beside a cold cup of tea.", "closed book"),
    ],
)
def test_literal_use_of_idiom_words_is_not_an_idiom(text, idiom):
    assert BANK.find(text) == []
    found = BANK.find(text, include_literal=True)
    assert [(m.idiom, m.literal) for m in found] == [(idiom, True)]


@pytest.mark.parametrize(
    ("text", "idiom"),
    [
        ("The cracked beam is a red flag for everyone in the house.", "red flag"),
        ("The mayor walks a tightrope between loyal voters and angry donors.", "tightrope"),
        ("After the scandal the young mayor is skating on thin ice with voters.", "thin ice"),
        # A cue word is near, but a metaphor marker or an of-phrase makes it the idiom again.
        ("The office became a revolving door for interns hoping for a break.", "revolving door"),
        ("A revolving door of tenants has left the building tired.", "revolving door"),
        ("The old fence on the table looks like a house of cards.", "house of cards"),
        ("She cracks the glass ceiling of the boardroom at last.", "glass ceiling"),
        ("The market crash was a black swan nobody on the lake saw coming.", "black swan"),
    ],
)
def test_idiomatic_uses_still_count(text, idiom):
    assert [(m.idiom, m.literal) for m in BANK.find(text)] == [(idiom, False)]


def test_literal_cues_stay_in_their_sentence():
    # The pond belongs to the first sentence; the second uses "thin ice" as the idiom.
    text = "Ducks rest by the pond. The treaty leaves both sides on thin ice."
    assert [m.idiom for m in BANK.find(text)] == ["thin ice"]


def test_every_literal_cue_list_belongs_to_a_bank_idiom():
    with_cues = [i for i in BANK.all_idioms() if i.literal_cues]
    assert len(with_cues) > 50
    assert {"red flag", "tightrope", "thin ice", "revolving door"} <= {i.text for i in with_cues}
