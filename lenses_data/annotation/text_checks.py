"""The per-text rule checks and the near-duplicate rejections over generated texts: the rules stage
applies them to every generated text, the validators re-check an edited text with the same call.

The rules themselves (word limits, damage, phrase-bank idioms, n-gram overlap) are in `rules`."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from lenses_data.annotation import rules
from lenses_data.annotation.phrase_bank import PhraseBank
from lenses_data.annotation.rejection_rows import rejection
from lenses_data.config.annotate import AnnotateConfig
from lenses_data.config.pipeline import RULES


def per_text_violations(
    row: dict[str, Any], settings: AnnotateConfig, bank: PhraseBank
) -> list[rules.Violation]:
    limits = settings.words(row["kind"])
    return rules.text_violations(
        row["text"],
        row["focus"],
        str(row["lens"]),
        row["kind"],
        low=limits.min,
        high=limits.max,
        self_references=settings.self_references,
        bank=bank,
        required=settings.idiom_required_lenses,
        forbidden=settings.idiom_forbidden_lenses,
    )


def duplicate_rejections(
    rows: list[dict[str, Any]], settings: AnnotateConfig, stage: str = RULES
) -> list[dict[str, Any]]:
    """Near duplicates within each (image, kind), by n-gram overlap, then optionally embeddings."""
    groups: dict[tuple[str, str], list[rules.TextRef]] = defaultdict(list)
    image_of = {}
    for row in rows:
        groups[(row["image_id"], row["kind"])].append(
            rules.TextRef(row["text_id"], str(row["lens"]), row["text"])
        )
        image_of[row["text_id"]] = row["image_id"]
    out = []
    survivors = []
    for refs in groups.values():
        dups = rules.near_duplicates(refs, settings.ngram_n, settings.max_ngram_similarity)
        for text_id, (kept, similarity) in dups.items():
            message = f"{similarity:.2f} content {settings.ngram_n}-gram overlap with {kept}"
            out.append(rejection(stage, text_id, rules.NEAR_DUPLICATE, message, image_id=image_of[text_id]))
        survivors.append([r for r in refs if r.text_id not in dups])
    if settings.embedding_dedupe:
        from lenses_data.annotation.embeddings import embedding_duplicates

        found = embedding_duplicates(survivors, settings.embedding_model, settings.max_embedding_similarity)
        for text_id, (kept, similarity) in found.items():
            message = f"sentence-embedding cosine {similarity:.3f} with {kept}"
            out.append(
                rejection(stage, text_id, rules.EMBEDDING_DUPLICATE, message, image_id=image_of[text_id])
            )
    return out
