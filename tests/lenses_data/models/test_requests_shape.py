"""What reaches the server, read back from the simulator: the filter asks for one tile, generation
and visual validation keep full tiling, every request starts with its static instructions (the
shared prefix vLLM's prefix cache serves), and the image bytes arrive intact."""

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

from lenses_data.config import load_config
from lenses_data.config.annotate import AnnotateConfig
from lenses_data.config.models import ModelsConfig
from lenses_data.models.client import ModelClient, ModelRequest
from lenses_data.models.messages import request_hash
from lenses_data.models.serve import vllm_args
from lenses_data.models.simulator import SimConfig, run_in_thread
from lenses_data.models.testing import sim_models_config
from lenses_data.prompts import get_template
from lenses_data.stages import filter as filter_stage
from lenses_data.stages import generate, validate
from lenses_data.stages.visual_validate import VISUAL_VALIDATOR

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
    settings = AnnotateConfig()
    requests = [filter_stage.build_request(row) for row in rows]
    for row in rows:
        requests += [generate.build_request(row, kind, 0, settings) for kind in ("prompt", "caption")]
        texts = [
            {
                "text_id": f"{row['image_id']}-t{j}",
                "image_id": row["image_id"],
                "kind": "caption",
                "lens": "Literal",
                "text": f"A scene number {j}.",
                "focus": "scene",
            }
            for j in range(2)
        ]
        requests.append(validate.build_request(texts, VISUAL_VALIDATOR, row["path"]))
    return requests


def _sent(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run the stages' requests through the client; the bodies the simulator received."""
    with run_in_thread(SimConfig(record_requests=100)) as url:
        client = ModelClient(sim_models_config([url], timeout_s=5))
        results = client.run_sync(_requests(rows), lambda raw: raw)
        assert all(r.ok for r in results)
        return httpx.get(url.removesuffix("/v1") + "/sim/requests", timeout=5).json()["requests"]


def test_filter_one_tile_others_full_tiling_static_text_first(rows: list[dict[str, Any]]) -> None:
    sent = _sent(rows)
    by_role: dict[str, list[dict[str, Any]]] = {}
    for record in sent:
        by_role.setdefault(record["body"]["model"].removeprefix("test/"), []).append(record["body"])
    assert {role: len(bodies) for role, bodies in by_role.items()} == {
        "filter": 3,
        "generator": 6,
        "visual_validator": 3,
    }
    for body in by_role["filter"]:
        assert body["mm_processor_kwargs"] == {"max_dynamic_patch": 1}
    for body in by_role["generator"] + by_role["visual_validator"]:
        assert "mm_processor_kwargs" not in body  # the server's default: InternVL's full tiling
    templates = {
        "filter": ["filter"],
        "generator": ["image_side_prompts", "captions"],
        "visual_validator": [VISUAL_VALIDATOR.template],
    }
    for role, bodies in by_role.items():
        static = {get_template(name).text for name in templates[role]}
        for body in bodies:
            (user,) = [m for m in body["messages"] if m["role"] == "user"]
            first, image, *rest = user["content"]
            # The instructions open the request, the image follows, per-item text comes last.
            assert first == {"type": "text", "text": first["text"]} and first["text"] in static
            assert image["type"] == "image_url"
            assert all(part["type"] == "text" for part in rest)
        prefixes = {body["messages"][0]["content"][0]["text"] for body in bodies}
        assert prefixes == static  # identical prefix across every image of the role


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
    request = filter_stage.build_request(rows[0])
    one_tile = ModelsConfig().filter
    full = one_tile.model_copy(update={"mm_processor_kwargs": {}})
    assert one_tile.mm_processor_kwargs == {"max_dynamic_patch": 1}
    assert request_hash(request, one_tile, "abc", "guided") != request_hash(request, full, "abc", "guided")
    text_only = request.model_copy(update={"image_path": None})  # no image: nothing to tile
    assert request_hash(text_only, one_tile, None, "guided") == request_hash(text_only, full, None, "guided")


def test_production_config_one_tile_filter_and_prefix_caching() -> None:
    models = load_config(ROOT / "configs" / "production.yaml").models
    assert models.filter.mm_processor_kwargs == {"max_dynamic_patch": 1}
    assert models.generator.mm_processor_kwargs == {} and models.visual_validator.mm_processor_kwargs == {}
    for role in ("filter", "generator", "validator"):
        assert "--enable-prefix-caching" in vllm_args(models.role(role), 1)
    off = models.filter.model_copy(
        update={"serve": models.filter.serve.model_copy(update={"enable_prefix_caching": False})}
    )
    assert "--enable-prefix-caching" not in vllm_args(off, 1)
