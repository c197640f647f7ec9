"""The annotation base's one loop: units -> requests -> answers zipped back in order, requests of one
shape asked together, a failed call recorded as a rejection with its reason, a unit the stage
re-asks in parts asked once more after the first round, an outage never a rejection, the hooks
applied."""

from __future__ import annotations

from typing import Any

import pytest

from lenses_data.config import PipelineConfig
from lenses_data.models import types as codes
from lenses_data.models.types import EndpointUnavailable, ModelRequest, ModelResult
from lenses_data.stages.annotation_base import AnnotationStage


class ScriptedClient:
    """Answers each request from a table (key -> raw text, or None for a failed call, with `code`)."""

    def __init__(self, answers: dict[str, str | None], code: str = codes.INVALID_JSON) -> None:
        self.code = code
        self.answers = answers
        self.calls: list[list[str]] = []

    def run_sync(self, requests: list[ModelRequest], parse: Any) -> list[ModelResult]:
        self.calls.append([r.key for r in requests])
        out = []
        for request in requests:
            raw = self.answers[request.key]
            if raw is None:
                out.append(ModelResult(key=request.key, ok=False, error_code=self.code, raw=""))
            else:
                out.append(ModelResult(key=request.key, ok=True, value=parse(raw), raw=raw, model="m"))
        return out

    def close(self) -> None:
        pass


class ShoutStage(AnnotationStage):
    """Two requests per row (a shape each); an answer becomes one row, 'bad' also a rejection."""

    name = "shout"
    output_settings = ()  # nothing in a config changes what it says
    reads = ("image_id",)
    writes = ("image_id", "text")

    def units(self, rows):
        return [(row, shape) for shape in ("upper", "title") for row in rows]

    def build_request(self, unit) -> ModelRequest:
        row, shape = unit
        return ModelRequest(key=f"{row['image_id']}:{shape}", role="generator", text="say it")

    def answer_shape(self, unit):
        return unit[1]

    def parse_answer(self, raw, shape):
        return raw.upper() if shape == "upper" else raw.title()

    def failed_rejections(self, unit, request, result):
        return [{"record_id": request.key, "reason": result.error_code}]

    def to_rows(self, unit, result):
        row = {"image_id": unit[0]["image_id"], "text": result.value}
        notes = [{"record_id": row["image_id"], "reason": "bad"}] if "BAD" in result.value.upper() else []
        return [row], notes


def test_the_loop_zips_answers_back_and_records_failures():
    client = ScriptedClient({"a:upper": "hi", "b:upper": None, "a:title": "bad word", "b:title": "ok"})
    stage = ShoutStage(PipelineConfig(), client=client)  # type: ignore[arg-type]
    kept, rejected = stage.annotate_rows([{"image_id": "a"}, {"image_id": "b"}])
    assert client.calls == [["a:upper", "b:upper"], ["a:title", "b:title"]]  # one call per shape
    assert kept == [
        {"image_id": "a", "text": "HI"},
        {"image_id": "a", "text": "Bad Word"},
        {"image_id": "b", "text": "Ok"},
    ]
    assert rejected == [
        {"record_id": "b:upper", "reason": "invalid_json"},
        {"record_id": "a", "reason": "bad"},
    ]


class SplittingStage(ShoutStage):
    """Asks about pairs of rows; a failed pair is asked again row by row (once)."""

    def units(self, rows):
        return [(tuple(r["image_id"] for r in rows[i : i + 2]), "upper") for i in range(0, len(rows), 2)]

    def build_request(self, unit) -> ModelRequest:
        return ModelRequest(key="+".join(unit[0]), role="generator", text="say it")

    def reask(self, unit, result):
        ids, shape = unit
        return [((i,), shape) for i in ids] if not result.ok and len(ids) > 1 else []

    def to_rows(self, unit, result):
        return [{"ids": unit[0], "text": result.value}], []


def test_a_reasked_unit_is_asked_again_in_parts_once_after_the_first_round():
    client = ScriptedClient({"a+b": None, "c+d": "cd", "a": "x", "b": None})
    stage = SplittingStage(PipelineConfig(), client=client)  # type: ignore[arg-type]
    kept, rejected = stage.annotate_rows([{"image_id": i} for i in "abcd"])
    assert client.calls == [["a+b", "c+d"], ["a", "b"]]  # b is not split again: one re-ask round
    assert kept == [{"ids": ("c", "d"), "text": "CD"}, {"ids": ("a",), "text": "X"}]
    assert rejected == [{"record_id": "b", "reason": "invalid_json"}]


@pytest.mark.parametrize("code", sorted(codes.INFRASTRUCTURE_CODES))
def test_an_outage_result_fails_the_shard_and_is_never_a_rejection(code):
    client = ScriptedClient({"a:upper": "hi", "b:upper": None, "a:title": "x", "b:title": "y"}, code=code)
    stage = ShoutStage(PipelineConfig(), client=client)  # type: ignore[arg-type]
    with pytest.raises(EndpointUnavailable, match=f"stage shout: request b:upper ended in {code}"):
        stage.annotate_rows([{"image_id": "a"}, {"image_id": "b"}])


def test_no_rows_asks_nothing_and_needs_no_client():
    stage = ShoutStage(PipelineConfig())
    assert stage.annotate_rows([]) == ([], [])


def test_model_stages_declare_role_and_template_once():
    from lenses_data.config.roles import ROLE_OF_STAGE
    from lenses_data.stages.registry import MODEL_STAGES, stage_class

    for name in MODEL_STAGES:
        cls = stage_class(name)
        assert issubclass(cls, AnnotationStage)
        assert cls.role == ROLE_OF_STAGE[name]
