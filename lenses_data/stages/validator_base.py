"""The base of the two validators (validate: Listing 4; visual_validate: Listing 5): the hooks of
`AnnotationStage` for a batch of texts, so they run the one loop of filter and generate
(`annotate_rows`: request -> answer -> `to_rows` or `failed_rejections`).

A unit is a batch: the texts of one image and kind, at most `annotate.validation_batch_size`,
sent as the JSON array the listing describes (with the image when the validator sees it: each row
then carries its image's `path`). A batch whose answer is unusable or reordered is re-asked item
by item (`reask`); a failed call rejects every text of its unit with the client's reason; a usable
answer is applied item by item (`lenses_data.annotation.validation`).
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any, ClassVar

from lenses_data.annotation.answers import array_schema, item_parser, items_json
from lenses_data.annotation.prompts import get_template
from lenses_data.annotation.rejection_rows import failed_result_rejection
from lenses_data.annotation.validation import Validator, apply_answer, make_batches, reask_singly
from lenses_data.ids import stable_hash
from lenses_data.models.types import ModelRequest
from lenses_data.schemas import LensText
from lenses_data.stages.annotation_base import AnnotationStage, Rows


class ValidatorStage(AnnotationStage):
    """A validator: a subclass names its `validator` (stage, listing, whether the image goes too)."""

    validator: ClassVar[Validator]
    writes = tuple(LensText.model_fields)

    def units(self, rows: Rows) -> list[Any]:
        return make_batches(rows, self.config.annotate.validation_batch_size)

    def build_request(self, unit: Rows) -> ModelRequest:
        first, v = unit[0], self.validator
        ids = stable_hash(*(r["text_id"] for r in unit))[:16]
        # Each text is judged on its own (Listings 4-5): the batch is asked in parts, so an
        # earlier answer to each text can stand in for a changed batch (lenses_data.models.compose).
        parts = tuple(self.build_request([row]) for row in unit) if len(unit) > 1 else ()
        return ModelRequest(
            key=f"{v.stage}:{first['image_id']}:{first['kind']}:{len(unit)}:{ids}",
            role=v.role,
            text=get_template(v.template).text,
            image_path=first["path"] if v.with_image else None,
            after_image_text=items_json(first["kind"], unit),
            json_schema=array_schema(first["kind"], len(unit), len(unit)),
            parts=parts,
        )

    def answer_shape(self, unit: Rows) -> Hashable:
        return (unit[0]["kind"], len(unit))  # the parser checks the kind and the item count

    def parse_answer(self, raw: str, shape: Hashable) -> list[dict[str, str]]:
        kind, count = shape  # type: ignore[misc]
        return item_parser(kind, count, count)(raw)  # aligned: exactly one item per input

    def reask(self, unit: Rows, result: Any) -> list[Any]:
        return [[row] for row in unit] if reask_singly(unit, result) else []

    def to_rows(self, unit: Rows, result: Any) -> tuple[Rows, Rows]:
        return apply_answer(unit, result, self.validator, self.config.annotate)

    def failed_rejections(self, unit: Rows, request: ModelRequest, result: Any) -> Rows:
        stage = self.validator.stage
        return [failed_result_rejection(stage, r["text_id"], result, r["image_id"]) for r in unit]

    def extra_stats(self, run: Path) -> dict[str, Any]:
        # Rows keep the generation template's hash; the validator's is recorded here and in the manifest.
        return {
            "prompt_name": self.validator.template,
            "prompt_hash": get_template(self.validator.template).hash,
        }
