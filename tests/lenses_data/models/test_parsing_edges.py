"""Answer parsing, case by case: each answer a model may give maps to exactly one outcome, the parsed
value or one reason code with the message the re-ask and the rejection carry.

Written against the survivors of `make mutation MODULE=lenses_data/models/parsing.py`
(docs/testing.md): brackets and escaped quotes inside strings, prose and fences around the JSON,
the first of an object and an array, every error's whole message.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel, RootModel

from lenses_data.models.parsing import extract_json, parse_choice, pick_choice, validate_answer
from lenses_data.models.types import EMPTY_ANSWER, INVALID_CHOICE, INVALID_JSON, SCHEMA_INVALID, AnswerError

EMPTY = (EMPTY_ANSWER, "the model returned no content")
LONG_PROSE = "I cannot answer this in JSON because " + "the picture is unclear " * 4


def outcome(parse, answer):
    """The parsed value, or (code, message) of the AnswerError: one of the two, never both."""
    try:
        return parse(answer)
    except AnswerError as error:
        assert str(error) == f"{error.code}: {error.message}"
        return error.code, error.message


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (None, EMPTY),
        (" \n\t", EMPTY),
        ('{"a": 1}', {"a": 1}),
        (
            'Sure! {"a": {"b": "}"}, "c": "say \\"{\\" now"} hope it helps}',
            {"a": {"b": "}"}, "c": 'say "{" now'},
        ),
        ('{"": "x", "k": ""} and then }', {"": "x", "k": ""}),
        ('{"a": [1, 2,], "b": {"c": 3,},} done', {"a": [1, 2], "b": {"c": 3}}),
        ('{"a": {"b": 1}} {"z": 2}', {"a": {"b": 1}}),
        ('{"a": 1}, then more', {"a": 1}),
        ("[1, [2, 3]] then [4]", [1, [2, 3]]),
        ('[{"x": 1}] before {"y": 2}', [{"x": 1}]),
        ('{"y": 2} before [{"x": 1}]', {"y": 2}),
        ('Use {braces} like so:\n```json\n{"a": 1}\n```\nthanks', {"a": 1}),
        ('x] {"a": 1}', {"a": 1}),
        ("no json here at all", (INVALID_JSON, "no JSON object or array in answer: 'no json here at all'")),
        (LONG_PROSE, (INVALID_JSON, f"no JSON object or array in answer: {LONG_PROSE[:80]!r}")),
        ('{"a": [1, 2', (INVALID_JSON, "JSON is not closed (truncated answer?)")),
    ],
)
def test_extract_json(answer, expected):
    assert outcome(extract_json, answer) == expected


@pytest.mark.parametrize("answer", ['{"a": 1 2}', '{"a": X} trailing'])
def test_unparseable_json_is_named_with_the_decoder_reason(answer):
    code, message = outcome(extract_json, answer)
    assert (code, message.split(": ")[0]) == (INVALID_JSON, "unparseable JSON")
    assert message.startswith("unparseable JSON: Expecting ")


class Lens(BaseModel):
    name: str
    text: str


class Lenses(BaseModel):
    lenses: list[Lens]


class LensList(RootModel[list[Lens]]):
    pass


class OneLens(RootModel[Lens]):
    pass


class Pair(BaseModel):
    lenses: list[Lens]
    note: str = ""


ONE = {"name": "Literal", "text": "a boat"}


@pytest.mark.parametrize(
    ("model", "data", "expected"),
    [
        (Lenses, [ONE], Lenses(lenses=[Lens(**ONE)])),  # a bare list for the one list field
        (Lenses, ONE, Lenses(lenses=[Lens(**ONE)])),  # one object for the one list field
        (Lenses, {"lenses": [ONE]}, Lenses(lenses=[Lens(**ONE)])),
        (LensList, ONE, LensList([Lens(**ONE)])),  # one object where the root is a list
        (LensList, [ONE], LensList([Lens(**ONE)])),
        (OneLens, ONE, OneLens(Lens(**ONE))),  # a root that is no list: taken as it is
        (Pair, ONE, (SCHEMA_INVALID, "1 error(s); first at lenses: Field required")),  # two fields: no guess
        (
            Pair,
            [ONE],
            (
                SCHEMA_INVALID,
                "1 error(s); first at <root>: Input should be a valid dictionary or instance of Pair",
            ),
        ),
        (
            Lenses,
            {"lenses": [{"name": 1}]},
            (SCHEMA_INVALID, "2 error(s); first at lenses.0.name: Input should be a valid string"),
        ),
        (Lens, {"name": "x"}, (SCHEMA_INVALID, "1 error(s); first at text: Field required")),
    ],
)
def test_validate_answer(model, data, expected):
    assert outcome(lambda d: validate_answer(model, d), data) == expected


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (None, EMPTY),
        ("  ", EMPTY),
        ("yes.", "YES"),
        ('"No", because the sky is blue', "NO"),
        ("maybe " * 12, (INVALID_CHOICE, f"expected one of ['YES', 'NO'], got {('maybe ' * 12)[:60]!r}")),
        ("I think yes", (INVALID_CHOICE, "expected one of ['YES', 'NO'], got 'I think yes'")),
    ],
)
def test_parse_choice(answer, expected):
    assert outcome(parse_choice(["YES", "NO"]), answer) == expected


def _none_of(choices: list[str]) -> tuple[str, str]:
    return INVALID_CHOICE, f"expected exactly one of {choices} in the answer, found none"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (None, EMPTY),
        ("\n", EMPTY),
        ("I would say yes.", "YES"),
        ("NO", "NO"),
        (
            "Yes and no",
            (INVALID_CHOICE, "expected exactly one of ['YES', 'NO'] in the answer, found several: YES, NO"),
        ),
        ("nobody knows; yesterday", _none_of(["YES", "NO"])),
        ("no_way, yes_sir", _none_of(["YES", "NO"])),
        ("The answer is B.", "B"),
        (
            "A or B (a+b)",
            (
                INVALID_CHOICE,
                "expected exactly one of ['A', 'B', 'A+B'] in the answer, found several: A, B, A+B",
            ),
        ),
    ],
)
def test_pick_choice(answer, expected):
    choices = ["A", "B", "A+B"] if expected == "B" or "A+B" in str(expected) else ["YES", "NO"]
    assert outcome(lambda text: pick_choice(text, choices), answer) == expected
