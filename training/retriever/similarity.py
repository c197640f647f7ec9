"""Lens-masked smooth-Chamfer similarity with global fallback (paper Sec. 3.3, Eq. 4).

For an image b and a caption n, only slots that are active (lens >= 0) and carry the same lens
interact. With S the slot-slot cosine matrix restricted to those pairs,

    side_img = mean over image slots i with >= 1 partner of  logsumexp_j(alpha * S[i, j]) / alpha
    side_txt = mean over text slots j with >= 1 partner of   logsumexp_i(alpha * S[i, j]) / alpha
    s(b, n)  = (side_img + side_txt) / denominator

which is the DivE/SetDiv smooth-Chamfer form (alpha 16, denominator 2 in the paper, written once
as `training.retriever.config.SMOOTH_CHAMFER_*`; the paper's "Z/Z" normaliser is read as "average
over the slots that take part"). When a pair has no
same-lens active slot pair, the score is the cosine of the two global embeddings (`fallback`),
or NO-MATCH floor `-2/denominator - 1`, strictly below any smooth-Chamfer score (each side is
>= -1), when `fallback=False`.

Numerics: everything runs in float32; masked logits get a large *finite* negative value, and
sides with no partner are zeroed with `torch.where` on finite inputs, so neither values nor
gradients can become NaN, even for fully masked rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from training.retriever.config import SMOOTH_CHAMFER_ALPHA, SMOOTH_CHAMFER_DENOMINATOR

DEFAULT_CHUNK = 64


@dataclass(frozen=True)
class LensScores:
    """Scores plus the per-pair diagnostics the evaluation needs.

    scores:        [n_img, n_txt] float32
    used_fallback: [n_img, n_txt] bool, True where no same-lens active slot pair existed
    best_img_slot: [n_img, n_txt] long, index of the image slot holding the best same-lens
                   cosine (the "winning" slot used for routing analyses), -1 where fallback.
    """

    scores: torch.Tensor
    used_fallback: torch.Tensor
    best_img_slot: torch.Tensor


def no_match_floor(denominator: float) -> float:
    """Score given to pairs without a same-lens slot pair when the global fallback is off."""
    return -2.0 / denominator - 1.0


def smooth_chamfer(
    img_side_sum: torch.Tensor,  # [..] sum over partnered image slots of logsumexp_j(alpha * S[i, j])
    img_partners: torch.Tensor,  # [..] how many image slots have a partner
    txt_side_sum: torch.Tensor,  # [..] the same over partnered text slots
    txt_partners: torch.Tensor,  # [..]
    alpha: float,
    denominator: float,
) -> torch.Tensor:
    """Eq. 4 from the two sides' logsumexp sums: each side averaged over its partnered slots, the
    sum over `alpha * denominator`. The one place the formula is written (the evaluation's per-lens
    scorer, `training.evaluation.scoring.similarity`, computes the sums another way and calls this too)."""
    side_img = img_side_sum / img_partners.clamp(min=1)
    side_txt = txt_side_sum / txt_partners.clamp(min=1)
    return (side_img + side_txt) / (alpha * denominator)


def with_global_fallback(
    chamfer: torch.Tensor,  # [ci, ct]
    has_any: torch.Tensor,  # [ci, ct] bool: the pair has a same-lens active slot pair
    img_global: torch.Tensor,  # [ci, d] unit rows
    txt_global: torch.Tensor,  # [ct, d] unit rows
    fallback: bool,
    denominator: float,
) -> torch.Tensor:
    """The smooth-Chamfer score where a pair has a same-lens slot pair, else the global cosine
    (`fallback`) or the no-match floor."""
    backup = img_global @ txt_global.T if fallback else torch.full_like(chamfer, no_match_floor(denominator))
    return torch.where(has_any, chamfer, backup)


def _pair_block(
    v: torch.Tensor,  # [ci, Si, d] unit rows
    v_lens: torch.Tensor,  # [ci, Si]
    u: torch.Tensor,  # [ct, St, d] unit rows
    u_lens: torch.Tensor,  # [ct, St]
    alpha: float,
    denominator: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Smooth-Chamfer scores, has-any-pair mask and best image slot for one block of pairs."""
    ci, si, d = v.shape
    ct, st, _ = u.shape
    # one GEMM over all slot pairs, then a view: [ci*Si, ct*St] -> [ci, ct, Si, St]
    cos = (v.reshape(ci * si, d) @ u.reshape(ct * st, d).T).view(ci, si, ct, st).transpose(1, 2)
    same = (v_lens[:, None, :, None] == u_lens[None, :, None, :]) & (v_lens >= 0)[:, None, :, None]
    same = same & (u_lens >= 0)[None, :, None, :]  # [ci, ct, Si, St]
    # Finite fill: exp(fill - max) underflows to exactly 0 next to any real logit (|logit| <= alpha).
    fill = -(abs(alpha) + 1.0e4)
    logits = torch.where(same, alpha * cos, torch.full_like(cos, fill))

    img_has = same.any(dim=3)  # [ci, ct, Si]
    txt_has = same.any(dim=2)  # [ci, ct, St]
    lse_img = torch.where(img_has, torch.logsumexp(logits, dim=3), torch.zeros_like(img_has, dtype=cos.dtype))
    lse_txt = torch.where(txt_has, torch.logsumexp(logits, dim=2), torch.zeros_like(txt_has, dtype=cos.dtype))
    chamfer = smooth_chamfer(
        lse_img.sum(-1), img_has.sum(-1), lse_txt.sum(-1), txt_has.sum(-1), alpha, denominator
    )  # [ci, ct]

    has_any = img_has.any(dim=2)  # [ci, ct]
    best_per_img_slot = torch.where(same, cos, torch.full_like(cos, -3.0)).amax(dim=3)  # [ci, ct, Si]
    best_slot = torch.where(
        has_any, best_per_img_slot.argmax(dim=2), torch.full_like(has_any, -1, dtype=torch.long)
    )
    return chamfer, has_any, best_slot


