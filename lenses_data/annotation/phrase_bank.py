"""The curated idiom lexicon (phrase_bank/phrase_bank.yaml) and a matcher that finds its idioms.

The matcher compares normalised token sequences, so it is robust to case, punctuation, hyphens
("double edged sword"), apostrophes (curly or straight, "Hobson’s choice"), articles and possessive
determiners ("canary in the coal mine", "ace up her sleeve") and simple inflection ("houses of
cards", "tipped the scales", "burning bridges"). Each match reports the idiom and its family.

Which listing shows which set is explicit: Listing 2 (image-side prompts) shows the 15 families
plus the "Add ons"; Listing 3 (captions) shows the 15 families only (`idioms_for("captions")`).

Literal use of an idiom's words is not an idiom ("a red flag flutters from the mast", "an acrobat
walks a tightrope above the circus crowd"). An idiom whose words name something that can be in a
picture lists `literal` cue words in the YAML: a match with a cue word within `LITERAL_WINDOW`
tokens in the same sentence reads as the physical thing, unless the words right before it mark a
comparison or metaphor ("like a house of cards", "is a red flag", "became a revolving door") or an
of-phrase names what it stands for ("a revolving door of tenants").
`find` reports idiomatic uses only; `find(..., include_literal=True)` also returns the literal ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import yaml

from lenses_data.resources import resource_dir

BANK_FILE = "phrase_bank.yaml"
ADD_ONS = "add_ons"
FAMILIES = "families"

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})
# Articles and possessive determiners are interchangeable inside an idiom.
_DETERMINERS = frozenset("a an the his her their its one's ones my your our".split())
_DET = "<det>"
# Words right before a match (determiners skipped) that make it a comparison or a metaphor: the
# idiom is used figuratively even when the sentence also names its physical domain.
_FIGURATIVE_MARKERS = (
    "like as into is are was were be been become became becomes becoming seem seems feel feels "
    "resemble resembles symbolize symbolizes symbolise symbolises represent represents signal signals "
    "evoke evokes suggest suggests mirror mirrors embody embodies"
).split()
# "there is a red flag on the pole": after "there", "is" introduces the thing, it does not predicate.
_EXISTENTIAL = "there"
_SENTENCE_END = re.compile(r"[.!?;]")
LITERAL_WINDOW = 6  # tokens either side of a match searched for literal cue words
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


@dataclass(frozen=True)
class Idiom:
    text: str  # as shown to the model
    family: str
    set_name: str  # "families" or "add_ons"
    patterns: tuple[tuple[str, ...], ...]  # normalised token sequences that count as this idiom
    literal_cues: frozenset[str] = frozenset()  # normalised words that signal the physical sense


@dataclass(frozen=True)
class IdiomMatch:
    idiom: str
    family: str
    set_name: str
    start: int  # character offsets into the matched text
    end: int
    literal: bool = False  # the words are used for the physical thing, not as the idiom


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


def _normalise_token(raw: str) -> str:
    if raw in _DETERMINERS:
        return _DET
    bare = raw.replace("'", "")
    if bare in _DETERMINERS:
        return _DET
    return stem(bare)


def tokenize(text: str) -> list[tuple[str, int, int]]:
    """(normalised token, start, end) for every word; hyphens and punctuation separate words."""
    lowered = text.translate(_APOSTROPHES).lower()
    return [(_normalise_token(m.group()), m.start(), m.end()) for m in _TOKEN.finditer(lowered)]


def pattern_of(phrase: str) -> tuple[str, ...]:
    return tuple(token for token, _, _ in tokenize(phrase))


class PhraseBank:
    """The lexicon: families in listing order, the add-ons, and which listing shows which."""

    def __init__(self, data: dict, source: Path | None = None) -> None:
        self.source = source
        self.families: list[tuple[str, str | None, list[Idiom]]] = []
        for family in data[FAMILIES]:
            idioms = [_idiom(entry, family["name"], FAMILIES) for entry in family["idioms"]]
            self.families.append((family["name"], family.get("note"), idioms))
        add_ons = data[ADD_ONS]
        self.add_ons_name: str = add_ons["name"]
        self.add_ons = [_idiom(entry, self.add_ons_name, ADD_ONS) for entry in add_ons["idioms"]]
        self.listings: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in data["listings"].items()}
        self._index = _build_index(self.all_idioms())

    def all_idioms(self) -> list[Idiom]:
        return [i for _, _, idioms in self.families for i in idioms] + list(self.add_ons)

    def idioms_for(self, listing: str) -> list[Idiom]:
        """The idioms a listing shows: "image_side_prompts" (with add-ons) or "captions"."""
        sets = self.listings[listing]
        return [i for i in self.all_idioms() if i.set_name in sets]

    def find(self, text: str, listing: str | None = None, include_literal: bool = False) -> list[IdiomMatch]:
        """Idioms used as idioms in `text`, left to right, longest match first; restricted to a
        listing's sets. With `include_literal`, literal uses of idiom words too (`literal=True`)."""
        allowed = set(self.listings[listing]) if listing else {FAMILIES, ADD_ONS}
        tokens = tokenize(text)
        sentences = _sentence_numbers(text, tokens)
        found: list[IdiomMatch] = []
        position = 0
        while position < len(tokens):
            hit = self._longest_at(tokens, position, allowed)
            if hit is None:
                position += 1
                continue
            idiom, length = hit
            start, end = tokens[position][1], tokens[position + length - 1][2]
            literal = literal_use(tokens, sentences, position, position + length, idiom.literal_cues)
            if include_literal or not literal:
                found.append(IdiomMatch(idiom.text, idiom.family, idiom.set_name, start, end, literal))
            position += length
        return found

    def _longest_at(self, tokens: list[tuple[str, int, int]], i: int, allowed: set[str]):
        best = None
        for pattern, idiom in self._index.get(tokens[i][0], ()):
            if idiom.set_name not in allowed or len(pattern) > len(tokens) - i:
                continue
            if all(tokens[i + k][0] == pattern[k] for k in range(len(pattern))):
                if best is None or len(pattern) > best[1]:
                    best = (idiom, len(pattern))
        return best

    def family_of(self, idiom_text: str) -> str:
        for idiom in self.all_idioms():
            if idiom.text == idiom_text:
                return idiom.family
        raise KeyError(idiom_text)

    def render(self, listing: str) -> str:
        """The PHRASE_BANK block as the listing shows it: family name, blank line, idioms."""
        blocks = []
        for name, note, idioms in self.families:
            title = f"{name} ({note})" if note else name
            blocks.append(f"{title}\n\n" + "; ".join(i.text for i in idioms))
        if ADD_ONS in self.listings[listing]:
            blocks.append(f"{self.add_ons_name}\n\n" + "; ".join(i.text for i in self.add_ons))
        return "\n\n".join(blocks)


