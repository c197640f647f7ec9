"""Prefix-cache use as vLLM reports it: the simulator's emulation (block-keyed, image by content),
the client keeping the reported `cached_tokens`, and `lenses check` telling a working cache from an
image rendered before the instructions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data as skdata

from lenses_data.config import PipelineConfig
from lenses_data.models import probe
from lenses_data.models.client import ModelClient
from lenses_data.simulator.testing import sim_models_config
from lenses_data.simulator.vllm_prompt import BLOCK_TOKENS, PrefixCache, prompt_units
from lenses_data.stages.generate import GenerateStage


def test_blocks_are_shared_up_to_the_first_difference() -> None:
    cache = PrefixCache()
    words = [f"w{i}" for i in range(40)]
    assert cache.lookup_and_insert(words) == 0
    assert cache.lookup_and_insert(words[:36] + ["x"] * 10) == 2 * BLOCK_TOKENS  # 2 whole blocks
    assert cache.lookup_and_insert(["x"] + words) == 0  # a different first token shares nothing
    assert cache.lookup_and_insert(words[:BLOCK_TOKENS]) == BLOCK_TOKENS - 1  # one token is computed


def test_an_image_counts_by_its_content_where_vllm_renders_it() -> None:
    def body(text_first: bool, url: str) -> dict:
        parts = [{"type": "text", "text": "Look closely."}]
        if text_first:
            parts.append({"type": "text", "text": "<image>"})
        parts += [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Item."}]
        return {"messages": [{"role": "user", "content": parts}]}

    placed = prompt_units(body(True, "data:a"))
    moved = prompt_units(body(False, "data:a"))
    assert placed[1:3] == ["Look", "closely."] and placed[3].startswith("<image:")
    assert moved[1].startswith("<image:") and moved[2:4] == ["Look", "closely."]
    assert prompt_units(body(True, "data:b"))[3] != placed[3]


@pytest.fixture
def rows(tmp_path: Path) -> list[dict[str, str]]:
    out = []
    for i, array in enumerate([skdata.astronaut(), skdata.coffee()]):
        path = tmp_path / f"img{i}.jpg"
        Image.fromarray(np.asarray(array)).resize((320, 240)).save(path, quality=85)
        out.append({"image_id": f"img{i}", "path": str(path)})
    return out


def _cached(simulator, rows, placeholder: str | None) -> list[tuple[int, int]]:
    """(cached, prompt) tokens of caption requests: image 0 answers 0 and 1, image 1 answer 0."""
    generate = GenerateStage(PipelineConfig())
    requests = [generate.build_request((rows[0], "caption", c)) for c in (0, 1)]
    requests.append(generate.build_request((rows[1], "caption", 0)))
    with simulator() as url:
        config = sim_models_config([url], timeout_s=5, concurrency=1)
        config = config.with_role("generator", image_placeholder=placeholder)
        results = ModelClient(config).run_sync(requests, lambda raw: raw)
    assert all(r.ok for r in results)
    # As vLLM does, the simulator reports cached tokens only for a hit: a miss has no field.
    return [(r.usage.get("cached_tokens", 0), r.usage["prompt_tokens"]) for r in results]


def test_the_client_keeps_the_cached_tokens_the_server_reports(simulator, rows) -> None:
    (first, _), (second_answer, prompt), (other_image, _) = _cached(simulator, rows, "<image>")
    assert first == 0
    # The second answer of the image repeats instructions and image: all but one token is cached
    # (the simulator counts the prompt's words, no image tokens).
    assert second_answer == prompt - 1
    # Another image shares the instructions, whole blocks of them.
    assert other_image > 100 and other_image % 16 == 0
    moved = _cached(simulator, rows, None)
    assert moved[2][0] == 0  # image first: a new image shares nothing
    assert moved[1][0] == moved[1][1] - 1  # the same image and instructions still share


def test_lenses_check_reports_whether_the_instructions_are_cached(simulator) -> None:
    with simulator() as url:
        config = sim_models_config([url], timeout_s=5)
        (placed,) = probe.check_roles(config, ["generator"])
        config = config.with_role("generator", image_placeholder=None)
        (moved,) = probe.check_roles(config, ["generator"])
        (text_only,) = probe.check_roles(config, ["validator"])

    def prefix(report: probe.ProbeReport) -> probe.Check:
        return next(c for c in report.checks if c.capability == "prefix")

    assert prefix(placed).status == "ok" and "came from the prefix cache" in prefix(placed).detail
    assert prefix(moved).status == "fallback"
    assert "image is rendered before the instructions" in prefix(moved).detail
    assert prefix(text_only).status == "ok"


def test_a_server_that_never_reports_the_cache_reads_not_measured() -> None:
    """A server with no `prompt_tokens_details` (llama-cpp-python's habit; vLLM without
    --enable-prompt-tokens-details) is not taken for an image rendered first: the word-for-word
    repeat gets no hit either, so the check says it could not measure."""
    from tests.lenses_data.models.fakeserver import FakeServer, serving

    with serving(FakeServer(served=("test/validator",))) as url:
        config = sim_models_config([url], timeout_s=5)
        config = config.with_role("validator", model="test/validator")
        (report,) = probe.check_roles(config, ["validator"])
    (prefix,) = [c for c in report.checks if c.capability == "prefix"]
    assert prefix.status == "ok" and prefix.detail.startswith("not measured")
