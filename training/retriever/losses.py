"""Training objectives (paper Sec. 3.4, Eqs. 5-10), each a pure function of tensors.

Conventions: `scores` is the lens-aware score matrix [n_img, n_txt] (Eq. 4 with fallback);
`img_ids` [n_img] and `txt_img_ids` [n_txt] are integer image identities, so caption n is a
positive of image b exactly when txt_img_ids[n] == img_ids[b] (several captions of one image in
a batch are all positives). Slot lens tensors hold lens indices 0-4 and -1 for inactive slots.
Every loss returns a 0-dim float32 tensor connected to its inputs' graph, also when no term
applies (then it is an exact zero), so `backward()` never fails and never sees NaN.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _zero_like_graph(*tensors: torch.Tensor) -> torch.Tensor:
    """An exact 0 that still depends on the inputs (keeps autograd/DDP graphs identical)."""
    return sum((t.float().sum() * 0.0 for t in tensors), torch.zeros((), device=tensors[0].device))


def positive_mask(img_ids: torch.Tensor, txt_img_ids: torch.Tensor) -> torch.Tensor:
    """[n_img, n_txt] bool: True where the caption belongs to the image."""
    return img_ids[:, None] == txt_img_ids[None, :]


def _multi_positive_nce(logits: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Mean over rows with >= 1 positive of the mean -log softmax over that row's positives.

    logits: [R, C] float32, pos: [R, C] bool.
    """
    log_p = torch.log_softmax(logits, dim=1)  # [R, C]
    n_pos = pos.sum(dim=1)  # [R]
    has_pos = n_pos > 0
    if not bool(has_pos.any()):
        return _zero_like_graph(logits)
    per_row = -torch.where(pos, log_p, torch.zeros_like(log_p)).sum(dim=1) / n_pos.clamp(min=1)  # [R]
    return per_row[has_pos].mean()


