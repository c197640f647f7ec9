"""Perceptual hashes (imagehash) as 64-bit integers, computed once per image.

A hash is the 8x8 bit matrix of `imagehash` packed row-major, most significant bit first, and
stored as a signed int64 (Parquet has no uint64 column we want to rely on); Hamming distances
work on the bit pattern, so the sign is irrelevant.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
from PIL import Image

HASH_KINDS = ("phash", "dhash", "whash")


@dataclass(frozen=True)
class HashResult:
    index: int
    value: int | None
    error: str | None = None


def _hash_function(kind: str) -> Callable:
    import imagehash

    functions = {"phash": imagehash.phash, "dhash": imagehash.dhash, "whash": imagehash.whash}
    if kind not in functions:
        raise ValueError(f"unknown hash kind {kind!r}; choose one of {HASH_KINDS}")
    return functions[kind]


def bits_to_int64(bits: np.ndarray) -> int:
    """Pack a boolean 8x8 matrix into a signed 64-bit integer."""
    flat = np.asarray(bits, dtype=bool).reshape(-1)
    if flat.size != 64:
        raise ValueError(f"expected 64 hash bits, got {flat.size}")
    return int(np.packbits(flat).view(">u8")[0].astype(np.uint64).view(np.int64))


def hash_image(path: str, kind: str = "phash") -> int:
    """The 64-bit perceptual hash of one image file, as every stage sees it (upright 8-bit RGB)."""
    from lenses_data.candidates.imaging import load_rgb

    return bits_to_int64(_hash_function(kind)(load_rgb(path), hash_size=8).hash)


def _safe_hash(job: tuple[int, str, str]) -> HashResult:
    index, path, kind = job
    try:
        return HashResult(index, hash_image(path, kind))
    except Exception as error:  # one bad file is a rejection row, not a failed run
        return HashResult(index, None, f"{type(error).__name__}: {error}")


def hash_images(paths: Sequence[str], kind: str = "phash", workers: int = 1) -> list[HashResult]:
    """Hash many files, in input order; failures come back with `error` set."""
    _hash_function(kind)  # fail fast on a bad kind, before spawning workers
    jobs = [(i, str(p), kind) for i, p in enumerate(paths)]
    if workers <= 1 or len(jobs) < 64:
        return [_safe_hash(job) for job in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_safe_hash, jobs, chunksize=64))


# --- hashes of the decoded view (computed at ingest, or on demand for old run directories) ----

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


def _file_codes(path: str) -> tuple[dict | None, str | None]:
    """The codes ingest would have stored for this file (same decode, same view)."""
    from lenses_data.candidates.imaging import DecodeLimits, inspect_image_bytes

    limits = DecodeLimits(1, 1e9, 2**40, 2**40, ("JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF"))
    try:
        with open(path, "rb") as handle:
            codes = inspect_image_bytes(handle.read(), limits).codes
    except Exception as error:  # one bad file is a rejection row, not a failed run
        return None, f"{type(error).__name__}: {error}"
    return (codes, None) if codes else (None, "hashing the decoded image failed")


def hash_files(paths: Sequence[str], workers: int = 1) -> list[tuple[dict | None, str | None]]:
    """Hash files the way ingest does (for run directories ingested before hashes were stored)."""
    if workers <= 1 or len(paths) < 64:
        return [_file_codes(p) for p in paths]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_file_codes, paths, chunksize=64))