def _check_shapes(img_slots, img_slot_lens, img_global, txt_slots, txt_slot_lens, txt_global) -> None:
    if img_slots.dim() != 3 or txt_slots.dim() != 3:
        raise ValueError(
            f"slots must be [n, S, d]; got {tuple(img_slots.shape)} and {tuple(txt_slots.shape)}"
        )
    if img_slot_lens.shape != img_slots.shape[:2] or txt_slot_lens.shape != txt_slots.shape[:2]:
        raise ValueError("slot lens tensors must be [n, S] matching their slots")
    if img_global.shape != (img_slots.shape[0], img_slots.shape[2]):
        raise ValueError(f"img_global must be [n_img, d]; got {tuple(img_global.shape)}")
    if txt_global.shape != (txt_slots.shape[0], txt_slots.shape[2]):
        raise ValueError(f"txt_global must be [n_txt, d]; got {tuple(txt_global.shape)}")
    if img_slots.shape[2] != txt_slots.shape[2]:
        raise ValueError("image and text embeddings must share the hidden size")


def lens_similarity_with_details(
    img_slots: torch.Tensor,
    img_slot_lens: torch.Tensor,
    img_global: torch.Tensor,
    txt_slots: torch.Tensor,
    txt_slot_lens: torch.Tensor,
    txt_global: torch.Tensor,
    *,
    alpha: float = SMOOTH_CHAMFER_ALPHA,
    denominator: float = SMOOTH_CHAMFER_DENOMINATOR,
    fallback: bool = True,
    chunk_images: int = DEFAULT_CHUNK,
    chunk_texts: int = 4 * DEFAULT_CHUNK,
) -> LensScores:
    """Lens-aware score matrix [n_img, n_txt] with fallback mask and winning image slot.

    Shapes: img_slots [n_img, S_i, d], img_slot_lens [n_img, S_i] long (0-4 or -1),
    img_global [n_img, d], txt_slots [n_txt, S_t, d], txt_slot_lens [n_txt, S_t], txt_global [n_txt, d].
    Work is chunked over both axes so the [ci, ct, S_i, S_t] block stays bounded.
    """
    _check_shapes(img_slots, img_slot_lens, img_global, txt_slots, txt_slot_lens, txt_global)
    v = F.normalize(img_slots.float(), dim=-1)
    u = F.normalize(txt_slots.float(), dim=-1)
    gv = F.normalize(img_global.float(), dim=-1)
    gu = F.normalize(txt_global.float(), dim=-1)
    v_lens, u_lens = img_slot_lens.long(), txt_slot_lens.long()
    floor = no_match_floor(denominator)

    n_img, n_txt = v.shape[0], u.shape[0]
    if n_img == 0 or n_txt == 0:
        empty = v.new_zeros(n_img, n_txt)
        return LensScores(empty, empty.bool(), empty.long())
    if v.shape[1] == 0 or u.shape[1] == 0:  # no slots on one side (e.g. no prompts): all fallback
        scores = gv @ gu.T if fallback else torch.full((n_img, n_txt), floor, device=v.device)
        fb = torch.ones(n_img, n_txt, dtype=torch.bool, device=v.device)
        return LensScores(scores, fb, torch.full((n_img, n_txt), -1, dtype=torch.long, device=v.device))
    rows, fb_rows, best_rows = [], [], []
    for i0 in range(0, n_img, chunk_images):
        cols, fb_cols, best_cols = [], [], []
        for t0 in range(0, n_txt, chunk_texts):
            sl_i, sl_t = slice(i0, i0 + chunk_images), slice(t0, t0 + chunk_texts)
            chamfer, has_any, best = _pair_block(
                v[sl_i], v_lens[sl_i], u[sl_t], u_lens[sl_t], alpha, denominator
            )
            cols.append(with_global_fallback(chamfer, has_any, gv[sl_i], gu[sl_t], fallback, denominator))
            fb_cols.append(~has_any)
            best_cols.append(best)
        rows.append(torch.cat(cols, dim=1))
        fb_rows.append(torch.cat(fb_cols, dim=1))
        best_rows.append(torch.cat(best_cols, dim=1))
    return LensScores(torch.cat(rows), torch.cat(fb_rows), torch.cat(best_rows))


def lens_similarity(
    img_slots: torch.Tensor,
    img_slot_lens: torch.Tensor,
    img_global: torch.Tensor,
    txt_slots: torch.Tensor,
    txt_slot_lens: torch.Tensor,
    txt_global: torch.Tensor,
    *,
    alpha: float = SMOOTH_CHAMFER_ALPHA,
    denominator: float = SMOOTH_CHAMFER_DENOMINATOR,
    fallback: bool = True,
) -> torch.Tensor:
    """Lens-aware score matrix [n_img, n_txt] (float32); see `lens_similarity_with_details`."""
    return lens_similarity_with_details(
        img_slots,
        img_slot_lens,
        img_global,
        txt_slots,
        txt_slot_lens,
        txt_global,
        alpha=alpha,
        denominator=denominator,
        fallback=fallback,
    ).scores


def global_similarity(img_global: torch.Tensor, txt_global: torch.Tensor) -> torch.Tensor:
    """Cosine matrix [n_img, n_txt] of global embeddings (the global-only baseline's score)."""
    return F.normalize(img_global.float(), dim=-1) @ F.normalize(txt_global.float(), dim=-1).T
