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
The machinery, shared with visual validation, is `lenses_data.stages.validator_base` (the requests,
on the model stages' one loop) and `lenses_data.annotation.validation` (the per-item rules).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from lenses_data.annotation.validation import TEXT_VALIDATOR
from lenses_data.config.pipeline import VALIDATE, spec_of
from lenses_data.config.roles import role_settings
from lenses_data.schemas import LensText
from lenses_data.stages._annotate import lens_text_rows, records_frame, rejections_frame
from lenses_data.stages.validator_base import ValidatorStage

STAGE = VALIDATE


class ValidateStage(ValidatorStage):
    name = STAGE
    validator = TEXT_VALIDATOR
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

    def transform(self, run: Path, shard: int, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        return self.annotate_frame(frame)

    def annotate_frame(self, df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Rule-checked LensText rows -> (validated rows, rejections), asking `self.client`."""
        kept, rejected = self.annotate_rows(lens_text_rows(df))
        return records_frame(kept, LensText), rejections_frame(rejected)
