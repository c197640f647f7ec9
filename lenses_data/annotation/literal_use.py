"""Whether an idiom match names the physical thing ("a red flag on the beach") or is the idiom.

An idiom has a literal sense only if its words can name something in a picture; the phrase bank
marks those idioms with `literal` cue words of their physical domain. For such an idiom a match is
read as the physical thing when the words around it anchor it in a physical scene:

- a cue word of the idiom's own domain is near it in the same sentence ("flutters from the mast");
- a material or wear adjective describes it ("a rusty skeleton key", "a tattered red flag");
- it is located: a spatial preposition whose object is a concrete scene noun follows the match,
  right after it or after its own short predicate, in the same clause ("a red flag on the beach",
  "two black swans drift past the old stone bridge", "the back door of the farmhouse").

The scene nouns, spatial prepositions and material adjectives are one bank-wide lexicon (the YAML's
`scene` key), not per-sentence cues. Figurative framing wins over every anchor: a comparison or
copula right before the match ("is a red flag", "like a house of cards"), a hedge ("a kind of
tightrope"), an apposition ("the tower, a house of cards on the cliff, ..."), or an of-phrase
naming a non-physical thing ("a revolving door of tenants"). docs/rules.md gives the reasons.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lenses_data.annotation.tokens import DET, Token, normalise_token, word_set

LITERAL_WINDOW = 6  # tokens either side of a match searched for the idiom's own cue words
SCENE_WINDOW = 8  # tokens after a match searched for a locative phrase
ADJECTIVE_WINDOW = 2  # words before a match searched for a material adjective ("a tattered old flag")
SCENE_OBJECT_WORDS = 3  # words after a preposition (determiners skipped) searched for the scene noun
# Words right before a match (determiners skipped) that make it a comparison or a metaphor: the
# idiom is used figuratively even when the sentence also names its physical domain.
_FIGURATIVE_MARKERS = (
    "like as into is are was were be been become became becomes becoming seem seems feel feels "
    "resemble resembles symbolize symbolizes symbolise symbolises represent represents signal signals "
    "evoke evokes suggest suggests mirror mirrors embody embodies call calls called remain remains remained "
    "stay stays stayed prove proves proved"
).split()
# "a kind of tightrope": a hedge announces a non-literal use.
_HEDGE_NOUNS = frozenset(normalise_token(w) for w in ("kind", "sort", "type"))
# "there is a red flag on the pole": after "there", "is" introduces the thing, it does not predicate.
_EXISTENTIAL = normalise_token("there")
# Words that start another clause, a comparison or a non-spatial complement ("raised a red flag
# with the auditors on the pier"): a locative after them locates that, not the match.
_CLAUSE_WORDS = frozenset(
    normalise_token(w)
    for w in "that which who whom whose while because but although though when whereas like as if unless "
    "than so with without for about despite during after before since until".split()
)
_MARKERS = frozenset(normalise_token(w) for w in _FIGURATIVE_MARKERS)
_OF = "of"


@dataclass(frozen=True)
class SceneLexicon:
    """Bank-wide words of physical scenes (phrase_bank.yaml, key `scene`)."""

    nouns: frozenset[str] = frozenset()
    prepositions: frozenset[str] = frozenset()
    materials: frozenset[str] = frozenset()

    @classmethod
    def from_data(cls, data: dict | None) -> SceneLexicon:
        data = data or {}
        unknown = set(data) - {"nouns", "prepositions", "materials"}
        if unknown:
            raise ValueError(f"phrase bank `scene` has unknown keys: {sorted(unknown)}")
        lists = [data.get(k, []) for k in ("nouns", "prepositions", "materials")]
        for words in lists:
            not_words = [w for w in words if not isinstance(w, str)]
            if not_words:  # YAML reads a bare on/off/yes/no as a boolean: quote it
                raise ValueError(f"phrase bank `scene` entries must be strings, got {not_words!r}")
        return cls(*(word_set(words) for words in lists))


@dataclass(frozen=True)
class Context:
    """One text's tokens with the sentence and clause each belongs to."""

    tokens: Sequence[Token]
    sentences: Sequence[int]
    clauses: Sequence[int]

    def word(self, i: int) -> str:
        return self.tokens[i][0]


def literal_use(ctx: Context, first: int, stop: int, cues: frozenset[str], scene: SceneLexicon) -> bool:
    """Whether tokens[first:stop] (an idiom match) name the physical thing."""
    if not cues:
        return False  # the bank gives this idiom no physical sense
    if _figurative_frame(ctx, first, scene) or _abstract_complement(ctx, stop, cues, scene):
        return False
    return (
        _own_cue_near(ctx, first, stop, cues) or _described(ctx, first, scene) or _located(ctx, stop, scene)
    )


