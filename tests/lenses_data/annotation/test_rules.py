"""Every rule check, on hand-written texts that pass and that fail it."""

from __future__ import annotations

import pytest

from lenses_data.annotation import rules
from lenses_data.annotation.phrase_bank import default_phrase_bank
from lenses_data.config.annotate import DEFAULT_SELF_REFERENCES
from lenses_data.schemas import LENS_NAMES
from tests.lenses_data.paper_texts import ITEM, supplementary

BANK = default_phrase_bank()
GOOD_LITERAL = "A lone oak tree stands on a grassy hill beneath dark clouds, beside a broken wooden fence."
GOOD_FIGURATIVE = "The leaning fence looks like a house of cards, one gust away from folding into the grass."


def reasons(text, lens="Literal", kind="caption", focus="tree", low=8, high=22):
    found = rules.text_violations(
        text, focus, lens, kind, low=low, high=high, self_references=DEFAULT_SELF_REFERENCES, bank=BANK
    )
    return [v.reason for v in found]


def test_clean_texts_pass():
    assert reasons(GOOD_LITERAL) == []
    assert reasons(GOOD_FIGURATIVE, lens="Figurative") == []


@pytest.mark.parametrize(
    ("text", "low", "high", "expected"),
    [
        ("A tree on a hill.", 8, 22, rules.WORD_COUNT_LOW),
        (" ".join(["word"] * 23) + ".", 8, 22, rules.WORD_COUNT_HIGH),
        (" ".join(["word"] * 9) + ".", 10, 28, rules.WORD_COUNT_LOW),
        (" ".join(["word"] * 28) + ".", 10, 28, None),
    ],
)
def test_word_counts(text, low, high, expected):
    violation = rules.check_word_count(text, low, high)
    assert (violation.reason if violation else None) == expected


def test_word_count_treats_hyphenated_and_possessive_as_one():
    assert len(rules.words("A double-edged sword in the knight's hand")) == 7


@pytest.mark.parametrize(
    "text",
    [
        "In this image a lone oak tree stands on a grassy hill beneath dark clouds.",
        "This photo shows a lone oak tree on a grassy hill beneath dark clouds.",
        "The picture frames a lone oak tree on a grassy hill beneath dark clouds.",
        "A lone oak tree stands on a hill in THIS PHOTOGRAPH, beneath dark clouds.",
    ],
)
def test_self_reference_fails(text):
    assert rules.SELF_REFERENCE in reasons(text)


def test_self_reference_needs_whole_words():
    assert (
        rules.check_self_contained(
            "A man picturesquely imagines this imagery of hills.", DEFAULT_SELF_REFERENCES
        )
        is None
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Caption: A lone oak tree stands on a grassy hill beneath dark clouds.", rules.ARTIFACT_LABEL),
        ("Literal - A lone oak tree stands on a grassy hill beneath dark clouds.", rules.ARTIFACT_LABEL),
        ("1. A lone oak tree stands on a grassy hill beneath dark clouds today.", rules.ARTIFACT_LABEL),
        ("A lone <object> stands on a grassy hill beneath dark clouds today.", rules.ARTIFACT_PLACEHOLDER),
        ("<text>", rules.ARTIFACT_PLACEHOLDER),
        ("A lone [object] stands on a grassy hill beneath dark clouds today.", rules.ARTIFACT_PLACEHOLDER),
        ('"A lone oak tree stands on a grassy hill beneath dark clouds."', rules.ARTIFACT_QUOTES),
        ('A lone oak tree stands on a "grassy hill beneath dark clouds.', rules.ARTIFACT_QUOTES),
        ("A lone oak tree stands on a grassy hill beneath dark clouds and", rules.ARTIFACT_TRUNCATED),
        ("A lone oak tree stands on a grassy hill beneath dark clouds...", rules.ARTIFACT_TRUNCATED),
        ("A lone oak tree stands on a grassy hill beneath dark clouds,", rules.ARTIFACT_TRUNCATED),
        (
            "A lone oak tree (tall and bare stands on a grassy hill beneath dark clouds.",
            rules.ARTIFACT_TRUNCATED,
        ),
        ("A **lone** oak tree stands on a grassy hill beneath dark clouds.", rules.ARTIFACT_MARKUP),
        ("A lone oak tree stands on a grassy hill\nbeneath dark clouds.", rules.ARTIFACT_MARKUP),
    ],
)
def test_artifacts_fail(text, expected):
    assert expected in reasons(text)


