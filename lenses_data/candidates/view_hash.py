"""The hash codes of a decoded, upright view: computed by ingest while it decodes each image
(`imaging.hash_view`), compared by dedupe (`dedupe.pipeline`, `dedupe.crops`).

Pure pixels in, codes out: numpy, Pillow and scipy only, so both the candidates and the dedupe
packages can stand on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

VIEW_MIN_SIDE = 64  # the JPEG draft / reduced decode keeps at least this many pixels on the short side
CROP_LEVELS = (0.025, 0.05)  # centre crops (fraction cut from every side) hashed besides the whole view
HASH_VERSION = "v2:view>=64;phash;crops=0.025,0.05 (fractional edges);dhash"


@dataclass(frozen=True)
class ViewCodes:
    """pHash of the whole view (imagehash's value), pHashes of its centre crops, dHashes of all three."""

    phash: int
    phash_crops: list[int]
    dhashes: list[int]

    def as_dict(self) -> dict:
        return {"phash": self.phash, "phash_crops": self.phash_crops, "dhashes": self.dhashes,
                "hash_version": HASH_VERSION}  # fmt: skip


def view_scale(width: int, height: int) -> int:
    """Integer reduction (1..8) that keeps the short side >= VIEW_MIN_SIDE (JPEG draft scales are 1/2^k)."""
    return max(1, min(8, min(width, height) // VIEW_MIN_SIDE))


def _boxes(width: int, height: int) -> list[tuple[float, float, float, float]]:
    boxes: list[tuple[float, float, float, float]] = [(0, 0, width, height)]
    for level in CROP_LEVELS:
        dx, dy = level * width, level * height
        boxes.append((dx, dy, width - dx, height - dy))
    return boxes


def _pack_rows(bits: np.ndarray) -> list[int]:
    """(k, 8, 8) booleans -> k signed int64 codes, row-major, most significant bit first."""
    packed = np.packbits(bits.reshape(len(bits), 64), axis=1).view(">u8")[:, 0]
    return [int(v) for v in packed.astype(np.uint64).view(np.int64)]


def _median_rows(flat: np.ndarray) -> np.ndarray:
    """np.median over each row of 64 values, by the same arithmetic (mean of the two middle
    values: (a + b) / 2), without np.median's per-call overhead; (k, 1)."""
    middle = np.sort(flat, axis=1)[:, 31:33]
    return (middle[:, :1] + middle[:, 1:]) / 2


def _pixels(images: list[Image.Image]) -> np.ndarray:
    """(k, h, w) uint8 from k greyscale images of one size, in one copy out of Pillow."""
    width, height = images[0].size
    strip = Image.new("L", (width, height * len(images)))
    for k, image in enumerate(images):
        strip.paste(image, (0, k * height))
    return np.asarray(strip).reshape(len(images), height, width)


def view_codes(view: Image.Image) -> ViewCodes:
    """Hash a decoded, upright view.

    The whole-view pHash is computed exactly as `imagehash.phash` (greyscale, Lanczos to 32x32,
    scipy.fftpack DCT-II on both axes, 8x8 low band > its median), so it equals
    `imagehash.phash(view)` bit for bit. The crop pHashes use a bilinear (antialiased) resize of
    the crop box (fractional edges: at a 64 px view 2.5% is 1.6 px), and the dHashes a 9x8
    bilinear resize of each 32x32 thumbnail: cheaper than Lanczos, and they are only ever
    compared with codes made the same way.
    """
    import scipy.fftpack

    grey = view.convert("L")  # imagehash's greyscale (a copy when the view is greyscale already)
    width, height = grey.size
    thumbs = [grey.resize((32, 32), Image.Resampling.LANCZOS)]
    thumbs += [grey.resize((32, 32), Image.Resampling.BILINEAR, box=box) for box in _boxes(width, height)[1:]]
    low = scipy.fftpack.dct(scipy.fftpack.dct(_pixels(thumbs), axis=1), axis=2)[:, :8, :8]
    flat = low.reshape(len(low), 64)
    phash_bits = flat > _median_rows(flat)
    small = _pixels([t.resize((9, 8), Image.Resampling.BILINEAR) for t in thumbs])
    dhash_bits = small[:, :, 1:] > small[:, :, :-1]
    phashes = _pack_rows(phash_bits)
    return ViewCodes(phashes[0], phashes[1:], _pack_rows(dhash_bits))
