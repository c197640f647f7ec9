"""Score matrices for the lens-slot model at full test-set scale.

At inference a caption is encoded into all five lens slots (text slot j carries lens j) and no
lens label is used; the score is the lens-masked smooth-Chamfer similarity with global fallback
of `training.retriever.similarity` (Eq. 4). `lens_similarity_with_details` there compares
every image slot with every text slot; here the same numbers come from matrix products per
lens (an image slot of lens l only ever meets text slot l: 5x less work) over slots grouped
in "levels" so per-image log-sum-exps are slices, not scatters. That keeps 5,500 x 38,259
feasible on a CPU; `tests/training/evaluation/test_scoring.py` checks the two agree. Only the
sums are computed here: the formula over them, the global fallback and the no-match floor are
`training.retriever.similarity`'s (`smooth_chamfer`, `with_global_fallback`, `no_match_floor`).

`score_one_lens` is the same score with a single lens taking part (image c-slots against the
text c-slot), the scores of the lens-slot protocol (`training.evaluation.metrics.lens_slot`).

Fallback rates and the routing matrix (which slot wins) are in `training.evaluation.metrics.routing`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from training.retriever.config import SMOOTH_CHAMFER_ALPHA, SMOOTH_CHAMFER_DENOMINATOR
from training.retriever.lenses import INACTIVE
from training.retriever.lenses import NUM_LENSES as N_LENSES
from training.retriever.similarity import no_match_floor, smooth_chamfer, with_global_fallback


def all_lens_text_slots(n_texts: int) -> torch.Tensor:
    """Inference-time text slot lenses: every caption has its five lens slots active."""
    return torch.arange(N_LENSES).repeat(n_texts, 1)


def label_text_slots(caption_lens: Any) -> torch.Tensor:
    """Training-style text slot lenses: only the caption's own lens slot is active."""
    lens = torch.as_tensor(np.asarray(caption_lens), dtype=torch.long)
    slots = torch.full((len(lens), N_LENSES), INACTIVE, dtype=torch.long)
    slots[torch.arange(len(lens)), lens] = lens
    return slots


def text_active(txt_slot_lens: torch.Tensor) -> torch.Tensor:
    """[n_txt, 5] bool: which lens slot is active, checking slot j carries lens j or -1."""
    txt_slot_lens = torch.as_tensor(txt_slot_lens, dtype=torch.long)
    if txt_slot_lens.dim() != 2 or txt_slot_lens.shape[1] != N_LENSES:
        raise ValueError(f"text slot lenses must be [n_txt, {N_LENSES}], got {tuple(txt_slot_lens.shape)}")
    expected = torch.arange(N_LENSES)[None, :]
    if not ((txt_slot_lens == expected) | (txt_slot_lens == INACTIVE)).all():
        raise ValueError("text slot j must carry lens j (or -1 when inactive)")
    return txt_slot_lens == expected


@dataclass
class _LensLevels:
    """Lens-k slots of the images in `rows`, split into levels: level m holds the (m+1)-th
    lens-k slot of every image that has one, so no work is spent on padding.

    `rows` is ordered by descending lens-k slot count, so level m covers a prefix of it:
    `levels[m]` is [n_m, d] for the first n_m rows (level 0 covers all of them).
    """

    rows: torch.Tensor
    levels: list[torch.Tensor]


@dataclass
class _ImageBlock:
    """Active slots of a block of images grouped by lens."""

    n: int
    slot_counts: torch.Tensor  # [n, 5] float, active slots per lens
    by_lens: list[_LensLevels | None]

    @classmethod
    def build(cls, v: torch.Tensor, lens: torch.Tensor) -> _ImageBlock:
        counts = torch.stack([(lens == k).sum(1) for k in range(N_LENSES)], dim=1)
        by_lens: list[_LensLevels | None] = []
        for k in range(N_LENSES):
            rows = torch.nonzero(counts[:, k] > 0)[:, 0]
            if rows.numel() == 0:
                by_lens.append(None)
                continue
            rows = rows[torch.argsort(counts[rows, k], descending=True, stable=True)]
            is_k = lens[rows] == k
            local, slot = torch.nonzero(is_k, as_tuple=True)  # row-major: ordered by local
            level = (torch.cumsum(is_k, dim=1) - 1)[local, slot]
            vectors = v[rows[local], slot]
            by_lens.append(_LensLevels(rows, [vectors[level == m] for m in range(int(level.max()) + 1)]))
        return cls(n=v.shape[0], slot_counts=counts.float(), by_lens=by_lens)


