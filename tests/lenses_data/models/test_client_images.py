"""Images of a batch: loaded ahead of the requests within a bounded window, once per file however
many requests send it, and an unreadable file fails only the requests that send it."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path

import httpx
import numpy as np
from PIL import Image
from skimage import data as skdata

from lenses_data.models import types as codes
from lenses_data.models.client import ModelClient, ModelRequest
from lenses_data.models.images import ImagePrefetch
from lenses_data.simulator.simulator import SimConfig, run_in_thread
from lenses_data.simulator.testing import sim_models_config


def _jpegs(root: Path, count: int) -> list[Path]:
    base = Image.fromarray(np.asarray(skdata.coffee()))
    paths = []
    for i in range(count):
        path = root / f"img{i:03d}.jpg"
        base.rotate(i * 7).resize((256, 192)).save(path, quality=80)
        paths.append(path)
    return paths


def test_prefetch_holds_a_bounded_window_and_drops_images_after_last_use(tmp_path: Path) -> None:
    paths = [str(p) for p in _jpegs(tmp_path, 40)]
    uses = paths + paths[:5]  # the first five are sent twice

    async def scenario() -> tuple[int, list[str], int]:
        prefetch = ImagePrefetch(uses, chunk=4, ahead=8)
        prefetch.start()
        await asyncio.sleep(0.5)  # nobody asks yet: the prefetch must stop at its window
        before = prefetch.held
        digests = [(await prefetch.get(path)).sha256 for path in uses]
        after = prefetch.held
        await prefetch.close()
        return before, digests, after

    before, digests, after = asyncio.run(scenario())
    assert 8 <= before <= 8 + 4
    assert digests == [hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in uses]
    assert after == 0


def test_shared_and_unreadable_images_in_one_batch(tmp_path: Path) -> None:
    paths = _jpegs(tmp_path, 3)
    missing, not_image = tmp_path / "missing.jpg", tmp_path / "notes.jpg"
    not_image.write_text("not an image")
    sources = [p for p in paths for _ in range(4)] + [missing, not_image]
    requests = [
        ModelRequest(
            key=f"k{i}",
            role="visual_validator",
            text="Check.",
            image_path=str(path),
            after_image_text=f"item {i}",
        )
        for i, path in enumerate(sources)
    ]
    with run_in_thread(SimConfig(record_requests=50)) as url:
        results = ModelClient(sim_models_config([url], timeout_s=5)).run_sync(requests, lambda raw: raw)
        sent = httpx.get(url.removesuffix("/v1") + "/sim/requests", timeout=5).json()["requests"]
    assert [r.ok for r in results] == [True] * 12 + [False, False]
    assert {r.error_code for r in results[12:]} == {codes.BAD_INPUT}

    # Each request carried its own file's bytes.
    def digest(path: Path) -> str:
        uri = "data:image/jpeg;base64," + base64.b64encode(path.read_bytes()).decode()
        return hashlib.sha256(uri.encode()).hexdigest()

    def image_sha(record: dict) -> str:
        (image,) = [p for p in record["body"]["messages"][0]["content"] if p["type"] == "image_url"]
        return image["image_url"]["sha256"]

    by_key = {r["key"]: image_sha(r) for r in sent}
    assert by_key == {f"k{i}": digest(path) for i, path in enumerate(sources[:12])}
