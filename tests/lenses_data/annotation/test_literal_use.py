"""The literal-use reading of idioms (issue 26), measured on planted uses and on the paper's texts.

idiom_uses.yaml holds planted sentences: literal uses of idiom words that should not count as
idioms, and figurative uses that should. docs/rules.md gives the figures before and after the
scene reading; the thresholds here leave room for the hard cases the file keeps on purpose.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lenses_data.annotation import rules
from lenses_data.annotation.literal_use import SceneLexicon
from lenses_data.annotation.phrase_bank import default_phrase_bank
from lenses_data.annotation.prompts import TEMPLATE_OF_KIND
from tests.lenses_data.paper_texts import published_texts

BANK = default_phrase_bank()
USES = yaml.safe_load((Path(__file__).parent / "idiom_uses.yaml").read_text(encoding="utf-8"))
# At most 4 of the 40 literal sentences may still read as idioms (3 do), and 5 of the 51 figurative
# ones as literal (4 do): docs/rules.md lists the misses and why a lexical reading makes them.
MIN_LITERAL_UNFLAGGED = 0.9
MIN_FIGURATIVE_KEPT = 0.9


def _idioms(text: str, include_literal: bool = False) -> list[str]:
    return [m.idiom for m in BANK.find(text, include_literal=include_literal)]


@pytest.mark.parametrize("kind", ["literal", "figurative"])
def test_planted_sentences_contain_the_idiom_they_name(kind):
    # A typo in the data file would otherwise count as a correct "not flagged".
    entries = USES[kind]
    assert len(entries) >= 30
    named = [idiom for _, idiom in entries if idiom is not None]
    assert len({i for i in named}) >= 20  # many idioms of the bank, not one
    for text, idiom in entries:
        if idiom is not None:
            assert idiom in _idioms(text, include_literal=True), (text, idiom)


def test_planted_literal_uses_are_not_flagged():
    entries = USES["literal"]
    unflagged = [text for text, idiom in entries if idiom not in _idioms(text)]
    assert len(unflagged) / len(entries) >= MIN_LITERAL_UNFLAGGED, sorted(
        {t for t, _ in entries} - set(unflagged)
    )
    # The item 5, caught without a cue word listed for it.
    assert "A red flag on the beach warns swimmers." in unflagged


def test_planted_figurative_uses_stay_idioms():
    entries = USES["figurative"]
    kept = [text for text, idiom in entries if idiom in _idioms(text)]
    assert len(kept) / len(entries) >= MIN_FIGURATIVE_KEPT, sorted({t for t, _ in entries} - set(kept))


def test_item_five_is_caught_by_the_scene_not_by_a_listed_cue():
    red_flag = next(i for i in BANK.all_idioms() if i.text == "red flag")
    assert not {"beach", "swimmer", "warn"} & red_flag.literal_cues
    assert "beach" in BANK.scene.nouns and "on" in BANK.scene.prepositions


def test_published_texts_keep_their_idiom_flags():
    texts = published_texts()
    assert len(texts) == 59
    outcome = {}
    for kind, lens, text in texts:
        found = BANK.find(text, TEMPLATE_OF_KIND[kind])
        violation = rules.check_idioms(lens, found, ("Figurative",), ("Literal", "Background"))
        outcome[text] = (lens, violation.reason if violation else None)
    figurative = [reason for lens, reason in outcome.values() if lens == "Figurative"]
    assert figurative == [rules.FIGURATIVE_MISSING_IDIOM] * 12  # all twelve keep their flag
    assert {reason for lens, reason in outcome.values() if lens != "Figurative"} == {None}


@pytest.mark.parametrize(
    ("text", "idiom", "literal"),
    [
        # located: a spatial preposition with a scene noun, after the match or its predicate
        ("Two black swans drift past the old stone bridge.", "black swan", True),
        ("The back door of the farmhouse stands open.", "back door", True),
        ("A rusty skeleton key opens the cellar.", "skeleton key", True),
        # the of-object decides for "the foot of ...", "a mountain of ..."
        ("The rabbit hole under a mountain of debt swallowed him.", "rabbit hole", False),
        ("A velvet rope stretches across the foot of the staircase.", "velvet rope", True),
        # figurative frames win over a located scene
        ("Every step on the ridge is a kind of tightrope over the canyon.", "tightrope", False),
        ("The tower, a house of cards on the cliff, waits for the storm.", "house of cards", False),
        ("The pier is a red flag on the beach.", "red flag", False),
        ("There is a red flag on the beach.", "red flag", True),
        # a scene word after a non-locative word, or an institution, does not locate it
        ("She broke the glass ceiling at the office.", "glass ceiling", False),
        ("Rising debt raised a red flag with the auditors on the pier.", "red flag", False),
        # an idiom the bank gives no physical sense is never literal
        ("The elephant in the room sits on the sofa.", "elephant in the room", False),
    ],
)
def test_each_part_of_the_reading(text, idiom, literal):
    found = [(m.idiom, m.literal) for m in BANK.find(text, include_literal=True)]
    assert found == [(idiom, literal)]


def test_scene_lexicon_refuses_what_yaml_turned_into_booleans():
    with pytest.raises(ValueError, match="must be strings"):
        SceneLexicon.from_data({"prepositions": [True, "in"]})  # a bare `on` in YAML
    with pytest.raises(ValueError, match="unknown keys"):
        SceneLexicon.from_data({"noun": ["beach"]})
    assert "on" in SceneLexicon.from_data({"prepositions": ["on"]}).prepositions
