"""Filter stage: Listing 1 asks the VLM whether an image supports clearly different non-literal
readings; the answer is a constrained choice, YES or NO.

Every decided image gets a `FilterDecision` row (decision, raw answer, model, prompt hash); a NO
is also a rejection (`filter_no`), and a failed call is a rejection with the client's reason
code and the raw answer. The paper reports about 10% passing; the stage reports its own rate.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pandas as pd

from lenses_data import io
from lenses_data.annotation.answers import FILTER_CHOICES, parse_filter_answer
from lenses_data.annotation.prompts import FILTER_TEMPLATE, get_template
from lenses_data.annotation.rejection_rows import failed_result_rejection, rejection
from lenses_data.config import PipelineConfig
from lenses_data.config.paper import FILTER_PASS_SHARE
from lenses_data.config.pipeline import DEDUPE, FILTER, spec_of
from lenses_data.config.roles import ROLE_OF_STAGE, role_settings
from lenses_data.frames import member_mask
from lenses_data.models.types import AnswerClient, ModelRequest
from lenses_data.schemas import CandidateImage, DedupeRecord, FilterDecision
from lenses_data.stages._annotate import records_frame, rejections_frame
from lenses_data.stages.annotation_base import AnnotationStage

STAGE = FILTER
ROLE = ROLE_OF_STAGE[STAGE]
TEMPLATE = FILTER_TEMPLATE
REJECT_NO = "filter_no"


class FilterStage(AnnotationStage):
    """Shard i of ingest -> shard i of filter; only dedupe survivors when dedupe runs first."""

    name = STAGE
    role = ROLE
    template = TEMPLATE
    # Config paths (and prompt:<template>) that decide this stage's output (lenses_data.stages.settings_guard).
    output_settings = (
        "dedupe_before_filter",
        *role_settings(ROLE, "model", "sampling", "mm_processor_kwargs", "image_placeholder"),
        f"prompt:{TEMPLATE}",
    )
    input_stage = spec_of(STAGE).input  # as declared; the registry sets the run's
    model = FilterDecision
    reads = ("image_id", "path")
    writes = tuple(FilterDecision.model_fields)

    def __init__(self, config: PipelineConfig, client: AnswerClient | None = None) -> None:
        super().__init__(config, client)
        self._kept: set[str] | None = None

    def input_model(self) -> type[CandidateImage]:
        return CandidateImage

    def kept_ids(self, run: Path) -> set[str] | None:
        """Images that survived dedupe, or None when the filter runs before dedupe."""
        if not self.config.dedupe_before_filter:
            return None
        if self._kept is None:
            dedupe = io.read_stage(run, DEDUPE, DedupeRecord)
            self._kept = set(dedupe.loc[dedupe["kept"], "image_id"])
        return self._kept

    def load_input(self, run: Path, shard: int) -> pd.DataFrame:
        frame = super().load_input(run, shard)
        kept = self.kept_ids(run)
        return frame if kept is None else frame[member_mask(frame["image_id"], kept)].reset_index(drop=True)

    def transform(self, run: Path, shard: int, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        return self.annotate_frame(frame[list(self.reads)])

    def annotate_frame(self, df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Candidate images (image_id, path) -> (FilterDecision rows, rejections), asking `self.client`."""
        decisions, rejected = self.annotate_rows(df.to_dict(orient="records"))
        return records_frame(decisions, FilterDecision), rejections_frame(rejected)

    def build_request(self, unit: dict[str, Any]) -> ModelRequest:
        """One candidate image (image_id, path) -> its Listing 1 request, a constrained YES/NO."""
        return ModelRequest(
            key=f"{STAGE}:{unit['image_id']}",
            role=ROLE,
            text=get_template(TEMPLATE).text,
            image_path=str(unit["path"]),
            choice=list(FILTER_CHOICES),
        )

    def parse_answer(self, raw: str, shape: Hashable) -> str:
        return parse_filter_answer(raw)

    def failed_rejections(
        self, unit: dict[str, Any], request: ModelRequest, result: Any
    ) -> list[dict[str, Any]]:
        return [failed_result_rejection(STAGE, unit["image_id"], result, unit["image_id"])]

    def to_rows(self, unit: dict[str, Any], result: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        image_id, decision = unit["image_id"], result.value
        row = {
            "image_id": image_id,
            "decision": decision,
            "passed": decision == "YES",
            "raw": result.raw or "",
            "model": result.model,
            "prompt_hash": get_template(TEMPLATE).hash,
            "simulated": bool(result.simulated),
        }
        if decision == "YES":
            return [row], []
        message = "Listing 1 answered NO: no clearly different non-literal readings"
        return [row], [rejection(STAGE, image_id, REJECT_NO, message, image_id=image_id, raw=result.raw)]

    def extra_stats(self, run: Path) -> dict[str, Any]:
        decisions = io.read_stage(run, STAGE, FilterDecision, require_complete=False)
        decided = len(decisions)
        passed = int(decisions["passed"].sum()) if decided else 0
        return {
            # The funnel counts images that go on; every decision, YES and NO, stays in RUN/filter.
            "records_out": passed,
            "decided": decided,
            "passed": passed,
            "pass_rate": round(passed / decided, 4) if decided else None,
            "paper_pass_rate": FILTER_PASS_SHARE,
        }
