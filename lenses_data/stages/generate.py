"""Generate stage: Listing 2 (image-side prompts) and Listing 3 (captions) per selected image.

For every image the filter passed and the split stage assigned, and for every kind and
candidate index c < `annotate.candidates_per_image`, one schema-constrained request (seed =
`annotate.seed + c`; temperature/top_p come from the `generator` role's sampling config). Each
answer item becomes one `LensText` row; a failed answer is one rejection with its raw text.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pandas as pd

from lenses_data import io
from lenses_data.annotation.answers import TEXT_KEY, array_schema, item_parser
from lenses_data.annotation.phrase_bank import default_phrase_bank
from lenses_data.annotation.prompts import TEMPLATE_OF_KIND, get_template
from lenses_data.annotation.rejection_rows import failed_result_rejection, rejection
from lenses_data.config import PipelineConfig
from lenses_data.config.pipeline import GENERATE, spec_of
from lenses_data.config.roles import ROLE_OF_STAGE, role_settings
from lenses_data.frames import member_mask
from lenses_data.ids import text_id
from lenses_data.models.types import AnswerClient, ModelRequest
from lenses_data.schemas import FilterDecision, LensText
from lenses_data.stages._annotate import (
    concat_rejections,
    ingest_paths,
    records_frame,
    rejections_frame,
    split_lookup,
)
from lenses_data.stages.annotation_base import AnnotationStage

STAGE = GENERATE
ROLE = ROLE_OF_STAGE[STAGE]
DUPLICATE_ITEM = "duplicate_item"


def answer_rows(row: dict[str, Any], kind: str, candidate: int, result: Any) -> list[dict[str, Any]]:
    """The items of one answer as LensText rows (idioms from the kind's phrase-bank listing)."""
    template = get_template(TEMPLATE_OF_KIND[kind])
    bank = default_phrase_bank()
    out = []
    for item in result.value:
        text = item[TEXT_KEY[kind]].strip()
        lens = str(item["Category"])
        out.append(
            {
                "text_id": text_id(row["image_id"], kind, lens, candidate, text),
                "image_id": row["image_id"],
                "kind": kind,
                "lens": lens,
                "text": text,
                "focus": item["Focus"].strip(),
                "idioms": [m.idiom for m in bank.find(text, TEMPLATE_OF_KIND[kind])],
                "candidate_index": candidate,
                "prompt_name": template.name,
                "prompt_hash": template.hash,
                "model": result.model,
                "simulated": bool(result.simulated),
                "edited": False,
                "original_text": None,
                "split": row.get("split"),
            }
        )
    return out


def _drop_repeated_ids(texts: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """An answer that repeats an item verbatim would give two rows one id: keep the first."""
    seen: set[str] = set()
    kept, rejected = [], []
    for row in texts:
        if row["text_id"] in seen:
            message = "the same answer repeats this item verbatim"
            rejected.append(
                rejection(STAGE, row["text_id"], DUPLICATE_ITEM, message, image_id=row["image_id"])
            )
            continue
        seen.add(row["text_id"])
        kept.append(row)
    return kept, rejected


class GenerateStage(AnnotationStage):
    """Shard i of filter (passed images that the split stage kept) -> shard i of generate."""

    name = STAGE
    role = ROLE
    template = ""  # one per kind: TEMPLATE_OF_KIND
    # Config paths (and prompt:<template>) that decide this stage's output (lenses_data.stages.settings_guard).
    output_settings = (
        "annotate.kinds",
        "annotate.candidates_per_image",
        "annotate.seed",
        "annotate.max_items_per_answer",
        *role_settings(ROLE, "model", "sampling", "mm_processor_kwargs", "image_placeholder"),
        *(f"prompt:{template}" for template in TEMPLATE_OF_KIND.values()),
    )
    input_stage = spec_of(STAGE).input  # as declared; the registry sets the run's
    reads = ("image_id", "path", "split")
    writes = tuple(LensText.model_fields)

    def __init__(self, config: PipelineConfig, client: AnswerClient | None = None) -> None:
        super().__init__(config, client)
        self._splits: dict[str, str] | None = None

    def input_model(self) -> type[FilterDecision]:
        return FilterDecision

    def load_input(self, run: Path, shard: int) -> pd.DataFrame:
        decisions = super().load_input(run, shard)
        if self._splits is None:
            self._splits = split_lookup(run)
        paths = ingest_paths(run, shard)
        chosen = decisions[
            decisions["passed"].to_numpy(dtype=bool) & member_mask(decisions["image_id"], self._splits)
        ]
        return pd.DataFrame(
            {
                "image_id": chosen["image_id"].tolist(),
                "path": [paths.get(i) for i in chosen["image_id"]],
                "split": [self._splits[i] for i in chosen["image_id"]],
            }
        )

    def transform(self, run: Path, shard: int, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        missing = frame["path"].isna()
        rejected = [
            rejection(STAGE, i, "missing_image_path", "no ingest record for this image", image_id=i)
            for i in frame.loc[missing, "image_id"]
        ]
        records, failures = self.annotate_frame(frame[~missing])
        return records, concat_rejections(rejections_frame(rejected), failures)

    def annotate_frame(self, df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Selected images (image_id, path, split) -> (LensText rows, rejections), asking `self.client`."""
        texts, rejected = self.annotate_rows(df.to_dict(orient="records"))
        return records_frame(texts, LensText), rejections_frame(rejected)

    def units(self, rows: list[dict[str, Any]]) -> list[Any]:
        """One request per image, kind and candidate index (kind outermost: one client call per kind)."""
        settings = self.config.annotate
        return [
            (row, kind, candidate)
            for kind in settings.kinds
            for row in rows
            for candidate in range(settings.candidates_per_image)
        ]

    def build_request(self, unit: tuple[dict[str, Any], str, int]) -> ModelRequest:
        """(image row, kind, candidate index) -> its schema-constrained Listing 2 or 3 request."""
        row, kind, candidate = unit
        settings = self.config.annotate
        return ModelRequest(
            key=f"{STAGE}:{row['image_id']}:{kind}:{candidate}",
            role=ROLE,
            text=get_template(TEMPLATE_OF_KIND[kind]).text,
            image_path=str(row["path"]),
            json_schema=array_schema(kind, 1, settings.max_items_per_answer),
            seed=settings.seed + candidate,
        )

    def answer_shape(self, unit: tuple[dict[str, Any], str, int]) -> Hashable:
        return unit[1]  # the kind: its answers share a parser

    def parse_answer(self, raw: str, shape: Hashable) -> list[dict[str, str]]:
        return item_parser(str(shape), 1, self.config.annotate.max_items_per_answer)(raw)

    def failed_rejections(self, unit: Any, request: ModelRequest, result: Any) -> list[dict[str, Any]]:
        return [failed_result_rejection(STAGE, request.key, result, unit[0]["image_id"])]

    def to_rows(self, unit: Any, result: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        row, kind, candidate = unit
        return answer_rows(row, kind, candidate, result), []

    def after_answers(
        self, kept: list[dict[str, Any]], rejected: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        kept, duplicates = _drop_repeated_ids(kept)
        return kept, rejected + duplicates

    def extra_stats(self, run: Path) -> dict[str, Any]:
        texts = io.read_stage(run, STAGE, LensText, require_complete=False)
        return {
            "texts_by_kind": {k: int(v) for k, v in texts["kind"].value_counts().items()},
            "images": int(texts["image_id"].nunique()) if len(texts) else 0,
        }
