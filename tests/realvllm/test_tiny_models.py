"""The tiny-model kit on real vLLM: the answers of each role parse with the project's parsers, and
InternVL's per-request tile limit reaches the processor."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from lenses_data.annotation.answers import (
    FILTER_CHOICES,
    array_schema,
    items_json,
    parse_filter_answer,
    parse_items,
)
from lenses_data.annotation.prompts import get_template
from tests.realvllm.vllm_server import VllmServer

pytestmark = [pytest.mark.slow, pytest.mark.realvllm]

CAPTIONS = [
    {"text": "An astronaut in a white suit smiles beside a flag.", "focus": "astronaut", "lens": "Literal"},
    {
        "text": "Her calm gaze carries the weight of a long journey.",
        "focus": "calm gaze",
        "lens": "Emotional",
    },
]


def jpeg_uri(pixels: np.ndarray) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=85)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


@pytest.fixture(scope="module")
def astronaut() -> np.ndarray:
    import skimage.data

    return skimage.data.astronaut()


def chat(server: VllmServer, content: str | list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    body = {
        "model": server.served_model_name,
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        "max_tokens": 512,
        **fields,
    }
    response = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()


def json_schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


def image_parts(instructions: str, uri: str, items: str | None = None) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": instructions}]
    parts.append({"type": "image_url", "image_url": {"url": uri}})
    return parts + ([{"type": "text", "text": items}] if items else [])


def test_validator_answers_listing_4_with_parseable_json(vllm_validator: VllmServer) -> None:
    items = items_json("caption", CAPTIONS)
    content = get_template("text_validation").text + "\n\n" + items
    schema = array_schema("caption", len(CAPTIONS), len(CAPTIONS))
    answer = chat(vllm_validator, content, response_format=json_schema_format(schema))
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    parsed = parse_items(choice["message"]["content"], "caption", len(CAPTIONS), len(CAPTIONS))
    assert len(parsed) == len(CAPTIONS)


def test_internvl_filter_answers_yes_or_no_for_a_photograph(
    vllm_internvl: VllmServer, astronaut: np.ndarray
) -> None:
    parts = image_parts(get_template("filter").text, jpeg_uri(astronaut))
    answer = chat(vllm_internvl, parts, structured_outputs={"choice": list(FILTER_CHOICES)}, max_tokens=4)
    content = answer["choices"][0]["message"]["content"]
    assert content in FILTER_CHOICES
    assert parse_filter_answer(content) == content


def test_internvl_generator_and_visual_validator_answers_parse(
    vllm_internvl: VllmServer, astronaut: np.ndarray
) -> None:
    uri = jpeg_uri(astronaut)
    schema = json_schema_format(array_schema("caption", 1, 40))
    # The generator role's sampling (configs/production.yaml). Greedy, the tiny model repeats items
    # until max_tokens (the schema allows 40); sampled, it closes the array after a few.
    sampling = {"temperature": 0.7, "top_p": 0.95, "seed": 0, "max_tokens": 1024}
    parts = image_parts(get_template("captions").text, uri)
    generated = chat(vllm_internvl, parts, response_format=schema, **sampling)
    assert generated["choices"][0]["finish_reason"] == "stop", generated
    assert parse_items(generated["choices"][0]["message"]["content"], "caption", 1, 40)

    items = items_json("caption", CAPTIONS)
    schema = json_schema_format(array_schema("caption", len(CAPTIONS), len(CAPTIONS)))
    parts = image_parts(get_template("visual_validation").text, uri, items)
    checked = chat(vllm_internvl, parts, response_format=schema)
    assert checked["choices"][0]["finish_reason"] == "stop", checked
    assert len(parse_items(checked["choices"][0]["message"]["content"], "caption", 2, 2)) == 2


def test_one_tile_per_request_lowers_the_prompt_tokens_of_a_wide_image(
    vllm_internvl: VllmServer, astronaut: np.ndarray
) -> None:
    from tests.realvllm.tiny_models import TOKENS_PER_TILE

    wide = np.concatenate([astronaut, astronaut, astronaut], axis=1)  # 1536 x 512
    parts = image_parts(get_template("filter").text, jpeg_uri(wide))
    fields: dict[str, Any] = {"structured_outputs": {"choice": list(FILTER_CHOICES)}, "max_tokens": 2}
    tiled = chat(vllm_internvl, parts, **fields)["usage"]["prompt_tokens"]
    one_tile = chat(vllm_internvl, parts, mm_processor_kwargs={"max_patches": 1}, **fields)["usage"]
    assert one_tile["prompt_tokens"] < tiled
    assert (tiled - one_tile["prompt_tokens"]) % TOKENS_PER_TILE == 0


def test_servers_report_their_model(vllm_validator: VllmServer, tiny_validator_model: Path) -> None:
    models = httpx.get(f"{vllm_validator.base_url}/models", timeout=30).json()["data"]
    assert [m["id"] for m in models] == [vllm_validator.served_model_name]
    assert models[0]["root"] == str(tiny_validator_model)
