"""Diagnostics of the lens-slot scores: global-fallback rates per caption lens (supplementary
Table 4) and the routing matrix of supplementary Fig. 1 (which image-slot lens wins for each
caption lens on its own image).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from lenses_data.schemas import LENS_KEYS
from training.evaluation.scoring.similarity import all_lens_text_slots, text_active
from training.retriever.lenses import NUM_LENSES as N_LENSES

_PATTERN_WEIGHTS = 2 ** np.arange(N_LENSES)


def fallback_rates(
    img_slot_lens: Any, txt_slot_lens: Any, caption_image: Any, caption_lens: Any
) -> dict[str, float]:
    """Global-fallback usage per caption lens, in percent (supplementary Table 4).

    `fallback/<lens>/all_pairs`: share of (caption, image) pairs over the whole gallery that
    fall back; `fallback/<lens>/own_image`: share of captions whose pair with their own image
    does. A pair falls back when no active image slot shares a lens with an active text slot,
    so this needs only the lens labels (5-bit presence patterns), not the scores.
    """
    img_lens = np.asarray(img_slot_lens)
    has = np.stack([(img_lens == k).any(1) for k in range(N_LENSES)], axis=1)
    act = text_active(torch.as_tensor(np.asarray(txt_slot_lens))).numpy()
    img_pat, txt_pat = has @ _PATTERN_WEIGHTS, act @ _PATTERN_WEIGHTS
    per_pattern = np.bincount(img_pat, minlength=2**N_LENSES)
    patterns = np.arange(2**N_LENSES)
    # Number of images sharing no lens with each text pattern.
    disjoint = np.array([per_pattern[(patterns & a) == 0].sum() for a in patterns])
    all_pairs = disjoint[txt_pat] / len(img_lens)
    own = (img_pat[np.asarray(caption_image)] & txt_pat) == 0
    cl = np.asarray(caption_lens)
    out: dict[str, float] = {}
    for k, name in enumerate(LENS_KEYS):
        mine = cl == k
        out[f"fallback/{name}/all_pairs"] = (
            float(all_pairs[mine].mean() * 100) if mine.any() else float("nan")
        )
        out[f"fallback/{name}/own_image"] = float(own[mine].mean() * 100) if mine.any() else float("nan")
    return out


@dataclass
class Routing:
    """Which image slot wins each caption on its own image (supplementary Fig. 1).

    by_lens[c, l]: captions of lens c whose best same-lens slot pair uses an image slot of
    lens l; by_slot[c, s]: the same by image slot index; fallback[c]: captions with no
    same-lens slot pair at all (not counted above).
    """

    by_lens: np.ndarray  # [5, 5] int
    by_slot: np.ndarray  # [5, S] int
    fallback: np.ndarray  # [5] int

    def percent(self, counts: np.ndarray) -> np.ndarray:
        total = counts.sum(1, keepdims=True)
        return np.where(total > 0, counts / np.maximum(total, 1) * 100.0, np.nan)


@torch.no_grad()
def routing_matrix(
    img_slots: torch.Tensor,
    img_slot_lens: torch.Tensor,
    txt_slots: torch.Tensor,
    caption_image: Any,
    caption_lens: Any,
    *,
    txt_slot_lens: torch.Tensor | None = None,
    max_chunk_floats: int = 2**24,
) -> Routing:
    """Winning image slot (highest same-lens cosine) for every caption with its own image."""
    n_txt, n_slots = txt_slots.shape[0], img_slots.shape[1]
    active = text_active(all_lens_text_slots(n_txt) if txt_slot_lens is None else txt_slot_lens)
    ci = torch.as_tensor(np.asarray(caption_image), dtype=torch.long)
    cl = torch.as_tensor(np.asarray(caption_lens), dtype=torch.long)
    by_lens = torch.zeros(N_LENSES, N_LENSES, dtype=torch.long)
    by_slot = torch.zeros(N_LENSES, n_slots, dtype=torch.long)
    fallback = torch.zeros(N_LENSES, dtype=torch.long)
    step = max(1, max_chunk_floats // max(1, n_slots * img_slots.shape[2]))
    for t0 in range(0, n_txt, step):
        tl = slice(t0, t0 + step)
        v = F.normalize(img_slots[ci[tl]].float(), dim=-1)  # [c, S, d]
        lens = img_slot_lens[ci[tl]].long()  # [c, S]
        u = F.normalize(txt_slots[tl].float(), dim=-1)  # [c, 5, d]
        partner = u.gather(
            1, lens.clamp(min=0)[..., None].expand_as(v)
        )  # text slot of each image slot's lens
        valid = (lens >= 0) & active[tl].gather(1, lens.clamp(min=0))
        cos = torch.where(valid, (v * partner).sum(-1), torch.full_like(lens, -3, dtype=v.dtype))
        winner = cos.argmax(1)
        ok = valid.any(1)
        c_lens = cl[tl]
        fallback += torch.bincount(c_lens[~ok], minlength=N_LENSES)
        win_lens = lens.gather(1, winner[:, None])[:, 0]
        by_lens.index_put_(
            (c_lens[ok], win_lens[ok]), torch.ones(int(ok.sum()), dtype=torch.long), accumulate=True
        )
        by_slot.index_put_(
            (c_lens[ok], winner[ok]), torch.ones(int(ok.sum()), dtype=torch.long), accumulate=True
        )
    return Routing(by_lens.numpy(), by_slot.numpy(), fallback.numpy())
