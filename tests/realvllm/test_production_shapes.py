"""configs/production.yaml's request shapes against real vLLM 0.32 (the CPU build) and the tiny models.

The models section is production's as a user has it (image placeholder, the filter's one-tile
processor setting, sampling, max_tokens, the constraint fields, the key variable); only the model
names and base URLs are replaced by the session's tiny servers. Each role's real requests (built by
the stages' own request builders, sent by the pipeline's client) must come back as the server was
asked: the choice constraint holds, the JSON follows its schema and is compact, the one-tile setting
lowers the prompt's tokens, and the seeded generator answers the same request the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from lenses_data.config import PipelineConfig, load_config
from lenses_data.config.models import ModelsConfig
from lenses_data.models import probe
from lenses_data.models.client import ModelClient
from lenses_data.models.types import ModelRequest, ModelResult
from lenses_data.stages.filter import FilterStage
from lenses_data.stages.generate import GenerateStage
from lenses_data.stages.validate import ValidateStage
from lenses_data.stages.visual_validate import VisualValidateStage
from tests.realvllm.vllm_server import VllmServer

pytestmark = [pytest.mark.slow, pytest.mark.realvllm, pytest.mark.timeout(2400)]
PRODUCTION = Path(__file__).resolve().parents[2] / "configs" / "production.yaml"
INTERNVL_ROLES = ("filter", "generator", "visual_validator")


def production_models(internvl: VllmServer, validator: VllmServer) -> ModelsConfig:
    """production.yaml's models section with only the model names and base URLs replaced."""
    section = yaml.safe_load(PRODUCTION.read_text())["models"]
    for role in (*INTERNVL_ROLES, "validator"):
        server = internvl if role in INTERNVL_ROLES else validator
        section[role] = {**section[role], "model": server.served_model_name, "base_urls": [server.base_url]}
    return ModelsConfig.model_validate(section)


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two real 3:2 photographs (sklearn's), which InternVL tiles into several patches."""
    import sklearn.datasets

    folder = tmp_path_factory.mktemp("photos")
    images = Path(sklearn.datasets.__file__).parent / "images"
    paths = []
    for name in ("china", "flower"):
        paths.append(folder / f"{name}.jpg")
        paths[-1].write_bytes((images / f"{name}.jpg").read_bytes())
    return paths


@pytest.fixture
def models(vllm_internvl, vllm_validator, monkeypatch: pytest.MonkeyPatch) -> ModelsConfig:
    # Production names a key variable for every role; the test servers require none and accept any.
    monkeypatch.setenv("LENSES_VLLM_API_KEY", "any-key")
    return production_models(vllm_internvl, vllm_validator)


def _send(models: ModelsConfig, requests: list[ModelRequest], parse=lambda raw: raw) -> list[ModelResult]:
    results = ModelClient(models).run_sync(requests, parse)
    failed = [f"{r.key}: {r.error_code} {r.error_message}" for r in results if not r.ok]
    assert not failed, failed
    return results


def _whitespace_between_tokens(raw: str) -> int:
    """Whitespace characters outside JSON strings (compact JSON has none)."""
    count, inside, escaped = 0, False, False
    for char in raw.strip():
        if inside:
            inside = escaped or char != '"'
            escaped = not escaped and char == "\\"
        elif char == '"':
            inside = True
        elif char.isspace():
            count += 1
    return count


def test_lenses_check_passes_every_role_of_production_on_vllm_032(models: ModelsConfig) -> None:
    reports = probe.check_roles(models, list(probe.ROLE_NEEDS))
    for report in reports:
        details = {c.capability: f"{c.status} {c.detail}" for c in report.checks}
        assert report.ok and {c.status for c in report.checks} == {"ok"}, details
        assert report.server is not None and report.server.version.startswith("0.32")
    filter_report = reports[0]
    assert filter_report.choice_style == "structured_outputs" and not filter_report.tolerant_choice
    assert "take effect" in {c.capability: c.detail for c in filter_report.checks}["image"]


def test_the_filter_choice_and_one_tile_setting_are_honoured(
    models: ModelsConfig, photos: list[Path]
) -> None:
    rows = [{"image_id": path.stem, "path": str(path)} for path in photos]
    requests = [FilterStage(PipelineConfig()).build_request(row) for row in rows]
    one_tile = _send(models, requests)
    assert all(result.raw in ("YES", "NO") for result in one_tile), [r.raw for r in one_tile]
    # The same requests at the model's full tiling: production's {max_patches: 1} must cost less.
    tiled = models.filter.model_copy(update={"mm_processor_kwargs": {}})
    full = _send(models.model_copy(update={"filter": tiled}), requests)
    for small, large in zip(one_tile, full, strict=True):
        assert small.usage["prompt_tokens"] < large.usage["prompt_tokens"], (small.usage, large.usage)


def _generator_requests(photos: list[Path]) -> list[ModelRequest]:
    generate = GenerateStage(load_config(PRODUCTION, environ={}))
    rows = [{"image_id": path.stem, "path": str(path)} for path in photos]
    return [generate.build_request((row, "caption", 0)) for row in rows]


def _assert_schema_answers(results: list[ModelResult], requests: list[ModelRequest], max_tokens: int) -> None:
    for result, request in zip(results, requests, strict=True):
        jsonschema.validate(json.loads(result.raw), request.json_schema)
        assert _whitespace_between_tokens(result.raw) == 0, result.raw  # compact on 0.32
        assert 0 < result.usage["completion_tokens"] <= max_tokens


def test_the_generator_answers_production_requests_in_schema_and_as_seeded(
    models: ModelsConfig, photos: list[Path]
) -> None:
    requests = _generator_requests(photos)
    assert all(r.seed is not None for r in requests)  # production's generator requests are seeded
    first = _send(models, requests)
    _assert_schema_answers(first, requests, models.generator.sampling.max_tokens)
    # Sampled at production's temperature 0.7 and top_p 0.95, the seed makes an answer repeatable
    # (there is no journal here to replay it).
    again = _send(models, requests[:1])
    assert again[0].raw == first[0].raw


def _validation_batch(image: Path, kind: str = "caption") -> list[dict[str, Any]]:
    texts = [
        ("Literal", "the river", "A boat drifts on the quiet river."),
        ("Emotional", "the light", "Calm"),
    ]
    return [
        {"text_id": f"{image.stem}-{i}", "image_id": image.stem, "kind": kind, "lens": lens, "focus": focus}
        | {"text": text}
        for i, (lens, focus, text) in enumerate(texts)
    ]


def test_both_validators_answer_production_requests_in_schema(
    models: ModelsConfig, photos: list[Path]
) -> None:
    batch = _validation_batch(photos[0])
    requests = [
        ValidateStage(PipelineConfig()).build_request(batch),
        VisualValidateStage(PipelineConfig()).build_request([{**r, "path": str(photos[0])} for r in batch]),
    ]
    assert requests[1].image_path and requests[0].image_path is None
    results = _send(models, requests)
    _assert_schema_answers(results, requests, models.validator.sampling.max_tokens)
    for result in results:  # one answer item per input text, as the schema demands
        assert len(json.loads(result.raw)) == len(batch)
