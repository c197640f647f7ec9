"""Normalised word tokens shared by the phrase-bank matcher and its literal-use reading.

The same rules run on idioms and on texts, so a match compares normalised token sequences: case,
punctuation, hyphens, apostrophes (curly or straight), articles and possessive determiners and
simple inflection are all folded here.
"""

from __future__ import annotations

import re
from functools import lru_cache

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})
# Articles and possessive determiners are interchangeable inside an idiom.
_DETERMINERS = frozenset("a an the his her their its one's ones my your our".split())
DET = "<det>"
_SENTENCE_END = re.compile(r"[.!?;]")
# A clause as the literal-use reading scopes a locative phrase: commas, colons and dashes end it too.
_CLAUSE_END = re.compile(r"[.!?;:,()\u2013\u2014]|\s-\s")
# Irregular forms that suffix stripping cannot reach, mapped to the form their base stems to.
_IRREGULAR = {
    "spilt": "spill",
    "burnt": "burn",
    "paid": "pay",
    "broke": "break",
    "broken": "break",
    "men": "man",
    "rose": "rise",
    "risen": "rise",
    "cut": "cut",
    "left": "leave",
    "leaving": "leave",
}

Token = tuple[str, int, int]  # (normalised word, start, end) in the text


@lru_cache(maxsize=65536)
def stem(token: str) -> str:
    """A small, deterministic suffix stripper: the same rules run on idioms and on texts."""
    token = _IRREGULAR.get(token, token)
    if token.endswith(("ies", "ied")) and len(token) > 4:
        token = token[:-3] + "y"
    elif token.endswith("es") and token[:-2].endswith(("s", "x", "z", "ch", "sh")) and len(token) > 4:
        token = token[:-2]
    elif token.endswith("s") and not token.endswith(("ss", "us", "is")) and len(token) > 3:
        token = token[:-1]
    for suffix in ("ing", "ed"):
        if token.endswith(suffix) and len(token) - len(suffix) >= 3:
            token = token[: -len(suffix)]
            # "tipp" -> "tip", "runn" -> "run", but keep "spill", "pass", "buzz".
            if len(token) > 3 and token[-1] == token[-2] and token[-1] not in "lsz":
                token = token[:-1]
            break
    if token.endswith("e") and len(token) > 3:
        token = token[:-1]
    return token


def normalise_token(raw: str) -> str:
    if raw in _DETERMINERS:
        return DET
    bare = raw.replace("'", "")
    if bare in _DETERMINERS:
        return DET
    return stem(bare)


def tokenize(text: str) -> list[Token]:
    """(normalised token, start, end) for every word; hyphens and punctuation separate words."""
    lowered = text.translate(_APOSTROPHES).lower()
    return [(normalise_token(m.group()), m.start(), m.end()) for m in _TOKEN.finditer(lowered)]


def pattern_of(phrase: str) -> tuple[str, ...]:
    return tuple(token for token, _, _ in tokenize(phrase))


def word_set(words: list[str] | tuple[str, ...]) -> frozenset[str]:
    """The normalised tokens of a word list (determiners dropped)."""
    return frozenset(t for w in words for t in pattern_of(w)) - {DET}


def sentence_numbers(text: str, tokens: list[Token]) -> list[int]:
    """The sentence (or clause after ';') each token belongs to."""
    return _span_numbers(_SENTENCE_END, text, tokens)


def clause_numbers(text: str, tokens: list[Token]) -> list[int]:
    """The comma-delimited clause each token belongs to."""
    return _span_numbers(_CLAUSE_END, text, tokens)


def _span_numbers(boundary: re.Pattern[str], text: str, tokens: list[Token]) -> list[int]:
    ends = [m.start() for m in boundary.finditer(text)]
    numbers, seen = [], 0
    for _, start, _ in tokens:
        while seen < len(ends) and ends[seen] < start:
            seen += 1
        numbers.append(seen)
    return numbers