def _lens_sides(levels: _LensLevels, u_k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For the images of one lens: (sum over their lens-k slots of the logits, logsumexp of them).

    u_k [c, d] is alpha times text slot k; each lens-k image slot's only partner is that slot.
    Level m touches only the prefix of images that have an (m+1)-th slot: plain slices.
    """
    logits = [vectors @ u_k.T for vectors in levels.levels]  # level m: [n_m, c]
    total_logit = logits[0].clone()
    top = logits[0].clone()
    for lm in logits[1:]:
        total_logit[: len(lm)] += lm
        torch.maximum(top[: len(lm)], lm, out=top[: len(lm)])
    mass = torch.exp(logits[0] - top)
    for lm in logits[1:]:
        mass[: len(lm)] += torch.exp(lm - top[: len(lm)])
    return total_logit, torch.log_(mass).add_(top)


def _chamfer_block(img: _ImageBlock, u: torch.Tensor, active: torch.Tensor, alpha: float, denominator: float):
    """Smooth-Chamfer scores [n_img, n_txt] and the has-any-pair mask for one block."""
    act = active.float()  # [c, 5]
    all_active = bool(active.all())
    img_sum = torch.zeros(img.n, u.shape[0])
    txt_sum = torch.zeros(img.n, u.shape[0])
    for k, levels in enumerate(img.by_lens):
        if levels is None:
            continue
        # Image side: an image slot's logsumexp over its single partner is its own logit.
        side_img, side_txt = _lens_sides(levels, alpha * u[:, k, :])
        if not all_active:  # pairs whose text slot k is inactive contribute nothing
            side_img *= act[None, :, k]
            side_txt *= act[None, :, k]
        img_sum.index_add_(0, levels.rows, side_img)
        txt_sum.index_add_(0, levels.rows, side_txt)
    img_cnt = img.slot_counts @ act.T  # partnered image slots per pair
    txt_cnt = (img.slot_counts > 0).float() @ act.T  # partnered text slots per pair
    return smooth_chamfer(img_sum, img_cnt, txt_sum, txt_cnt, alpha, denominator), txt_cnt > 0


@torch.no_grad()
def score_lens_slots(
    img_slots: torch.Tensor,
    img_slot_lens: torch.Tensor,
    img_global: torch.Tensor,
    txt_slots: torch.Tensor,
    txt_global: torch.Tensor,
    *,
    txt_slot_lens: torch.Tensor | None = None,
    alpha: float = SMOOTH_CHAMFER_ALPHA,
    denominator: float = SMOOTH_CHAMFER_DENOMINATOR,
    fallback: bool = True,
    image_chunk: int = 256,
    text_chunk: int = 8192,
) -> np.ndarray:
    """Lens-masked similarity with global fallback as a float32 numpy [n_img, n_txt] matrix.

    txt_slot_lens defaults to all five slots active (inference, no lens label). Without
    fallback, pairs with no same-lens slot pair get the floor -2/denominator - 1 of
    `training.retriever.similarity`. Memory: the output plus O(image_chunk * 7 * text_chunk) floats.
    """
    n_img, n_txt = img_slots.shape[0], txt_slots.shape[0]
    if txt_slot_lens is None:
        txt_slot_lens = all_lens_text_slots(n_txt)
    active = text_active(txt_slot_lens)
    if img_slot_lens.shape != img_slots.shape[:2] or txt_slots.shape[1] != N_LENSES:
        raise ValueError("img_slot_lens must be [n_img, S] and txt_slots [n_txt, 5, d]")
    out = np.empty((n_img, n_txt), dtype=np.float32)
    for i0 in range(0, n_img, image_chunk):
        sl = slice(i0, i0 + image_chunk)
        img = _ImageBlock.build(F.normalize(img_slots[sl].float(), dim=-1), img_slot_lens[sl].long())
        gv = F.normalize(img_global[sl].float(), dim=-1)
        for t0 in range(0, n_txt, text_chunk):
            tl = slice(t0, t0 + text_chunk)
            u = F.normalize(txt_slots[tl].float(), dim=-1)
            chamfer, has_any = _chamfer_block(img, u, active[tl], alpha, denominator)
            # Text globals normalised per chunk: repeated row-block calls stay bounded.
            gu = F.normalize(txt_global[tl].float(), dim=-1)
            out[sl, tl] = with_global_fallback(chamfer, has_any, gv, gu, fallback, denominator).numpy()
    return out


@torch.no_grad()
def score_one_lens(
    img_slots: torch.Tensor,
    img_slot_lens: torch.Tensor,
    img_global: torch.Tensor,
    txt_slot: torch.Tensor,
    txt_global: torch.Tensor,
    lens: int,
    *,
    alpha: float = SMOOTH_CHAMFER_ALPHA,
    denominator: float = SMOOTH_CHAMFER_DENOMINATOR,
    fallback: bool = True,
    image_chunk: int = 256,
    text_chunk: int = 8192,
) -> np.ndarray:
    """Eq. 4 with one lens taking part: the scores of main Sec. 4.2's lens-specific slot retrieval.

    txt_slot [n_txt, d] is every text's lens-`lens` slot (all active). Each image's lens-`lens`
    slots meet it by smooth Chamfer; an image without such a slot gets the global cosine (or
    the floor without fallback). The same numbers as `score_lens_slots` with every other image
    and text slot inactive, at the cost of one lens.
    """
    n_img, n_txt = img_slots.shape[0], txt_slot.shape[0]
    out = np.empty((n_img, n_txt), dtype=np.float32)
    for i0 in range(0, n_img, image_chunk):
        sl = slice(i0, i0 + image_chunk)
        slot_lens = img_slot_lens[sl].long()
        only = torch.full_like(slot_lens, INACTIVE).masked_fill_(slot_lens == lens, lens)
        img = _ImageBlock.build(F.normalize(img_slots[sl].float(), dim=-1), only)
        levels, count = img.by_lens[lens], img.slot_counts[:, lens]
        gv = F.normalize(img_global[sl].float(), dim=-1)
        for t0 in range(0, n_txt, text_chunk):
            tl = slice(t0, t0 + text_chunk)
            if fallback:
                block = gv @ F.normalize(txt_global[tl].float(), dim=-1).T
            else:
                block = torch.full((img.n, txt_slot[tl].shape[0]), no_match_floor(denominator))
            if levels is not None:
                side_img, side_txt = _lens_sides(levels, alpha * F.normalize(txt_slot[tl].float(), dim=-1))
                n_slots = count[levels.rows, None]  # the one text slot is every image slot's partner
                one = torch.ones_like(n_slots)
                block[levels.rows] = smooth_chamfer(side_img, n_slots, side_txt, one, alpha, denominator)
            out[sl, tl] = block.numpy()
    return out