def _sentence_numbers(text: str, tokens: list[tuple[str, int, int]]) -> list[int]:
    """The sentence (or clause after ';') each token belongs to."""
    ends = [m.start() for m in _SENTENCE_END.finditer(text)]
    numbers, seen = [], 0
    for _, start, _ in tokens:
        while seen < len(ends) and ends[seen] < start:
            seen += 1
        numbers.append(seen)
    return numbers


@cache
def _markers() -> frozenset[str]:
    return frozenset(_normalise_token(w) for w in _FIGURATIVE_MARKERS)


def literal_use(
    tokens: list[tuple[str, int, int]], sentences: list[int], first: int, stop: int, cues: frozenset[str]
) -> bool:
    """Whether tokens[first:stop] (an idiom match) name the physical thing: a cue word of the
    idiom's literal domain is near it in the same sentence, and no comparison/metaphor marker
    stands right before it."""
    if not cues:
        return False
    sentence = sentences[first]
    before = first - 1
    while before >= 0 and sentences[before] == sentence and tokens[before][0] == _DET:
        before -= 1
    if before >= 0 and sentences[before] == sentence and tokens[before][0] in _markers():
        existential = before >= 1 and tokens[before - 1][0] == _normalise_token(_EXISTENTIAL)
        if not existential:
            return False
    if _abstract_complement(tokens, sentences, stop, cues):
        return False
    window = range(max(0, first - LITERAL_WINDOW), min(len(tokens), stop + LITERAL_WINDOW))
    return any(tokens[i][0] in cues for i in window if sentences[i] == sentence and not first <= i < stop)


def _abstract_complement(
    tokens: list[tuple[str, int, int]], sentences: list[int], stop: int, cues: frozenset[str]
) -> bool:
    """An of-phrase right after the match whose first two words are no literal cue makes the idiom
    a metaphor for that thing: "a revolving door of tenants", "a tightrope of rules" ("the glass
    ceiling of the atrium" keeps its literal reading)."""
    if stop >= len(tokens) or tokens[stop][0] != "of" or sentences[stop] != sentences[stop - 1]:
        return False
    following = [t for t, _, _ in tokens[stop + 1 : stop + 5] if t != _DET][:2]
    return bool(following) and not any(t in cues for t in following)


def _idiom(entry: str | dict, family: str, set_name: str) -> Idiom:
    if isinstance(entry, str):
        entry = {"text": entry}
    forms = [entry.get("match", entry["text"]), *entry.get("variants", [])]
    patterns = tuple(dict.fromkeys(pattern_of(f) for f in forms if pattern_of(f)))
    cues = frozenset(token for cue in entry.get("literal", []) for token in pattern_of(cue))
    return Idiom(entry["text"], family, set_name, patterns, cues - {_DET})


def _build_index(idioms: list[Idiom]) -> dict[str, list[tuple[tuple[str, ...], Idiom]]]:
    index: dict[str, list[tuple[tuple[str, ...], Idiom]]] = {}
    for idiom in idioms:
        for pattern in idiom.patterns:
            index.setdefault(pattern[0], []).append((pattern, idiom))
    return index


def load_phrase_bank(path: str | Path | None = None) -> PhraseBank:
    path = Path(path) if path else resource_dir("phrase_bank") / BANK_FILE
    return PhraseBank(yaml.safe_load(path.read_text(encoding="utf-8")), source=path)


@cache
def default_phrase_bank() -> PhraseBank:
    """The shipped lexicon, loaded once per process."""
    return load_phrase_bank()