def _skip_back(ctx: Context, first: int, scene: SceneLexicon) -> int:
    """The index of the first word before the match that is no determiner or material adjective."""
    before = first - 1
    while before >= 0 and ctx.clauses[before] == ctx.clauses[first]:
        if ctx.word(before) != DET and ctx.word(before) not in scene.materials:
            break
        before -= 1
    return before


def _figurative_frame(ctx: Context, first: int, scene: SceneLexicon) -> bool:
    before = _skip_back(ctx, first, scene)
    if before < 0 or ctx.sentences[before] != ctx.sentences[first]:
        return False
    if ctx.clauses[before] != ctx.clauses[first]:
        return _apposition(ctx, first)
    word = ctx.word(before)
    if word in _MARKERS:
        return not (before >= 1 and ctx.word(before - 1) == _EXISTENTIAL)
    return word == _OF and before >= 1 and ctx.word(before - 1) in _HEDGE_NOUNS


def _apposition(ctx: Context, first: int) -> bool:
    """The match opens a clause inside a sentence that goes on after it: "the tower, a house of
    cards on the cliff, waits" says the tower is one (a reduced copula)."""
    clause, sentence = ctx.clauses[first], ctx.sentences[first]
    rest = range(first + 1, len(ctx.tokens))
    return any(ctx.sentences[i] == sentence and ctx.clauses[i] != clause for i in rest)


def _abstract_complement(ctx: Context, stop: int, cues: frozenset[str], scene: SceneLexicon) -> bool:
    """An of-phrase right after the match naming no physical thing makes the idiom a metaphor for
    it: "a revolving door of tenants" (not "the glass ceiling of the atrium")."""
    if stop >= len(ctx.tokens) or ctx.word(stop) != _OF or ctx.clauses[stop] != ctx.clauses[stop - 1]:
        return False
    following = [t for t, _, _ in ctx.tokens[stop + 1 : stop + 5] if t != DET][:2]
    return bool(following) and not any(t in cues or t in scene.nouns for t in following)


def _own_cue_near(ctx: Context, first: int, stop: int, cues: frozenset[str]) -> bool:
    sentence = ctx.sentences[first]
    window = range(max(0, first - LITERAL_WINDOW), min(len(ctx.tokens), stop + LITERAL_WINDOW))
    return any(ctx.word(i) in cues for i in window if ctx.sentences[i] == sentence and not first <= i < stop)


def _described(ctx: Context, first: int, scene: SceneLexicon) -> bool:
    """A material or wear adjective inside the match's noun phrase: between a determiner (or the
    clause start) and the match ("a tattered red flag"; not "one more stone tips the scales")."""
    modifiers = []
    for before in range(first - 1, max(-1, first - 2 - ADJECTIVE_WINDOW), -1):
        if ctx.clauses[before] != ctx.clauses[first] or ctx.word(before) == DET:
            return any(w in scene.materials for w in modifiers)
        modifiers.append(ctx.word(before))
    return len(modifiers) <= ADJECTIVE_WINDOW and any(w in scene.materials for w in modifiers)


def _located(ctx: Context, stop: int, scene: SceneLexicon) -> bool:
    """A spatial preposition with a scene-noun object after the match (or after its predicate) in
    the match's clause; "of" counts right after the match ("the back door of the farmhouse")."""
    if stop >= len(ctx.tokens):
        return False
    clause = ctx.clauses[stop - 1]
    for i in range(stop, min(len(ctx.tokens), stop + SCENE_WINDOW)):
        word = ctx.word(i)
        if ctx.clauses[i] != clause or word in _CLAUSE_WORDS:
            return False
        if (word in scene.prepositions or (word == _OF and i == stop)) and _scene_object(ctx, i + 1, scene):
            return True
    return False


def _scene_object(ctx: Context, start: int, scene: SceneLexicon, depth: int = 0) -> bool:
    """Whether the noun phrase from `start` names a scene: its head is a scene noun, or, for "the
    foot of the staircase", the of-object decides ("a mountain of debt" is no scene)."""
    seen = 0
    for i in range(start, len(ctx.tokens)):
        word = ctx.word(i)
        if word == DET:
            continue
        if seen == SCENE_OBJECT_WORDS or ctx.clauses[i] != ctx.clauses[start - 1]:
            return False
        if word == _OF:
            return depth == 0 and _scene_object(ctx, i + 1, scene, depth + 1)
        if word in _CLAUSE_WORDS or word in scene.prepositions:
            return False
        followed_by_of = i + 1 < len(ctx.tokens) and ctx.word(i + 1) == _OF
        if word in scene.nouns and not followed_by_of:
            return True
        seen += 1
    return False
