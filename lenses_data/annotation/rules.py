"""Deterministic rule checks on generated prompts and captions (pure functions, no I/O).

Per text: word counts, self-containedness, machine artifacts, a valid Category, a non-empty
Focus, and the phrase-bank rules per lens. Per image: near-duplicate paraphrases by content
n-gram overlap, lens coverage and the idiomatic share. Every violation is a `Violation` with a
named reason code.

Whether a violation rejects the text or is only recorded on it as a flag is `rejects()`: damage
rejects; the word limits, which the paper's published texts break (2 of 59), are flags unless
`word_limits="reject"`; the phrase-bank rules, which Listings 2-3 state as instructions to the
generator, are flags unless `idiom_rules="strict"`; an edit that Listing 5 allows (removing a
fragment or an idiom) is never undone. docs/rules.md gives the quotes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from lenses_data.annotation.phrase_bank import IdiomMatch, PhraseBank, stem
from lenses_data.annotation.prompts import TEMPLATE_OF_KIND, VISUAL_VALIDATION
from lenses_data.annotation.prompts import (
    TEXT_VALIDATION as TEXT_VALIDATION,  # read as rules.TEXT_VALIDATION too
)
from lenses_data.config.annotate import IDIOM_FORBIDDEN_LENSES, IDIOM_REQUIRED_LENSES
from lenses_data.schemas import LENS_NAMES

# Reason codes
EMPTY_TEXT = "empty_text"
WORD_COUNT_LOW = "word_count_low"
WORD_COUNT_HIGH = "word_count_high"
SELF_REFERENCE = "self_reference"
ARTIFACT_LABEL = "artifact_label"
ARTIFACT_PLACEHOLDER = "artifact_placeholder"
ARTIFACT_QUOTES = "artifact_quotes"
ARTIFACT_TRUNCATED = "artifact_truncated"
ARTIFACT_MARKUP = "artifact_markup"
INVALID_CATEGORY = "invalid_category"
EMPTY_FOCUS = "empty_focus"
FIGURATIVE_MISSING_IDIOM = "figurative_missing_idiom"
FORBIDDEN_IDIOM = "forbidden_idiom"
NEAR_DUPLICATE = "near_duplicate"
EMBEDDING_DUPLICATE = "embedding_duplicate"
VALIDATOR_ADDED_IDIOM = "validator_added_idiom"  # Listing 5: "Do not add new idioms" (a flag)

# What a violation does. Damage makes a text unusable whoever wrote it; the word limits and the
# phrase-bank rules are what the generator is asked for, which its published texts do not always meet.
DAMAGE = frozenset(
    {
        EMPTY_TEXT,
        SELF_REFERENCE,
        ARTIFACT_LABEL,
        ARTIFACT_PLACEHOLDER,
        ARTIFACT_QUOTES,
        ARTIFACT_TRUNCATED,
        ARTIFACT_MARKUP,
        INVALID_CATEGORY,
        EMPTY_FOCUS,
    }
)
WORD_LIMITS = frozenset({WORD_COUNT_LOW, WORD_COUNT_HIGH})
# flag: the paper published texts outside Listings 2-3's ranges (docs/rules.md); reject: enforce them.
WORD_LIMIT_MODES = ("flag", "reject")
IDIOM_RULES = frozenset({FIGURATIVE_MISSING_IDIOM, FORBIDDEN_IDIOM})
IDIOM_MODES = ("flag", "strict")
# How each listing words its phrase-bank rules: strict mode rejects the MUST-level ones only
# (Listing 3: Literal and Background captions "SHOULD NOT" use PHRASE_BANK items).
IDIOM_STRENGTH = {
    ("prompt", FIGURATIVE_MISSING_IDIOM): "MUST",
    ("prompt", FORBIDDEN_IDIOM): "MUST NOT",
    ("caption", FIGURATIVE_MISSING_IDIOM): "MUST",
    ("caption", FORBIDDEN_IDIOM): "SHOULD NOT",
}
# Who wrote the text a check runs on: the generator (None), or a validator's edit (its template,
# TEXT_VALIDATION or VISUAL_VALIDATION, named in prompts.py).

_WORD = re.compile(r"[A-Za-z0-9]+(?:['\u2019\-][A-Za-z0-9]+)*")
_LABEL_WORDS = "caption|prompt|focus|category|text|output|answer|" + "|".join(n.lower() for n in LENS_NAMES)
_LEADING_LABEL = re.compile(rf"^\s*(?:{_LABEL_WORDS})(?:\s*[:=]|\s+[-\u2013\u2014>]\s)", re.IGNORECASE)
_INNER_LABEL = re.compile(r"\b(?:Caption|Prompt|Focus|Category)\s*:")
_LEADING_INDEX = re.compile(r"^\s*(?:\(?\d{1,3}[.)\]:]\s|[-*\u2022]\s)")
_PLACEHOLDER = re.compile(
    r"<[^<>]{0,40}>|\{[^{}]{0,40}\}|\[(?:[^\[\]]{0,40})\]|\b(?:TODO|TBD|PLACEHOLDER|lorem ipsum)\b",
    re.IGNORECASE,
)
_MARKUP = re.compile(r"\*\*|__|```|^#+\s|\n|\\n|\\\"")
_DANGLING = frozenset(
    "and or but nor the a an of to with from their its whose than into onto between".split()
)
_STOPWORDS = frozenset(
    "a an the and or but of to in on at for from by with as is are was were be been being its it "
    "this that these those their his her they them there here while into onto over under than "
    "then so such very".split()
)


@dataclass(frozen=True)
class Violation:
    reason: str
    message: str


def rejects(
    reason: str,
    kind: str,
    idiom_rules: str = "flag",
    edited_by: str | None = None,
    *,
    word_limits: str = "flag",
) -> bool:
    """Whether a violation rejects the text (True) or is kept on it as a flag (False)."""
    if idiom_rules not in IDIOM_MODES:
        raise ValueError(f"idiom_rules must be one of {IDIOM_MODES}, not {idiom_rules!r}")
    if word_limits not in WORD_LIMIT_MODES:
        raise ValueError(f"word_limits must be one of {WORD_LIMIT_MODES}, not {word_limits!r}")
    if reason in DAMAGE:
        return True
    if edited_by == VISUAL_VALIDATION and (reason in WORD_LIMITS or reason in IDIOM_RULES):
        return False  # Listing 5 allows removing fragments and idioms: the re-check never undoes it
    if reason in WORD_LIMITS:
        return word_limits == "reject"
    if reason in IDIOM_RULES:
        return idiom_rules == "strict" and IDIOM_STRENGTH[(kind, reason)] in ("MUST", "MUST NOT")
    return reason != VALIDATOR_ADDED_IDIOM


def split_violations(
    violations: Iterable[Violation],
    kind: str,
    idiom_rules: str = "flag",
    edited_by: str | None = None,
    *,
    word_limits: str = "flag",
) -> tuple[list[Violation], list[Violation]]:
    """(violations that reject the text, violations recorded on it as flags)."""
    rejecting, flags = [], []
    for v in violations:
        rejected = rejects(v.reason, kind, idiom_rules, edited_by, word_limits=word_limits)
        (rejecting if rejected else flags).append(v)
    return rejecting, flags


def words(text: str) -> list[str]:
    """Words as the word limits count them: hyphenated and apostrophe forms are one word."""
    return _WORD.findall(text)


def check_word_count(text: str, low: int, high: int) -> Violation | None:
    n = len(words(text))
    if n < low:
        return Violation(WORD_COUNT_LOW, f"{n} words; at least {low} required")
    if n > high:
        return Violation(WORD_COUNT_HIGH, f"{n} words; at most {high} allowed")
    return None


@lru_cache(maxsize=64)
def _self_reference_pattern(phrases: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(p.lower()) for p in sorted(phrases, key=len, reverse=True))
    return re.compile(rf"(?<![a-z])(?:{alternatives})(?![a-z])")


def check_self_contained(text: str, phrases: Iterable[str]) -> Violation | None:
    phrases = tuple(phrases)
    if not phrases:
        return None
    found = _self_reference_pattern(phrases).search(text.replace("\u2019", "'").lower())
    if found:
        return Violation(
            SELF_REFERENCE, f"refers to the medium ({found.group(0)!r}); texts must be self-contained"
        )
    return None


def _quote_problem(text: str) -> str | None:
    stripped = text.strip()
    if stripped.count('"') % 2 or stripped.count("\u201c") != stripped.count("\u201d"):
        return "unbalanced double quotes"
    for opener, closer in (('"', '"'), ("\u201c", "\u201d"), ("'", "'")):
        body = stripped.rstrip(".")
        if len(body) > 2 and body.startswith(opener) and body.endswith(closer):
            return "the whole text is wrapped in quotes"
    return None


def _truncation_problem(text: str) -> str | None:
    stripped = text.strip()
    if stripped.endswith(("...", "\u2026", ",", ";", ":", "-", "\u2013", "\u2014", "(", "/", "&")):
        return f"ends with {stripped[-1]!r}"
    tail = words(stripped)
    if tail and tail[-1].lower() in _DANGLING and stripped[-1].isalnum():
        return f"ends with the dangling word {tail[-1]!r}"
    if stripped.count("(") != stripped.count(")"):
        return "unbalanced parentheses"
    return None


def check_artifacts(text: str) -> list[Violation]:
    """Leftover labels or indices, placeholders, stray quotes, truncation, markup."""
    found = []
    if _LEADING_LABEL.search(text) or _INNER_LABEL.search(text) or _LEADING_INDEX.search(text):
        found.append(Violation(ARTIFACT_LABEL, "leftover label or index from the answer format"))
    placeholder = _PLACEHOLDER.search(text)
    if placeholder:
        found.append(Violation(ARTIFACT_PLACEHOLDER, f"placeholder {placeholder.group(0)!r}"))
    quote = _quote_problem(text)
    if quote:
        found.append(Violation(ARTIFACT_QUOTES, quote))
    truncated = _truncation_problem(text)
    if truncated:
        found.append(Violation(ARTIFACT_TRUNCATED, f"looks truncated: {truncated}"))
    if _MARKUP.search(text):
        found.append(Violation(ARTIFACT_MARKUP, "markup, escape sequence or line break in the text"))
    return found


def check_category(lens: object) -> Violation | None:
    if str(lens) not in LENS_NAMES:
        return Violation(INVALID_CATEGORY, f"Category {lens!r} is not one of {', '.join(LENS_NAMES)}")
    return None


def check_focus(focus: str | None) -> Violation | None:
    if focus is None or not str(focus).strip():
        return Violation(EMPTY_FOCUS, "Focus is empty")
    return None


def check_idioms(
    lens: str, matches: Sequence[IdiomMatch], required: Iterable[str], forbidden: Iterable[str]
) -> Violation | None:
    """Figurative texts must contain a phrase-bank idiom; Literal and Background must not (literal
    uses of idiom words are not idioms: `matches` come from `PhraseBank.find`)."""
    if lens in set(required) and not matches:
        return Violation(FIGURATIVE_MISSING_IDIOM, f"{lens} text without a phrase-bank idiom")
    if lens in set(forbidden) and matches:
        names = ", ".join(m.idiom for m in matches)
        return Violation(FORBIDDEN_IDIOM, f"{lens} text uses phrase-bank idiom(s): {names}")
    return None


def text_violations(
    text: str,
    focus: str | None,
    lens: str,
    kind: str,
    *,
    low: int,
    high: int,
    self_references: Iterable[str],
    bank: PhraseBank,
    required: Iterable[str] = IDIOM_REQUIRED_LENSES,
    forbidden: Iterable[str] = IDIOM_FORBIDDEN_LENSES,
) -> list[Violation]:
    """Every per-text rule; an empty list means the text passes."""
    if not text or not text.strip():
        return [Violation(EMPTY_TEXT, "the text is empty")]
    checks = [
        check_word_count(text, low, high),
        check_self_contained(text, self_references),
        *check_artifacts(text),
        check_category(lens),
        check_focus(focus),
        check_idioms(lens, bank.find(text, TEMPLATE_OF_KIND[kind]), required, forbidden),
    ]
    return [v for v in checks if v is not None]


# ---------------------------------------------------------------------------------------------
# Per image


def content_ngrams(text: str, n: int = 1) -> set[tuple[str, ...]]:
    tokens = [stem(w.lower().replace("\u2019", "'")) for w in words(text) if w.lower() not in _STOPWORDS]
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def ngram_similarity(a: str, b: str, n: int = 1) -> float:
    """Jaccard similarity of content n-grams (stopwords dropped, words stemmed)."""
    return jaccard(content_ngrams(a, n), content_ngrams(b, n))


def jaccard(grams_a: set, grams_b: set) -> float:
    if not grams_a or not grams_b:
        return 0.0
    return len(grams_a & grams_b) / len(grams_a | grams_b)


@dataclass(frozen=True)
class TextRef:
    text_id: str
    lens: str
    text: str


def coverage_order(items: Sequence[TextRef]) -> list[int]:
    """Indices with the first text of every lens first, so a lens's only text survives a tie."""
    seen: set[str] = set()
    first, rest = [], []
    for i, item in enumerate(items):
        (rest if item.lens in seen else first).append(i)
        seen.add(item.lens)
    return first + rest


def near_duplicates(items: Sequence[TextRef], n: int, threshold: float) -> dict[str, tuple[str, float]]:
    """Greedy: keep texts in coverage order; a text too similar to a kept one is a duplicate.
    Returns text_id -> (id of the kept text it duplicates, similarity)."""
    kept: list[int] = []
    duplicates: dict[str, tuple[str, float]] = {}
    grams = [content_ngrams(item.text, n) for item in items]
    for i in coverage_order(items):
        best = max(((jaccard(grams[i], grams[k]), k) for k in kept), default=(0.0, -1))
        if kept and best[0] >= threshold:
            duplicates[items[i].text_id] = (items[best[1]].text_id, best[0])
        else:
            kept.append(i)
    return duplicates


def idiom_target(n_texts: int, share: float) -> int:
    """Idiomatic texts required for an image (Listing 2: about 40 percent, rounded up)."""
    return math.ceil(round(share * n_texts, 9))
