"""Crop signal on real photographs: border crops pair with their original, distinct photos never do."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from lenses_data.candidates.imaging import hash_view
from lenses_data.candidates.sample import _photo_sources
from lenses_data.dedupe.crops import crop_pairs


def codes_of(images: list[Image.Image]) -> tuple[np.ndarray, np.ndarray]:
    views = []
    for image in images:
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=90)  # through a real JPEG round trip, as ingest sees it
        views.append(hash_view(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")))
    phashes = np.array([[v["phash"], *v["phash_crops"]] for v in views], dtype=np.int64)
    return phashes, np.array([v["dhashes"] for v in views], dtype=np.int64)


def test_border_crops_pair_with_their_originals_and_distinct_photos_do_not() -> None:
    photos = [Image.open(io.BytesIO(d)).convert("RGB") for d, _s, _o in _photo_sources().values()]
    n = len(photos)
    crops = []
    for k, photo in enumerate(photos):
        w, h = photo.size
        cut = [0.02 + 0.01 * ((k + i) % 4) for i in range(4)]  # 2-5% per side, different per side
        crops.append(
            photo.crop((round(cut[0] * w), round(cut[1] * h), w - round(cut[2] * w), h - round(cut[3] * h)))
        )
    phashes, dhashes = codes_of(photos + crops)
    whole = np.bitwise_count(phashes[:n, 0].view(np.uint64) ^ phashes[n:, 0].view(np.uint64))
    assert whole.max() > 8  # the whole-image hash alone misses some of these crops
    pairs, aligned, report = crop_pairs(phashes, dhashes, radius=8, confirm_radius=14)
    found = {tuple(p) for p in pairs.tolist()}
    # 15 of 16: the asymmetric crop (5/2/3/4%) of the retina (a centred disc on black) aligns at 12 bits
    assert len({(k, n + k) for k in range(n)} & found) >= n - 1
    assert all(b - a == n for a, b in found)  # nothing else: no two distinct photos
    assert (
        (aligned <= 8).all() and report["confirmed"] == len(pairs) and report["codes_searched"] == 3 * 2 * n
    )


def test_an_unconfirmed_candidate_does_not_merge() -> None:
    """Same pHashes, dHashes far apart: a candidate, not a pair."""
    phashes = np.array([[1, 2, 3], [1, 2, 3]], dtype=np.int64)
    dhashes = np.array([[0, 0, 0], [-1, -1, -1]], dtype=np.int64)  # 64 bits apart
    pairs, _, report = crop_pairs(phashes, dhashes, radius=8, confirm_radius=14)
    assert len(pairs) == 0 and report["candidates"] == 1 and report["confirmed"] == 0
    pairs, aligned, _ = crop_pairs(phashes, np.zeros((2, 3), np.int64), radius=8, confirm_radius=14)
    assert pairs.tolist() == [[0, 1]] and aligned.tolist() == [0]
