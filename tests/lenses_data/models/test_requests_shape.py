"""What reaches the server, read back from the simulator: the filter asks for one tile, generation
and visual validation keep full tiling, every request starts with its static instructions (the
shared prefix vLLM's prefix cache serves) also after vLLM renders it for InternVL's chat template,
and the image bytes arrive intact."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image
from skimage import data as skdata

from lenses_data.annotation.prompts import get_template
from lenses_data.annotation.validation import VISUAL_VALIDATOR
from lenses_data.config import PipelineConfig, load_config
from lenses_data.config.models import (
    INTERNVL_HF_IMAGE_PLACEHOLDER,
    INTERNVL_HF_ONE_TILE,
    INTERNVL_IMAGE_PLACEHOLDER,
    ModelsConfig,
)
from lenses_data.models.client import ModelClient, ModelRequest
from lenses_data.models.messages import request_hash
from lenses_data.models.serve import vllm_args
from lenses_data.simulator.simulator import SimConfig, run_in_thread
from lenses_data.simulator.testing import sim_models_config
from lenses_data.simulator.vllm_prompt import render_string_turn
from lenses_data.stages.filter import FilterStage
from lenses_data.stages.generate import GenerateStage
from lenses_data.stages.visual_validate import VisualValidateStage

ROOT = Path(__file__).parents[3]


@pytest.fixture
def rows(tmp_path: Path) -> list[dict[str, Any]]:
    out = []
    for i, array in enumerate([skdata.astronaut(), skdata.coffee(), skdata.chelsea()]):
        path = tmp_path / f"img{i}.jpg"
        Image.fromarray(np.asarray(array)).resize((512, 384)).save(path, quality=90)
        out.append({"image_id": f"img{i}", "path": str(path)})
    return out


def _requests(rows: list[dict[str, Any]]) -> list[ModelRequest]:
    config = PipelineConfig()
    generate, visual = GenerateStage(config), VisualValidateStage(config)
    requests = [FilterStage(config).build_request(row) for row in rows]
    for row in rows:
        requests += [generate.build_request((row, kind, 0)) for kind in ("prompt", "caption")]
        texts = [
            {
                "text_id": f"{row['image_id']}-t{j}",
                "image_id": row["image_id"],
                "kind": "caption",
                "lens": "Literal",
                "text": f"A scene number {j}.",
                "focus": "scene",
                "path": row["path"],
            }
            for j in range(2)
        ]
        requests.append(visual.build_request(texts))
    return requests


def _sent(rows: list[dict[str, Any]], placeholder: str | None = INTERNVL_IMAGE_PLACEHOLDER) -> list[dict]:
    """Run the stages' requests through the client; the bodies the simulator received."""
    with run_in_thread(SimConfig(record_requests=100)) as url:
        config = sim_models_config([url], timeout_s=5)
        for role in ("filter", "generator", "visual_validator"):
            config = config.with_role(role, image_placeholder=placeholder)
        results = ModelClient(config).run_sync(_requests(rows), lambda raw: raw)
        assert all(r.ok for r in results)
        return httpx.get(url.removesuffix("/v1") + "/sim/requests", timeout=5).json()["requests"]


