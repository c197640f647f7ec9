"""One representative request per model role and kind, built by the stages' own `build_request`,
so `lenses check` can measure what a role's real requests cost in prompt tokens (its instructions,
the items, the image) and compare that plus `max_tokens` with the context the server serves.

The rows are made up but shaped as a build's are: the validators get one batch per kind of as many
texts as Table 1 has per image (6.93, so 7; capped by `annotate.validation_batch_size`), each as
long as its listing allows. Image requests carry a stand-in path: the probe sends its own image.
"""

from __future__ import annotations

import math
from typing import Any

from lenses_data.config import PipelineConfig
from lenses_data.config.annotate import LISTING_WORDS
from lenses_data.config.paper import table1_density
from lenses_data.config.roles import ROLES
from lenses_data.models.types import ModelRequest
from lenses_data.schemas import LENS_NAMES
from lenses_data.stages.filter import FilterStage
from lenses_data.stages.generate import GenerateStage
from lenses_data.stages.validate import ValidateStage
from lenses_data.stages.visual_validate import VisualValidateStage

IMAGE_STAND_IN = "lenses-check-image"  # replaced by the probe's own image


def texts_per_batch(config: PipelineConfig) -> int:
    """Texts in a representative validator request: Table 1's texts per image, rounded up."""
    return min(math.ceil(table1_density()), config.annotate.validation_batch_size)


def _rows(kind: str, count: int) -> list[dict[str, Any]]:
    words = LISTING_WORDS[kind][1]  # as long as the listing allows
    text = " ".join(["lighthouse"] * (words - 1) + ["dusk."])
    return [
        {
            "text_id": f"check-{kind}-{i}",
            "image_id": "check",
            "kind": kind,
            "lens": LENS_NAMES[i % len(LENS_NAMES)],
            "text": text,
            "focus": "the lighthouse beam at dusk",
        }
        for i in range(count)
    ]


def representative_requests(config: PipelineConfig) -> dict[str, list[tuple[str, ModelRequest]]]:
    """Role -> (what the request is, the request) for each kind of request the role serves."""
    row = {"image_id": "check", "path": IMAGE_STAND_IN}
    batch, kinds = texts_per_batch(config), config.annotate.kinds  # only the kinds the build makes
    # The stages' own builders, built without a client: they make requests, they ask nothing.
    generate, validate, visual = GenerateStage(config), ValidateStage(config), VisualValidateStage(config)
    made = [("filter request", FilterStage(config).build_request(row))]
    made += [(f"{kind} generation", generate.build_request((row, kind, 0))) for kind in kinds]
    for kind in kinds:
        rows = _rows(kind, batch)
        label = f"{kind} batch of {batch} texts"
        made.append((label, validate.build_request(rows)))
        made.append((label, visual.build_request([{**r, "path": IMAGE_STAND_IN} for r in rows])))
    out: dict[str, list[tuple[str, ModelRequest]]] = {role: [] for role in ROLES}
    for label, request in made:  # grouped by the role each request names
        out[request.role].append((label, request))
    return out
