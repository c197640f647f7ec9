"""Validate stage: Listing 4 (Qwen2.5-32B-Instruct, text only) edits, keeps or discards texts.

Texts are batched per image and kind (at most `annotate.validation_batch_size` per request) and
sent as the JSON array the listing describes. The answer must align with its inputs: same count
(enforced by the schema and the parser, `count_mismatch` otherwise) and order (an answer whose
Focus/Category pairs are the inputs' in another order is not applied). A batch whose answer stays
unusable after the client's re-asks, or comes back reordered, is validated item by item. Per item: an empty
text is a discard; an answer that changes Focus or Category is a discard too (`fixed_field_changed`;
Listings 4-5 fix both fields and discard a mismatch; `annotate.on_fixed_field_change: keep_original`
keeps the original text instead); otherwise the (possibly edited) text is kept, with the original
text and an `edited` flag, and an edit is re-checked against the per-text rules: damage rejects it,
the rest is recorded in its `flags`, and an edit Listing 5 allows is never undone (`rules.rejects`).
The machinery, shared with visual validation, is `lenses_data.annotation.validation`.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pandas as pd

from lenses_data.annotation import validation
from lenses_data.annotation.prompts import get_template
from lenses_data.annotation.validation import TEXT_VALIDATOR, validate_rows
from lenses_data.config.pipeline import VALIDATE, spec_of
from lenses_data.config.roles import role_settings
from lenses_data.models.types import ModelRequest
from lenses_data.schemas import LensText
from lenses_data.stages._annotate import lens_text_rows, records_frame, rejections_frame
from lenses_data.stages.annotation_base import AnnotationStage

STAGE = VALIDATE


class ValidateStage(AnnotationStage):
    name = STAGE
    role = TEXT_VALIDATOR.role
    template = TEXT_VALIDATOR.template
    # Config paths (and prompt:<template>) that decide this stage's output (lenses_data.stages.settings_guard).
    output_settings = (
        "annotate",
        *role_settings(TEXT_VALIDATOR.role, "model", "sampling"),
        f"prompt:{TEXT_VALIDATOR.template}",
    )
    input_stage = spec_of(STAGE).input  # as declared; the registry sets the run's
    reads = ("text_id", "image_id", "kind", "lens", "text", "focus", "original_text")
    writes = tuple(LensText.model_fields)

    def extra_stats(self, run: Path) -> dict[str, Any]:
        # Rows keep the generation template's hash; the validator's is recorded here and in the manifest.
        return {
            "prompt_name": TEXT_VALIDATOR.template,
            "prompt_hash": get_template(TEXT_VALIDATOR.template).hash,
        }

    def transform(self, run: Path, shard: int, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        return self.annotate_frame(frame)

    def annotate_frame(self, df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Rule-checked LensText rows -> (validated rows, rejections), asking `self.client`."""
        kept, rejected = self.annotate_rows(lens_text_rows(df))
        return records_frame(kept, LensText), rejections_frame(rejected)

    def annotate_rows(self, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Batched per image and kind, a bad batch re-asked item by item (the validators' loop)."""
        return validate_rows(rows, self.ask_units, self.config.annotate, TEXT_VALIDATOR)

    def build_request(self, unit: list[dict[str, Any]]) -> ModelRequest:
        return validation.build_request(unit, TEXT_VALIDATOR)

    def answer_shape(self, unit: list[dict[str, Any]]) -> Hashable:
        return (unit[0]["kind"], len(unit))  # the parser checks the kind and the item count

    def parse_answer(self, raw: str, shape: Hashable) -> list[dict[str, str]]:
        kind, count = shape  # type: ignore[misc]
        return validation.parse_answer(raw, kind, count)
