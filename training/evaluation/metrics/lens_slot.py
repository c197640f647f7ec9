"""Lens-specific slot retrieval, the per-lens protocol of the main paper (Sec. 4.2).

"For a given lens c, we extract the image slot corresponding to c and match it only against
text representations whose c-slot is active. We then compute image-to-text and text-to-image
R@k for each of the five lenses." Here, for lens c:

- scores: Eq. 4 with lens c the only lens taking part (`training.evaluation.scoring.similarity.score_one_lens`):
  the image's c-slots against the caption's c-slot; an image without a c-slot falls back to
  the global cosine when `fallback` is on (as Eq. 4 does for pairs without a shared lens, and
  as main Table 6 states: "slot-masked similarity with global fallback");
- I->T: queries = images with a lens-c caption; gallery = captions "whose c-slot is active"
  under the paper's text mask m^T, which is 1 "only for the category token that matches the
  caption label" (Sec. 3.3): the lens-c captions (`gallery="label"`, the default). Table 2
  agrees: its zero-shot CLIP row has Literal I->T R@1 46.25 above All 8.88, impossible if the
  Literal queries ranked the whole caption pool. `gallery="active"` reads "active" from the
  inference mask instead (`txt_slot_lens`; with all five slots on, every caption);
  hits = the image's lens-c captions;
- T->I: queries = lens-c captions (their c-slot); gallery = all images; hit = its image;
- without fallback, an image with no c-slot cannot be matched: its I->T query and the T->I
  queries of its lens-c captions count as misses, and in galleries it sits at the floor score,
  below every real score. Ties go to the lower index, as everywhere (`ranking`).

Memory stays bounded: each lens's matrix is computed lazily, by blocks of query rows for I->T
and by blocks of query columns for T->I, so every ranking uses values of a single block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch

from training.evaluation.metrics.ranking import (
    Positives,
    best_positive,
    count_ahead,
    matrix_shape,
    rows_per_chunk,
    to_numpy_block,
)
from training.evaluation.metrics.retrieval import (
    DEFAULT_CHUNK_BYTES,
    LENS_KEYS,
    N_LENSES,
    check_ks,
    macro_recall,
    recall_from_ranks,
    validate_labels,
)
from training.evaluation.scoring.similarity import all_lens_text_slots, score_one_lens, text_active
from training.retriever.config import SMOOTH_CHAMFER_ALPHA, SMOOTH_CHAMFER_DENOMINATOR

MISS = np.iinfo(np.int64).max  # rank of a query that cannot be matched: beyond every K
SlotGallery = Literal["label", "active"]


class LensSlotMatrix:
    """The [n_images, len(gallery)] lens-c score matrix, computed on demand by rows or columns.

    Column g is caption gallery[g]. Nothing of size n_images x n_captions is ever held.
    """

    def __init__(self, img_slots, img_slot_lens, img_global, txt_slots, txt_global, lens: int,
                 gallery: np.ndarray, *, alpha: float = SMOOTH_CHAMFER_ALPHA,
                 denominator: float = SMOOTH_CHAMFER_DENOMINATOR, fallback: bool = True,
                 image_chunk: int = 256, text_chunk: int = 8192) -> None:  # fmt: skip
        self.gallery = np.asarray(gallery, dtype=np.int64)
        whole = np.array_equal(self.gallery, np.arange(txt_slots.shape[0]))
        idx = slice(None) if whole else torch.as_tensor(self.gallery)
        self._img = (img_slots, img_slot_lens, img_global)
        self._txt = (txt_slots[idx, lens], txt_global[idx])  # a view when the gallery is everything
        self.lens = lens
        self.has_slot = (img_slot_lens == lens).any(1).cpu().numpy()
        self.shape = (img_slots.shape[0], len(self.gallery))
        self._kw = dict(alpha=alpha, denominator=denominator, fallback=fallback,
                        image_chunk=image_chunk, text_chunk=text_chunk)  # fmt: skip

    def rows(self, idx: np.ndarray) -> np.ndarray:
        i = torch.as_tensor(idx, dtype=torch.long)
        return score_one_lens(*(t[i] for t in self._img), *self._txt, self.lens, **self._kw)

    def columns(self, idx: np.ndarray) -> np.ndarray:
        j = torch.as_tensor(idx, dtype=torch.long)
        return score_one_lens(*self._img, *(t[j] for t in self._txt), self.lens, **self._kw)


def _rows(sim: Any, idx: np.ndarray) -> np.ndarray:
    return sim.rows(idx) if hasattr(sim, "rows") else to_numpy_block(sim[idx])


def _columns(sim: Any, idx: np.ndarray) -> np.ndarray:
    return sim.columns(idx) if hasattr(sim, "columns") else to_numpy_block(sim[:, idx])


def _check_gallery(gallery: Any, n_captions: int, lens_captions: np.ndarray, lens: int) -> np.ndarray:
    g = np.asarray(gallery, dtype=np.int64).ravel()
    if g.size and (np.any(np.diff(g) <= 0) or g[0] < 0 or g[-1] >= n_captions):
        raise ValueError(f"gallery of lens {lens} must be sorted unique caption indices in [0, {n_captions})")
    if not np.isin(lens_captions, g).all():
        raise ValueError(f"every lens-{lens} caption needs its lens-{lens} text slot active (it is a query)")
    return g


def _i2t_ranks(sim, ci, cl, gallery, lens, block_rows) -> tuple[np.ndarray, np.ndarray]:
    """(query images, rank of each one's best lens-c caption among the gallery columns)."""
    queries = np.unique(ci[cl == lens])
    pos = Positives.from_groups(queries, np.where(cl[gallery] == lens, ci[gallery], -1))
    ranks = np.empty(len(queries), np.int64)
    for start in range(0, len(queries), block_rows):
        stop = min(len(queries), start + block_rows)
        block = _rows(sim, queries[start:stop])
        score, col = best_positive(block, pos, start, stop)
        ranks[start:stop] = count_ahead(block, score, col) + 1
    return queries, ranks


def _t2i_ranks(sim, ci, cl, gallery, lens, block_cols) -> tuple[np.ndarray, np.ndarray]:
    """(each lens-c caption's image, rank of that image in the caption's column)."""
    cols = np.nonzero(cl[gallery] == lens)[0]
    images = ci[gallery[cols]]
    ranks = np.empty(len(cols), np.int64)
    for start in range(0, len(cols), block_cols):
        stop = min(len(cols), start + block_cols)
        block = _columns(sim, cols[start:stop]).T  # [captions, images]: one ranking per row
        own = images[start:stop]
        ranks[start:stop] = count_ahead(block, block[np.arange(stop - start), own], own) + 1
    return images, ranks


def lens_slot_recall(
    matrices: Sequence[Any],
    caption_image: Any,
    caption_lens: Any,
    galleries: Sequence[Any],
    has_slot: Sequence[Any],
    *,
    fallback: bool = True,
    ks: Sequence[int] = (1, 5, 10),
    max_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> dict[str, float]:
    """Per-lens I->T and T->I R@K (%) of the lens-slot protocol, plus macro R@K over lenses.

    matrices[c]: lens-c scores [n_images, len(galleries[c])] (numpy, torch, or anything with
    `rows(idx)`/`columns(idx)` such as `LensSlotMatrix`); galleries[c]: ascending caption
    indices of its columns; has_slot[c]: bool [n_images], the image has a c-slot.
    Also `<lens>/{i2t,t2i}/n_without_slot`: queries whose image has no c-slot (global
    fallback, or misses when `fallback` is False).
    """
    ks = check_ks(ks)
    if len(matrices) != N_LENSES or len(galleries) != N_LENSES or len(has_slot) != N_LENSES:
        raise ValueError(f"need one matrix, gallery and has_slot mask per lens ({N_LENSES})")
    n_images = matrix_shape(matrices[0])[0]
    ci, cl = validate_labels(n_images, len(np.ravel(caption_lens)), caption_image, caption_lens)
    out: dict[str, float] = {}
    for lens, name in enumerate(LENS_KEYS):
        gallery = _check_gallery(galleries[lens], len(ci), np.nonzero(cl == lens)[0], lens)
        if matrix_shape(matrices[lens]) != (n_images, len(gallery)):
            raise ValueError(f"lens {lens}: matrix is {matrix_shape(matrices[lens])}, gallery {len(gallery)}")
        slot = np.asarray(has_slot[lens], dtype=bool).ravel()
        if len(slot) != n_images:
            raise ValueError(f"has_slot of lens {lens} has {len(slot)} entries for {n_images} images")
        sim = matrices[lens]
        q_img, i2t = _i2t_ranks(sim, ci, cl, gallery, lens, rows_per_chunk(len(gallery), max_chunk_bytes))
        c_img, t2i = _t2i_ranks(sim, ci, cl, gallery, lens, rows_per_chunk(n_images, max_chunk_bytes))
        for direction, images, ranks in (("i2t", q_img, i2t), ("t2i", c_img, t2i)):
            missing = ~slot[images]
            if not fallback:
                ranks[missing] = MISS
            for key, val in recall_from_ranks(ranks, ks).items():
                out[f"{name}/{direction}/{key}"] = val
            out[f"{name}/{direction}/n_without_slot"] = float(missing.sum())
    out.update(macro_recall(out, ks))
    return out


def slot_galleries(
    caption_lens: Any, txt_slot_lens: torch.Tensor | None, n_txt: int, gallery: SlotGallery
) -> np.ndarray:
    """[n_txt, 5] bool: caption n is in the lens-c gallery ("label": its lens is c; "active": its
    c text slot is on in txt_slot_lens, None = all five)."""
    if gallery == "label":
        cl = np.asarray(caption_lens, dtype=np.int64).ravel()
        if len(cl) != n_txt:
            raise ValueError(f"{len(cl)} caption lenses for {n_txt} captions")
        return cl[:, None] == np.arange(N_LENSES)[None, :]
    if gallery == "active":
        return text_active(all_lens_text_slots(n_txt) if txt_slot_lens is None else txt_slot_lens).numpy()
    raise ValueError(f"lens-slot gallery must be 'label' or 'active', got {gallery!r}")


def lens_slot_metrics(
    img_slots: torch.Tensor,
    img_slot_lens: torch.Tensor,
    img_global: torch.Tensor,
    txt_slots: torch.Tensor,
    txt_global: torch.Tensor,
    caption_image: Any,
    caption_lens: Any,
    *,
    txt_slot_lens: torch.Tensor | None = None,
    gallery: SlotGallery = "label",
    alpha: float = SMOOTH_CHAMFER_ALPHA,
    denominator: float = SMOOTH_CHAMFER_DENOMINATOR,
    fallback: bool = True,
    image_chunk: int = 256,
    text_chunk: int = 8192,
    ks: Sequence[int] = (1, 5, 10),
    max_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> dict[str, float]:
    """The lens-slot protocol from slot encodings.

    img_slots [n_img, S, d], img_slot_lens [n_img, S], img_global [n_img, d], txt_slots
    [n_txt, 5, d], txt_global [n_txt, d]. gallery: "label" = the lens-c captions (the paper's
    m^T); "active" = captions whose c slot is on in txt_slot_lens [n_txt, 5] (None = all five).
    """
    active = slot_galleries(caption_lens, txt_slot_lens, txt_slots.shape[0], gallery)
    matrices = [
        LensSlotMatrix(
            img_slots,
            img_slot_lens,
            img_global,
            txt_slots,
            txt_global,
            lens,
            np.nonzero(active[:, lens])[0],
            alpha=alpha,
            denominator=denominator,
            fallback=fallback,
            image_chunk=image_chunk,
            text_chunk=text_chunk,
        )  # fmt: skip
        for lens in range(N_LENSES)
    ]
    return lens_slot_recall(
        matrices, caption_image, caption_lens, [m.gallery for m in matrices],
        [m.has_slot for m in matrices], fallback=fallback, ks=ks, max_chunk_bytes=max_chunk_bytes,
    )  # fmt: skip
