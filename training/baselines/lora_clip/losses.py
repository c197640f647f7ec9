"""L_dev, the contrastive semantic-deviation objective of seed 004 (Eq. 7), as a pure function.

For a triple (phrase p, figurative image I_fig, literal image I_lit) with cosine scores
s_fig = s(p, I_fig) and s_lit = s(p, I_lit) (Eq. 5):

    L_dev = -log( exp(s_fig / tau) / (exp(s_fig / tau) + exp(s_lit / tau)) )
          = softplus((s_lit - s_fig) / tau)

The second form is the same value, computed without overflow; it shows the seed's remark that
minimising L_dev maximises the margin m = s_fig - s_lit. tau is not given by the seed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def deviation_loss(s_fig: torch.Tensor, s_lit: torch.Tensor, tau: float = 0.07) -> torch.Tensor:
    """Mean L_dev over triples: 0-dim float32, connected to both inputs' graphs.

    s_fig [T], s_lit [T]: cosine of each triple's phrase with its figurative and its (mined)
    literal image. An empty batch gives an exact zero that still backpropagates.
    """
    if s_fig.shape != s_lit.shape or s_fig.dim() != 1:
        raise ValueError(
            f"s_fig and s_lit must be equal 1-d shapes, got {tuple(s_fig.shape)}, {tuple(s_lit.shape)}"
        )
    if tau <= 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    if s_fig.numel() == 0:
        return (s_fig.float().sum() + s_lit.float().sum()) * 0.0
    margin_logits = (s_lit.float() - s_fig.float()) / tau  # [T]
    return F.softplus(margin_logits).mean()


def triple_scores(
    txt: torch.Tensor, img_fig: torch.Tensor, img_lit: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(s_fig [T], s_lit [T]) from unit-norm embeddings txt, img_fig, img_lit, each [T, d]."""
    return (txt * img_fig).sum(-1), (txt * img_lit).sum(-1)