@pytest.mark.parametrize(
    "text",
    [
        'A sign reading "closed" hangs on the gate of a grassy hill under clouds.',
        "Text-heavy posters cover the wall behind a lone oak tree on the hill.",
        "Background hills fade into mist behind a lone oak tree and its fence.",
        "A storm is rolling in over a lone oak tree on a grassy hill.",
        "Why does the lone oak tree lean toward the broken fence on the hill?",
    ],
)
def test_artifact_checks_leave_normal_texts_alone(text):
    assert rules.check_artifacts(text) == []


def test_category_and_focus():
    assert rules.INVALID_CATEGORY in reasons(GOOD_LITERAL, lens="Poetic")
    assert rules.check_category("Emotional") is None
    assert rules.EMPTY_FOCUS in reasons(GOOD_LITERAL, focus="  ")
    assert rules.EMPTY_FOCUS in reasons(GOOD_LITERAL, focus=None)
    assert reasons("   ") == [rules.EMPTY_TEXT]


def test_idiom_rules_per_lens():
    plain = "The leaning fence seems one gust away from folding quietly into the tall grass."
    assert rules.FIGURATIVE_MISSING_IDIOM in reasons(plain, lens="Figurative")
    assert rules.FORBIDDEN_IDIOM in reasons(GOOD_FIGURATIVE, lens="Literal")
    assert rules.FORBIDDEN_IDIOM in reasons(GOOD_FIGURATIVE, lens="Background")
    # Emotional and Abstract may use an idiom, or not.
    assert reasons(GOOD_FIGURATIVE, lens="Emotional") == []
    assert reasons(plain, lens="Abstract") == []


def test_literal_use_of_idiom_words_breaks_no_idiom_rule():
    # "a red flag flutters": the flag, not the warning; fine in a Literal caption, no idiom for Figurative.
    literal = "A red flag flutters from the mast of the old fishing boat at dawn."
    assert reasons(literal, lens="Literal") == []
    assert rules.FIGURATIVE_MISSING_IDIOM in reasons(literal, lens="Figurative")
    idiomatic = "The cracked beam is a red flag for everyone living under the sagging roof."
    assert rules.FORBIDDEN_IDIOM in reasons(idiomatic, lens="Literal")


@pytest.mark.parametrize(
    ("reason", "kind", "mode", "edited_by", "expected"),
    [
        # The phrase-bank rules are instructions to the generator: flags by default.
        (rules.FIGURATIVE_MISSING_IDIOM, "caption", "flag", None, False),
        (rules.FORBIDDEN_IDIOM, "prompt", "flag", None, False),
        # Strict: the listings' MUST / MUST NOT reject; Listing 3's SHOULD NOT stays a flag.
        (rules.FIGURATIVE_MISSING_IDIOM, "caption", "strict", None, True),
        (rules.FIGURATIVE_MISSING_IDIOM, "prompt", "strict", None, True),
        (rules.FORBIDDEN_IDIOM, "prompt", "strict", None, True),
        (rules.FORBIDDEN_IDIOM, "caption", "strict", None, False),
        # Filters the paper states reject in both modes.
        (rules.SELF_REFERENCE, "prompt", "flag", None, True),
        (rules.ARTIFACT_TRUNCATED, "caption", "strict", rules.VISUAL_VALIDATION, True),
        # Edits Listing 5 allows (removing fragments or idioms) are never undone.
        (rules.WORD_COUNT_LOW, "caption", "strict", rules.VISUAL_VALIDATION, False),
        (rules.FIGURATIVE_MISSING_IDIOM, "caption", "strict", rules.VISUAL_VALIDATION, False),
        (rules.WORD_COUNT_LOW, "caption", "flag", rules.TEXT_VALIDATION, False),
        (rules.FIGURATIVE_MISSING_IDIOM, "prompt", "strict", rules.TEXT_VALIDATION, True),
        (rules.VALIDATOR_ADDED_IDIOM, "caption", "strict", rules.VISUAL_VALIDATION, False),
    ],
)
def test_what_rejects_and_what_is_flagged(reason, kind, mode, edited_by, expected):
    assert rules.rejects(reason, kind, mode, edited_by) is expected


