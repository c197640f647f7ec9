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