def retrieval_losses(
    scores: torch.Tensor, img_ids: torch.Tensor, txt_img_ids: torch.Tensor, tau: float = 0.07
) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-positive InfoNCE in both directions (Eqs. 5 and 6): returns (L_i2t, L_t2i).

    scores [n_img, n_txt]; img_ids [n_img]; txt_img_ids [n_txt]. Rows (images) or columns
    (captions) without any positive in the batch are left out of the average.
    """
    logits = scores.float() / tau
    pos = positive_mask(img_ids, txt_img_ids)
    return _multi_positive_nce(logits, pos), _multi_positive_nce(logits.T, pos.T)


def retrieval_loss(
    scores: torch.Tensor, img_ids: torch.Tensor, txt_img_ids: torch.Tensor, tau: float = 0.07
) -> torch.Tensor:
    """L_ret = L_i2t + L_t2i (Eq. 7)."""
    i2t, t2i = retrieval_losses(scores, img_ids, txt_img_ids, tau)
    return i2t + t2i


def slot_loss_pairs(img_ids: torch.Tensor, txt_img_ids: torch.Tensor, mode: str = "all") -> torch.Tensor:
    """The (image, caption) index pairs [P, 2] long that Eq. 8's S+ is drawn from.

    "all": every pair (b, n) of the batch, the paper's S+ ("the set of pairs (b, n) for which
    there exists at least one same-lens visual slot"; `caption_slot_loss` drops the pairs
    without one). "positive": matched pairs only (txt_img_ids[n] == img_ids[b]).
    """
    pos = positive_mask(img_ids, txt_img_ids)  # [n_img, n_txt]
    if mode == "all":
        return torch.ones_like(pos).nonzero()
    if mode == "positive":
        return pos.nonzero()
    raise ValueError(f"slot pairs must be 'all' or 'positive', got {mode!r}")


def caption_slot_loss(
    img_slots: torch.Tensor,
    img_slot_lens: torch.Tensor,
    txt_slots: torch.Tensor,
    txt_slot_lens: torch.Tensor,
    pairs: torch.Tensor,
    tau_s: float = 0.07,
) -> torch.Tensor:
    """Lens-conditioned caption-to-slot alignment (Eq. 8).

    img_slots [n_img, S_i, d], img_slot_lens [n_img, S_i], txt_slots [n_txt, S_t, d],
    txt_slot_lens [n_txt, S_t], pairs [P, 2] long (image index, caption index) of the pairs to
    supervise (the caller chooses positives only or all pairs). For each pair and each active
    caption slot j* that has >= 1 same-lens active image slot, the term is the mean over those
    same-lens slots i of -log softmax_{i' active}(cos(v_i', u_j*) / tau_s)[i]. Terms are averaged
    over all (pair, j*) elements; with one active caption slot (training) that is Eq. 8 exactly.
    """
    if pairs.numel() == 0:
        return _zero_like_graph(img_slots, txt_slots)
    v = F.normalize(img_slots.float(), dim=-1)  # [n_img, S_i, d]
    u = F.normalize(txt_slots.float(), dim=-1)  # [n_txt, S_t, d]
    # Every slot cosine once, then the pairs' rows: gathering [P, S, d] per pair would cost
    # P x S x d floats, gigabytes when S+ is every pair of a multi-GPU batch.
    cos = torch.einsum("bsd,njd->bnjs", v, u)[pairs[:, 0], pairs[:, 1]]  # [P, S_t, S_i]
    v_lens, u_lens = img_slot_lens[pairs[:, 0]], txt_slot_lens[pairs[:, 1]]  # [P, S_i], [P, S_t]
    img_active = (v_lens >= 0)[:, None, :]  # [P, 1, S_i]
    same = (
        img_active & (v_lens[:, None, :] == u_lens[:, :, None]) & (u_lens >= 0)[:, :, None]
    )  # [P, S_t, S_i]
    # Masked logits use a finite fill: exp underflows to 0 but gradients stay finite.
    logits = torch.where(img_active, cos / tau_s, torch.full_like(cos, -1.0e4))
    log_p = torch.log_softmax(logits, dim=-1)  # [P, S_t, S_i]
    n_same = same.sum(-1)  # [P, S_t]
    term = -torch.where(same, log_p, torch.zeros_like(log_p)).sum(-1) / n_same.clamp(min=1)  # [P, S_t]
    valid = n_same > 0
    if not bool(valid.any()):
        return _zero_like_graph(img_slots, txt_slots)
    return term[valid].mean()


def slot_diversity_loss(
    img_slots: torch.Tensor, img_slot_lens: torch.Tensor, margin: float = 0.5
) -> torch.Tensor:
    """Intra-image slot diversity hinge (Eq. 9).

    img_slots [n_img, S, d], img_slot_lens [n_img, S]. Mean over all ordered pairs (i != j) of
    active slots of the same image, over the whole batch, of max(0, cos(v_i, v_j) - margin).
    Images with fewer than two active slots contribute no pairs.
    """
    v = F.normalize(img_slots.float(), dim=-1)
    gamma = v @ v.transpose(1, 2)  # [n_img, S, S]
    active = img_slot_lens >= 0
    eye = torch.eye(v.shape[1], dtype=torch.bool, device=v.device)
    omega = active[:, :, None] & active[:, None, :] & ~eye  # [n_img, S, S]
    if not bool(omega.any()):
        return _zero_like_graph(img_slots)
    hinge = torch.clamp(gamma - margin, min=0.0)
    return hinge[omega].sum() / omega.sum()


def total_loss(
    ret: torch.Tensor,
    slot: torch.Tensor,
    div: torch.Tensor,
    lambda_slot: float = 0.05,
    lambda_div: float = 0.01,
) -> torch.Tensor:
    """L_total = L_ret + lambda_slot * L_cap->slot + lambda_div * L_div-img (Eq. 10)."""
    return ret + lambda_slot * slot + lambda_div * div
