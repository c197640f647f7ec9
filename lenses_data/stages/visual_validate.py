"""Visual-validate stage: Listing 5 (InternVL3.5-38B) checks test-split texts against the image.

The image plus the JSON array of that image's surviving texts (per kind, batched like the text
validator) are sent; the same alignment, discard and fixed-field rules apply (see
lenses_data.stages.validate; the shared code is lenses_data.stages.validator_base and
lenses_data.annotation.validation). Listing 5 lets
the validator "remove or soften" ungrounded fragments and "remove or simplify" idioms, so the re-check never rejects such an edit for the word limits or
the phrase-bank rules; it flags them (and an added idiom, `validator_added_idiom`) instead. Texts of other splits pass through unchanged, so this stage's
output is the final text set of every split.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from lenses_data.annotation.rejection_rows import rejection
from lenses_data.annotation.validation import VISUAL_VALIDATOR
from lenses_data.config.pipeline import VISUAL_VALIDATE, spec_of
from lenses_data.config.roles import role_settings
from lenses_data.schemas import LensText
from lenses_data.stages._annotate import ingest_paths, lens_text_rows, records_frame, rejections_frame
from lenses_data.stages.validator_base import ValidatorStage

STAGE = VISUAL_VALIDATE


class VisualValidateStage(ValidatorStage):
    name = STAGE
    validator = VISUAL_VALIDATOR
    role = VISUAL_VALIDATOR.role
    template = VISUAL_VALIDATOR.template
    # Config paths (and prompt:<template>) that decide this stage's output (lenses_data.stages.settings_guard).
    output_settings = (
        "annotate",
        *role_settings(
            VISUAL_VALIDATOR.role, "model", "sampling", "mm_processor_kwargs", "image_placeholder"
        ),
        f"prompt:{VISUAL_VALIDATOR.template}",
    )
    input_stage = spec_of(STAGE).input  # as declared; the registry sets the run's
    reads = ("text_id", "image_id", "kind", "lens", "text", "focus", "split", "original_text")

    def transform(self, run: Path, shard: int, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        return self.annotate_frame(frame, ingest_paths(run, shard))

    def annotate_frame(
        self, df: pd.DataFrame, paths: dict[str, str] | None = None
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Validated LensText rows (+ image paths) -> (final rows, rejections); only the configured
        splits (default: test) are sent to the model (`self.client`), each text with its image's path."""
        settings = self.config.annotate
        paths = paths or {}
        rows = lens_text_rows(df)
        checked = [r for r in rows if r.get("split") in settings.visual_validation_splits]
        passthrough = [r for r in rows if r.get("split") not in settings.visual_validation_splits]
        rejected = [
            rejection(
                STAGE,
                r["text_id"],
                "missing_image_path",
                "no image file for this text",
                image_id=r["image_id"],
            )
            for r in checked
            if not paths.get(r["image_id"])
        ]
        # The path goes with each row to its request; `records_frame` keeps LensText's columns only.
        sendable = [{**r, "path": paths[r["image_id"]]} for r in checked if paths.get(r["image_id"])]
        kept, failures = self.annotate_rows(sendable)
        return records_frame(passthrough + kept, LensText), rejections_frame(rejected + failures)
