"""The annotation base's one loop: units -> requests -> answers zipped back in order, requests of one
shape asked together, a failed call recorded as a rejection with its reason, the hooks applied."""

from __future__ import annotations

from typing import Any

from lenses_data.config import PipelineConfig
from lenses_data.models.types import ModelRequest, ModelResult
from lenses_data.stages.annotation_base import AnnotationStage


class ScriptedClient:
    """Answers each request from a table (key -> raw text, or None for a failed call)."""

    def __init__(self, answers: dict[str, str | None]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def run_sync(self, requests: list[ModelRequest], parse: Any) -> list[ModelResult]:
        self.calls.append([r.key for r in requests])
        out = []
        for request in requests:
            raw = self.answers[request.key]
            if raw is None:
                out.append(ModelResult(key=request.key, ok=False, error_code="timeout", raw=""))
            else:
                out.append(ModelResult(key=request.key, ok=True, value=parse(raw), raw=raw, model="m"))
        return out

    def close(self) -> None:
        pass


class ShoutStage(AnnotationStage):
    """Two requests per row (a shape each); an answer becomes one row, 'bad' also a rejection."""

    name = "shout"

    def units(self, rows):
        return [(row, shape) for shape in ("upper", "title") for row in rows]

    def build_request(self, unit) -> ModelRequest:
        row, shape = unit
        return ModelRequest(key=f"{row['image_id']}:{shape}", role="generator", text="say it")

    def answer_shape(self, unit):
        return unit[1]

    def parse_answer(self, raw, shape):
        return raw.upper() if shape == "upper" else raw.title()

    def failed_rejection(self, unit, request, result):
        return {"record_id": request.key, "reason": result.error_code}

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
    assert rejected == [{"record_id": "b:upper", "reason": "timeout"}, {"record_id": "a", "reason": "bad"}]


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
