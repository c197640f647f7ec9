"""The curated idiom lexicon (phrase_bank/phrase_bank.yaml) and a matcher that finds its idioms.

The matcher compares normalised token sequences, so it is robust to case, punctuation, hyphens
("double edged sword"), apostrophes (curly or straight, "Hobson’s choice"), articles and possessive
determiners ("canary in the coal mine", "ace up her sleeve") and simple inflection ("houses of
cards", "tipped the scales", "burning bridges"). Each match reports the idiom and its family.

Which listing shows which set is explicit: Listing 2 (image-side prompts) shows the 15 families
plus the "Add ons"; Listing 3 (captions) shows the 15 families only (`idioms_for("captions")`).

Literal use of an idiom's words is not an idiom ("a red flag flutters from the mast", "a red flag
on the beach warns swimmers"). An idiom whose words name something that can be in a picture lists
`literal` cue words in the YAML; `lenses_data.annotation.literal_use` reads a match of such an idiom
as the physical thing when a cue word is near, or when the bank-wide `scene` lexicon locates or
describes it, unless a figurative frame ("is a", "like a", "a kind of", an apposition) or an
abstract of-phrase ("a revolving door of tenants") makes it the idiom.
`find` reports idiomatic uses only; `find(..., include_literal=True)` also returns the literal ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from lenses_data.annotation.literal_use import Context, SceneLexicon, literal_use
from lenses_data.annotation.tokens import (
    DET,
    clause_numbers,
    pattern_of,
    sentence_numbers,
    stem,
    tokenize,
)
from lenses_data.resources import resource_dir

__all__ = [
    "Idiom",
    "IdiomMatch",
    "PhraseBank",
    "default_phrase_bank",
    "load_phrase_bank",
    "pattern_of",
    "stem",
]

BANK_FILE = "phrase_bank.yaml"
ADD_ONS = "add_ons"
FAMILIES = "families"
SCENE = "scene"


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
        self.scene = SceneLexicon.from_data(data.get(SCENE))
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
        context = Context(tokens, sentence_numbers(text, tokens), clause_numbers(text, tokens))
        found: list[IdiomMatch] = []
        position = 0
        while position < len(tokens):
            hit = self._longest_at(tokens, position, allowed)
            if hit is None:
                position += 1
                continue
            idiom, length = hit
            start, end = tokens[position][1], tokens[position + length - 1][2]
            literal = literal_use(context, position, position + length, idiom.literal_cues, self.scene)
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


def _idiom(entry: str | dict, family: str, set_name: str) -> Idiom:
    if isinstance(entry, str):
        entry = {"text": entry}
    forms = [entry.get("match", entry["text"]), *entry.get("variants", [])]
    patterns = tuple(dict.fromkeys(pattern_of(f) for f in forms if pattern_of(f)))
    cues = frozenset(token for cue in entry.get("literal", []) for token in pattern_of(cue))
    return Idiom(entry["text"], family, set_name, patterns, cues - {DET})


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
