"""Deterministic identifiers: the same input always yields the same id, so reruns are idempotent."""

from __future__ import annotations

import hashlib

ID_HEX_CHARS = 16


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def image_id_from_bytes(data: bytes) -> str:
    """An image's id is a prefix of its content hash: exact duplicates collapse to one id."""
    return sha256_hex(data)[:ID_HEX_CHARS]


def text_id(image_id: str, kind: str, lens: str, candidate_index: int, text: str) -> str:
    key = f"{image_id}|{kind}|{lens}|{candidate_index}|{text}"
    return sha256_hex(key.encode("utf-8"))[:ID_HEX_CHARS]


def stable_hash(*parts: str) -> str:
    """Hash of several strings, separated unambiguously (length-prefixed)."""
    h = hashlib.sha256()
    for part in parts:
        encoded = part.encode("utf-8")
        h.update(len(encoded).to_bytes(8, "big"))
        h.update(encoded)
    return h.hexdigest()
