"""Validation of generated texts, shared by the validate (Listing 4) and visual-validate (Listing 5)
stages: batching per image and kind, when a batch is re-asked item by item, and per item of an
aligned answer the discard, fixed-field and edit rules with the re-check of an edited text (see
`lenses_data.stages.validate` for the rules in words). A `Validator` names the listing, role and
stage of one of the two. The requests, and the loop that asks them, are the stages'
(`lenses_data.stages.validator_base.ValidatorStage`, on `AnnotationStage.annotate_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lenses_data.annotation import rules
from lenses_data.annotation.answers import TEXT_KEY
from lenses_data.annotation.phrase_bank import default_phrase_bank
from lenses_data.annotation.prompts import TEMPLATE_OF_KIND
from lenses_data.annotation.rejection_rows import rejection
from lenses_data.annotation.text_checks import per_text_violations
from lenses_data.config.annotate import AnnotateConfig
from lenses_data.config.pipeline import VALIDATE, VISUAL_VALIDATE
from lenses_data.config.roles import ROLE_OF_STAGE
from lenses_data.models import types as codes

VALIDATOR_DISCARDED = "validator_discarded"
FIXED_FIELD_CHANGED = "fixed_field_changed"
# Failures a smaller request cannot cure: do not fall back to item-by-item for these. (The
# infrastructure codes among them never reach a stage as an answer: the client raises.)
_NOT_CURED_BY_SMALLER = {
    codes.TRANSPORT_ERROR,
    codes.TIMEOUT,
    codes.RATE_LIMITED,
    codes.SERVER_ERROR,
    codes.CLIENT_ERROR,
    codes.BAD_INPUT,
}


@dataclass(frozen=True)
class Validator:
    """Which stage and listing; whether the image goes with the texts. The role is the stage's."""

    stage: str
    template: str
    with_image: bool

    @property
    def role(self) -> str:
        return ROLE_OF_STAGE[self.stage]


TEXT_VALIDATOR = Validator(VALIDATE, rules.TEXT_VALIDATION, with_image=False)
VISUAL_VALIDATOR = Validator(VISUAL_VALIDATE, rules.VISUAL_VALIDATION, with_image=True)


def make_batches(rows: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    """Rows grouped per (image, kind) in input order, chunked to at most `size` items."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["image_id"], row["kind"]), []).append(row)
    return [group[i : i + size] for group in groups.values() for i in range(0, len(group), size)]


def _same(a: str, b: str) -> bool:
    return " ".join(str(a).split()).casefold() == " ".join(str(b).split()).casefold()


def apply_item(
    row: dict[str, Any], item: dict[str, str], raw: str | None, v: Validator, settings: AnnotateConfig
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """One validator answer item applied to its input row -> (kept row or None, rejections)."""

    def reject(reason: str, message: str) -> dict[str, Any]:
        return rejection(v.stage, row["text_id"], reason, message, image_id=row["image_id"], raw=raw)

    text = item[TEXT_KEY[row["kind"]]].strip()
    if not text:
        return None, [reject(VALIDATOR_DISCARDED, "the validator discarded the text (empty string)")]
    fixed = {"Focus": row["focus"], "Category": str(row["lens"])}
    changed = [f"{f} {old!r} -> {item[f]!r}" for f, old in fixed.items() if not _same(item[f], old)]
    if changed:
        what = ", ".join(changed)
        if settings.on_fixed_field_change == "discard":
            return None, [reject(FIXED_FIELD_CHANGED, f"validator changed {what}; item discarded")]
        return row, [
            reject(FIXED_FIELD_CHANGED, f"validator changed {what}; answer not applied, original kept")
        ]
    original = row.get("original_text") or row["text"]
    updated = {**row, "text": text, "original_text": original, "edited": text != original}
    if text == row["text"]:
        return updated, []
    rejecting = recheck(row, updated, v, settings)
    if rejecting:
        return None, [reject(x.reason, f"after the validator's edit: {x.message}") for x in rejecting]
    return updated, []


def recheck(
    row: dict[str, Any], updated: dict[str, Any], v: Validator, settings: AnnotateConfig
) -> list[rules.Violation]:
    """The per-text rules on an edited text: sets its idioms and flags, returns what rejects it.

    Which violations reject is `rules.rejects` with the validator as the editor, so an edit that
    Listing 5 allows (a removed fragment or idiom) is never undone here."""
    bank, listing = default_phrase_bank(), TEMPLATE_OF_KIND[row["kind"]]
    updated["idioms"] = [m.idiom for m in bank.find(updated["text"], listing)]
    violations = per_text_violations(updated, settings, bank)
    added = set(updated["idioms"]) - {m.idiom for m in bank.find(row["text"], listing)}
    if v.template == rules.VISUAL_VALIDATION and added:
        message = f"Listing 5 says not to add idioms; the edit added {', '.join(sorted(added))}"
        violations.append(rules.Violation(rules.VALIDATOR_ADDED_IDIOM, message))
    if not settings.recheck_rules_after_validation:
        updated["flags"] = [x.reason for x in violations]
        return []
    rejecting, flags = rules.split_violations(
        violations, row["kind"], settings.idiom_rules, v.template, word_limits=settings.word_limits
    )
    updated["flags"] = [x.reason for x in flags]
    return rejecting


def reask_singly(batch: list[dict[str, Any]], result: Any) -> bool:
    """Whether a batch's answer is better asked again item by item: right items in the wrong order,
    or a failed answer that a smaller request may cure (never a refused or unsendable request)."""
    if len(batch) < 2:
        return False
    if result.ok:
        return misordered(batch, result.value)
    return result.error_code not in _NOT_CURED_BY_SMALLER


def misordered(batch: list[dict[str, Any]], items: list[dict[str, str]]) -> bool:
    """The answer's (Focus, Category) pairs are the inputs' in another order."""

    def pairs(values: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [(" ".join(f.split()).casefold(), c) for f, c in values]

    want = pairs([(r["focus"], str(r["lens"])) for r in batch])
    got = pairs([(i["Focus"], str(i["Category"])) for i in items])
    return want != got and sorted(want) == sorted(got)


def apply_answer(
    batch: list[dict[str, Any]], result: Any, v: Validator, settings: AnnotateConfig
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A usable, aligned answer about a batch -> (kept rows, rejections), item by item."""
    kept: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    for row, item in zip(batch, result.value, strict=True):
        out, notes = apply_item(row, item, result.raw, v, settings)
        rejected.extend(notes)
        if out is not None:
            kept.append(out)
    return kept, rejected