def _by_role(sent: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_role: dict[str, list[dict[str, Any]]] = {}
    for record in sent:
        by_role.setdefault(record["body"]["model"].removeprefix("test/"), []).append(record["body"])
    return by_role


TEMPLATES = {
    "filter": ["filter"],
    "generator": ["image_side_prompts", "captions"],
    "visual_validator": [VISUAL_VALIDATOR.template],
}


def test_filter_one_tile_others_full_tiling_static_text_first(rows: list[dict[str, Any]]) -> None:
    by_role = _by_role(_sent(rows))
    assert {role: len(bodies) for role, bodies in by_role.items()} == {
        "filter": 3,
        "generator": 6,
        "visual_validator": 3,
    }
    for body in by_role["filter"]:
        assert body["mm_processor_kwargs"] == {"max_dynamic_patch": 1}
    for body in by_role["generator"] + by_role["visual_validator"]:
        assert "mm_processor_kwargs" not in body  # the server's default: InternVL's full tiling
    for role, bodies in by_role.items():
        static = {get_template(name).text for name in TEMPLATES[role]}
        for body in bodies:
            (user,) = [m for m in body["messages"] if m["role"] == "user"]
            first, slot, image, *rest = user["content"]
            # The instructions open the request, the placeholder and the image follow, per-item
            # text comes last.
            assert first == {"type": "text", "text": first["text"]} and first["text"] in static
            assert slot == {"type": "text", "text": INTERNVL_IMAGE_PLACEHOLDER}
            assert image["type"] == "image_url"
            assert all(part["type"] == "text" for part in rest)
            # What the model reads after vLLM renders the turn: still the instructions first.
            prompt = render_string_turn(user["content"], INTERNVL_IMAGE_PLACEHOLDER)
            assert prompt.startswith(first["text"] + "\n" + INTERNVL_IMAGE_PLACEHOLDER)
            assert prompt.count(INTERNVL_IMAGE_PLACEHOLDER) == 1
        prefixes = {body["messages"][0]["content"][0]["text"] for body in bodies}
        assert prefixes == static  # identical prefix across every image of the role


def test_without_the_placeholder_vllm_would_put_the_image_first(rows: list[dict[str, Any]]) -> None:
    """Why the role writes the placeholder: with the content parts alone in the same order, vLLM's
    rendering opens every request with the image, so no two images share a cached prefix."""
    by_role = _by_role(_sent(rows, placeholder=None))
    for body in by_role["filter"] + by_role["generator"]:
        (user,) = [m for m in body["messages"] if m["role"] == "user"]
        assert [part["type"] for part in user["content"]][:2] == ["text", "image_url"]
        prompt = render_string_turn(user["content"], INTERNVL_IMAGE_PLACEHOLDER)
        assert prompt.startswith(INTERNVL_IMAGE_PLACEHOLDER + "\n")


def test_a_placeholder_inside_a_text_is_defused(tmp_path: Path) -> None:
    """A caption that says "<image>" must not become a second image slot (vLLM refuses a request
    with more placeholders than images)."""
    from lenses_data.models.messages import build_messages

    request = ModelRequest(
        key="k",
        role="visual_validator",
        text="Check the <image> items.",
        image_path="x.jpg",
        after_image_text='[{"Caption": "An <image> of a cat"}]',
    )
    content = build_messages(request, "data:image/jpeg;base64,AA==", placeholder="<image>")[0]["content"]
    prompt = render_string_turn(content, "<image>")
    assert prompt.count("<image>") == 1
    assert "An < image> of a cat" in prompt and prompt.index("<image>") > prompt.index("Check the")


def test_image_bytes_arrive_intact(rows: list[dict[str, Any]]) -> None:
    sent = _sent(rows)
    expected = {}
    for row in rows:
        uri = "data:image/jpeg;base64," + base64.b64encode(Path(row["path"]).read_bytes()).decode()
        expected[hashlib.sha256(uri.encode()).hexdigest()] = len(uri)
    received = [
        part["image_url"]
        for record in sent
        for message in record["body"]["messages"]
        if isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == "image_url"
    ]
    assert len(received) == 12
    assert {image["sha256"] for image in received} == set(expected)
    assert all(expected[image["sha256"]] == image["chars"] for image in received)


def test_one_tile_setting_is_part_of_the_journal_key(rows: list[dict[str, Any]]) -> None:
    request = FilterStage(PipelineConfig()).build_request(rows[0])
    one_tile = ModelsConfig().filter
    full = one_tile.model_copy(update={"mm_processor_kwargs": {}})
    assert one_tile.mm_processor_kwargs == {"max_dynamic_patch": 1}
    assert request_hash(request, one_tile, "abc", "guided") != request_hash(request, full, "abc", "guided")
    text_only = request.model_copy(update={"image_path": None})  # no image: nothing to tile
    assert request_hash(text_only, one_tile, None, "guided") == request_hash(text_only, full, None, "guided")


def test_production_config_one_tile_filter_and_prefix_caching() -> None:
    models = load_config(ROOT / "configs" / "production.yaml").models
    # Transformers' format of InternVL (the one tests/realvllm serves): its tile key and placeholder.
    assert models.filter.mm_processor_kwargs == INTERNVL_HF_ONE_TILE == {"max_patches": 1}
    assert models.generator.mm_processor_kwargs == {} and models.visual_validator.mm_processor_kwargs == {}
    for role in ("filter", "generator", "validator"):
        assert "--enable-prefix-caching" in vllm_args(models.role(role), 1)
    for role in ("filter", "generator", "visual_validator"):  # the placeholder stays where written
        assert models.role(role).image_placeholder == INTERNVL_HF_IMAGE_PLACEHOLDER
        args = vllm_args(models.role(role), 1)
        assert args[args.index("--chat-template-content-format") + 1] == "string"
    assert models.validator.image_placeholder is None
    off = models.filter.model_copy(
        update={"serve": models.filter.serve.model_copy(update={"enable_prefix_caching": False})}
    )
    assert "--enable-prefix-caching" not in vllm_args(off, 1)