@pytest.mark.parametrize(
    ("edited_by", "flagged", "rejected"),
    [
        # The generator's text and a Listing-4 edit: a flag by default, a rejection when configured.
        (None, True, True),
        (rules.TEXT_VALIDATION, True, True),
        # A Listing-5 edit may shorten a text: never rejected for its length, in either mode.
        (rules.VISUAL_VALIDATION, True, False),
    ],
)
def test_word_limits_flag_by_default_and_reject_when_configured(edited_by, flagged, rejected):
    for reason in (rules.WORD_COUNT_LOW, rules.WORD_COUNT_HIGH):
        for idiom_mode in rules.IDIOM_MODES:  # the two settings are independent
            assert rules.rejects(reason, "caption", idiom_mode, edited_by) is not flagged
            assert rules.rejects(reason, "prompt", idiom_mode, edited_by, word_limits="reject") is rejected
    # Damage still rejects under the flag default.
    assert rules.rejects(rules.EMPTY_TEXT, "caption", word_limits="flag")
    with pytest.raises(ValueError, match="word_limits"):
        rules.rejects(rules.WORD_COUNT_LOW, "caption", word_limits="strict")


def test_split_violations_partitions_in_order():
    found = rules.text_violations(
        "In this image a red flag is the warning everyone ignores.",
        "flag",
        "Literal",
        "prompt",
        low=10,
        high=28,
        self_references=DEFAULT_SELF_REFERENCES,
        bank=BANK,
    )
    rejecting, flags = rules.split_violations(found, "prompt")
    assert [v.reason for v in rejecting] == [rules.SELF_REFERENCE]
    assert [v.reason for v in flags] == [rules.FORBIDDEN_IDIOM]
    rejecting, flags = rules.split_violations(found, "prompt", "strict")
    assert [v.reason for v in rejecting] == [rules.SELF_REFERENCE, rules.FORBIDDEN_IDIOM] and not flags
    with pytest.raises(ValueError, match="idiom_rules"):
        rules.rejects(rules.FORBIDDEN_IDIOM, "prompt", "lenient")


def test_idiom_sets_follow_the_listing():
    # "tip of the iceberg" is an add-on: Listing 2 (prompts) shows it, Listing 3 (captions) does not.
    text = "The small broken fence is only the tip of the iceberg of a farm in long decline."
    assert reasons(text, lens="Figurative", kind="prompt", low=10, high=28) == []
    assert rules.FIGURATIVE_MISSING_IDIOM in reasons(text, lens="Figurative", kind="caption")


def test_ngram_similarity_and_near_duplicates():
    a = "A lone oak tree stands on a grassy hill beneath dark clouds."
    b = "A lone oak tree stands on the grassy hill under dark clouds."
    c = "Rusty wires of the fence hum softly while the pasture waits for rain."
    assert rules.ngram_similarity(a, b) > 0.6
    assert rules.ngram_similarity(a, c) < 0.1
    items = [
        rules.TextRef("t1", "Literal", a),
        rules.TextRef("t2", "Literal", b),
        rules.TextRef("t3", "Background", c),
    ]
    assert rules.near_duplicates(items, 1, 0.3) == {"t2": ("t1", pytest.approx(rules.ngram_similarity(a, b)))}


def test_near_duplicates_keep_every_lens_first():
    a = "A lone oak tree stands on a grassy hill beneath dark clouds."
    # t2 (Literal) comes first in the answer but duplicates the only Background text t3's wording;
    # the first text of each lens is kept first, so the second Literal goes.
    items = [
        rules.TextRef("t1", "Literal", "Rusty wires of the fence hum softly while the pasture waits."),
        rules.TextRef("t2", "Literal", a),
        rules.TextRef("t3", "Background", a.replace("beneath", "under")),
    ]
    dups = rules.near_duplicates(items, 1, 0.3)
    assert set(dups) == {"t2"} and dups["t2"][0] == "t3"


def test_bigram_overlap_is_more_lenient():
    a = "Dark clouds gather over a lone oak on a hill."
    b = "A lone hill with an oak gathers dark clouds."
    assert rules.ngram_similarity(a, b, 2) < rules.ngram_similarity(a, b, 1)


@pytest.mark.parametrize(("n", "expected"), [(1, 1), (5, 2), (6, 3), (7, 3), (10, 4), (0, 0)])
def test_idiom_target_rounds_up(n, expected):
    assert rules.idiom_target(n, 0.4) == expected


def _paper_samples():
    return ITEM.findall(supplementary().read_text(encoding="utf-8"))


def test_published_samples_raise_no_artifact_or_self_reference_flags():
    # The supplementary's sample captions and prompts (Figs. 5-7) are clean texts: the artifact and
    # self-reference checks must not fire on any of them (false-positive guard).
    samples = _paper_samples()
    assert len(samples) > 50
    for lens, text in samples:
        assert rules.check_artifacts(text) == [], text
        assert rules.check_self_contained(text, DEFAULT_SELF_REFERENCES) is None, text
        assert lens in LENS_NAMES
