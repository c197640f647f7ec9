"""Ablations of the lens model on its own fixed embeddings: the similarity variants of
supplementary Table 3 and text-only prompt<->caption retrieval (main Table 3b).

Every scorer returns a float32 numpy [n_images, n_texts] matrix for `training.evaluation.metrics.retrieval`.
Other systems (zero-shot open_clip, the global-only fine-tuned model) are in `training.baselines`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F

from training.baselines.global_only import global_scores
from training.evaluation.metrics.retrieval import grouped_retrieval_metrics
from training.evaluation.scoring.similarity import all_lens_text_slots, score_lens_slots, text_active
from training.retriever.config import SMOOTH_CHAMFER_ALPHA, SMOOTH_CHAMFER_DENOMINATOR
from training.retriever.similarity import smooth_chamfer, with_global_fallback

SimilarityVariant = Literal["global", "no_mask", "lens_masked", "lens_masked_global"]
SIMILARITY_VARIANTS: tuple[str, ...] = ("global", "no_mask", "lens_masked", "lens_masked_global")


@torch.no_grad()
def no_mask_scores(
    img_slots: torch.Tensor,
    img_slot_lens: torch.Tensor,
    img_global: torch.Tensor,
    txt_slots: torch.Tensor,
    txt_global: torch.Tensor,
    *,
    txt_slot_lens: torch.Tensor | None = None,
    alpha: float = SMOOTH_CHAMFER_ALPHA,
    denominator: float = SMOOTH_CHAMFER_DENOMINATOR,
    image_chunk: int = 128,
    text_chunk: int = 1024,
) -> np.ndarray:
    """Smooth Chamfer over all active slots, ignoring lens labels ("No-mask" of Table 3).

    Pairs with no active slot on either side use the global cosine, as the full model does.
    """
    n_txt = txt_slots.shape[0]
    active = text_active(all_lens_text_slots(n_txt) if txt_slot_lens is None else txt_slot_lens)
    out = np.empty((img_slots.shape[0], n_txt), dtype=np.float32)
    gu_all = F.normalize(txt_global.float(), dim=-1)
    for i0 in range(0, img_slots.shape[0], image_chunk):
        sl = slice(i0, i0 + image_chunk)
        img_on = img_slot_lens[sl].long() >= 0  # [b, S]
        v = F.normalize(img_slots[sl].float(), dim=-1)
        n_img_slots = img_on.sum(1).float()
        gv = F.normalize(img_global[sl].float(), dim=-1)
        for t0 in range(0, n_txt, text_chunk):
            tl = slice(t0, t0 + text_chunk)
            act = active[tl]  # [c, 5]
            u = F.normalize(txt_slots[tl].float(), dim=-1)
            both = img_on[:, :, None, None] & act[None, None]  # [b, S, c, 5]
            logits = (alpha * torch.einsum("bsd,cjd->bscj", v, u)).masked_fill_(~both, -torch.inf)
            # Image side: per active image slot, logsumexp over the caption's active slots.
            per_slot = torch.logsumexp(logits, dim=3)  # [b, S, c]
            per_slot = torch.where(both.any(3), per_slot, torch.zeros_like(per_slot))
            # Text side: per active text slot, logsumexp over the image's active slots.
            per_txt = torch.logsumexp(logits, dim=1)  # [b, c, 5]
            per_txt = torch.where(both.any(1), per_txt, torch.zeros_like(per_txt))
            partners = (n_img_slots[:, None], act.sum(1)[None])  # every active slot meets every other
            chamfer = smooth_chamfer(
                per_slot.sum(1), partners[0], per_txt.sum(2), partners[1], alpha, denominator
            )
            has_any = (n_img_slots > 0)[:, None] & act.any(1)[None]
            out[sl, tl] = with_global_fallback(chamfer, has_any, gv, gu_all[tl], True, denominator).numpy()
    return out


def similarity_ablation_scores(
    variant: SimilarityVariant,
    img_slots: torch.Tensor,
    img_slot_lens: torch.Tensor,
    img_global: torch.Tensor,
    txt_slots: torch.Tensor,
    txt_global: torch.Tensor,
    *,
    alpha: float = SMOOTH_CHAMFER_ALPHA,
    denominator: float = SMOOTH_CHAMFER_DENOMINATOR,
) -> np.ndarray:
    """Scores of one similarity variant on fixed embeddings (all five text slots active)."""
    if variant == "global":
        return global_scores(img_global, txt_global)
    if variant == "no_mask":
        return no_mask_scores(
            img_slots, img_slot_lens, img_global, txt_slots, txt_global, alpha=alpha, denominator=denominator
        )
    if variant in ("lens_masked", "lens_masked_global"):
        return score_lens_slots(
            img_slots,
            img_slot_lens,
            img_global,
            txt_slots,
            txt_global,
            alpha=alpha,
            denominator=denominator,
            fallback=variant == "lens_masked_global",
        )
    raise ValueError(f"unknown similarity variant {variant!r}; expected one of {SIMILARITY_VARIANTS}")


def text_only_retrieval(
    prompt_emb: Any,
    prompt_image: Sequence,
    prompt_lens: Sequence,
    caption_emb: Any,
    caption_image: Sequence,
    caption_lens: Sequence,
    *,
    ks: Sequence[int] = (1, 5, 10),
) -> dict[str, float]:
    """Prompt->caption (P2C) and caption->prompt (C2P) retrieval without images (Table 3b).

    A prompt and a caption match when they belong to the same image and the same lens; scores
    are cosines of the two texts' embeddings. Keys: `P2C/R@K`, `C2P/R@K`, meanR, medR, mAP@R.
    """
    sim = global_scores(torch.as_tensor(prompt_emb), torch.as_tensor(caption_emb))
    p_key = np.char.add(
        np.asarray(prompt_image, dtype=str), np.char.add("|", np.asarray(prompt_lens, dtype=str))
    )
    c_key = np.char.add(
        np.asarray(caption_image, dtype=str), np.char.add("|", np.asarray(caption_lens, dtype=str))
    )
    out: dict[str, float] = {}
    for name, matrix, q, g in (("P2C", sim, p_key, c_key), ("C2P", sim.T, c_key, p_key)):
        for key, value in grouped_retrieval_metrics(matrix, q, g, ks=ks).items():
            out[f"{name}/{key}"] = value
    return out
