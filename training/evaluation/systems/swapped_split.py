"""A test split whose captions or image-side prompts come from another build of the dataset.

Supp. Tables 6 and 7 (main Table 6) evaluate frozen models on the same test images while one
kind of text is replaced by the output of another generator model: the captions (generator
swap) or the image-side prompts with their lens labels (backbone scaling). Both builds run the
same pipeline on the same source images, so images match by `image_id` (a content hash) and
the split is the base build's. What does not match is counted in the returned coverage, never
dropped silently: base images the other build has no texts for, and texts of the other build
whose image is not in the base split.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

import numpy as np

from training.evaluation.types import SplitLabels

SwappedPart = Literal["captions", "prompts"]


def _rows_in_base(base: SplitLabels, other: SplitLabels, other_rows: np.ndarray) -> np.ndarray:
    """Base row of each of the other build's image rows (-1: not in the base split)."""
    row_of = {image_id: r for r, image_id in enumerate(base.image_ids)}
    mapping = np.array([row_of.get(image_id, -1) for image_id in other.image_ids], dtype=np.int64)
    return mapping[np.asarray(other_rows, dtype=np.int64)] if len(other_rows) else np.zeros(0, np.int64)


def _coverage(
    base: SplitLabels, other: SplitLabels, kept: np.ndarray, texts_of: np.ndarray
) -> dict[str, int]:
    with_texts = set(np.unique(texts_of[kept]).tolist())
    return {
        "n_base_images": len(base.image_ids),
        "n_base_images_without_swapped_texts": len(base.image_ids) - len(with_texts),
        "n_other_images_outside_base_split": len(set(other.image_ids) - set(base.image_ids)),
        "n_swapped_texts": int(kept.sum()),
        "n_other_texts_outside_base_split": int((~kept).sum()),
    }


def _swap_captions(base: SplitLabels, other: SplitLabels) -> tuple[SplitLabels, dict[str, int]]:
    rows = _rows_in_base(base, other, other.caption_image)
    kept = rows >= 0
    if not kept.any():
        raise ValueError("no caption of the other build belongs to an image of the base split")
    swapped = replace(
        base,
        caption_ids=[c for c, k in zip(other.caption_ids, kept, strict=True) if k],
        captions=[c for c, k in zip(other.captions, kept, strict=True) if k],
        caption_image=rows[kept],
        caption_lens=np.asarray(other.caption_lens)[kept],
    )
    return swapped, _coverage(base, other, kept, rows)


def _swap_prompts(base: SplitLabels, other: SplitLabels) -> tuple[SplitLabels, dict[str, int]]:
    rows = _rows_in_base(base, other, other.prompt_image)
    kept = rows >= 0
    base_row_of = _rows_in_base(base, other, np.arange(len(other.image_ids)))
    sets: list[list[tuple[str, int]]] = [[] for _ in base.image_ids]
    for other_row, base_row in enumerate(base_row_of):
        if base_row >= 0:
            sets[base_row] = list(other.prompt_sets[other_row])
    swapped = replace(
        base,
        prompt_sets=sets,
        prompts=[p for p, k in zip(other.prompts, kept, strict=True) if k],
        prompt_image=rows[kept],
        prompt_lens=np.asarray(other.prompt_lens)[kept],
    )
    return swapped, _coverage(base, other, kept, rows)


def swap_texts(
    base: SplitLabels, other: SplitLabels, part: SwappedPart
) -> tuple[SplitLabels, dict[str, int]]:
    """(base split with `part` taken from the other build, coverage counts).

    Images (and the other kind of text) stay the base build's. Swapped captions of images the
    base split lacks are left out and counted; a base image without swapped prompts is encoded
    without prompts (its slots fall back to the global embedding) and counted.
    """
    if part == "captions":
        return _swap_captions(base, other)
    if part == "prompts":
        return _swap_prompts(base, other)
    raise ValueError(f"unknown part {part!r}; expected 'captions' or 'prompts'")
