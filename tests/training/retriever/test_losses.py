"""Losses (Eqs. 5-10) on small cases computed by hand with `math`."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from training.retriever.losses import (  # noqa: E402
    caption_slot_loss,
    retrieval_loss,
    retrieval_losses,
    slot_diversity_loss,
    slot_loss_pairs,
    total_loss,
)


def _neg_log_softmax(row: list[float], k: int) -> float:
    return -(row[k] - math.log(sum(math.exp(x) for x in row)))


def test_multi_positive_infonce_two_captions_of_one_image():
    # image A (id 10) has captions 0 and 1, image B (id 20) has caption 2.
    scores = torch.tensor([[0.9, 0.5, 0.1], [0.2, 0.3, 0.8]])
    tau = 0.5
    i2t, t2i = retrieval_losses(scores, torch.tensor([10, 20]), torch.tensor([10, 10, 20]), tau=tau)
    s = (scores / tau).tolist()
    want_i2t = ((_neg_log_softmax(s[0], 0) + _neg_log_softmax(s[0], 1)) / 2 + _neg_log_softmax(s[1], 2)) / 2
    cols = [[s[0][n], s[1][n]] for n in range(3)]
    want_t2i = (
        _neg_log_softmax(cols[0], 0) + _neg_log_softmax(cols[1], 0) + _neg_log_softmax(cols[2], 1)
    ) / 3
    assert i2t.item() == pytest.approx(want_i2t, rel=1e-6)
    assert t2i.item() == pytest.approx(want_t2i, rel=1e-6)
    assert retrieval_loss(
        scores, torch.tensor([10, 20]), torch.tensor([10, 10, 20]), tau
    ).item() == pytest.approx(want_i2t + want_t2i, rel=1e-6)


def test_caption_without_positive_is_only_a_negative():
    scores = torch.tensor([[0.9, 0.4], [0.1, 0.7]])
    # caption 1 belongs to an image that is not in the batch (id 99)
    i2t, t2i = retrieval_losses(scores, torch.tensor([1, 2]), torch.tensor([1, 99]), tau=1.0)
    s = scores.tolist()
    assert i2t.item() == pytest.approx(_neg_log_softmax(s[0], 0), rel=1e-6)  # image 2 has no positive
    assert t2i.item() == pytest.approx(_neg_log_softmax([s[0][0], s[1][0]], 0), rel=1e-6)


def test_retrieval_loss_prefers_correct_ranking_and_has_gradients():
    img_ids, txt_ids = torch.tensor([0, 1]), torch.tensor([0, 0, 1])
    good = torch.tensor([[0.9, 0.8, 0.1], [0.1, 0.2, 0.9]], requires_grad=True)
    bad = torch.tensor([[0.1, 0.2, 0.9], [0.9, 0.8, 0.1]])
    loss = retrieval_loss(good, img_ids, txt_ids)
    assert loss < retrieval_loss(bad, img_ids, txt_ids)
    loss.backward()
    assert torch.isfinite(good.grad).all() and good.grad.abs().sum() > 0


def _slots(rows: list[list[list[float]]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def test_caption_slot_loss_hand_computed_with_single_slot_image():
    e1, e2, e3 = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]
    # image 0: lenses [Literal, Figurative, Figurative]; image 1: one active Figurative slot + padding.
    img_slots = _slots([[e1, e2, e3], [e2, [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    img_lens = torch.tensor([[0, 1, 1], [1, -1, -1]])
    u = [0.0, 0.6, 0.8]
    zero = [0.0, 0.0, 0.0]
    # caption 0: active Figurative slot (index 1); caption 1: active Emotional slot, no partner anywhere.
    txt_slots = _slots([[zero, u, zero, zero, zero], [zero, zero, zero, zero, u]])
    txt_lens = torch.tensor([[-1, 1, -1, -1, -1], [-1, -1, -1, -1, 4]])
    pairs = torch.tensor([[0, 0], [1, 0], [0, 1]])
    tau_s = 0.5
    loss = caption_slot_loss(img_slots, img_lens, txt_slots, txt_lens, pairs, tau_s=tau_s)
    logits = [0.0 / tau_s, 0.6 / tau_s, 0.8 / tau_s]  # cos(u, e1), cos(u, e2), cos(u, e3)
    term_image0 = (_neg_log_softmax(logits, 1) + _neg_log_softmax(logits, 2)) / 2
    term_image1 = 0.0  # a single active slot that shares the lens: softmax over one slot is 1
    # pair (0, 1) has no same-lens slot: it is not in S+ and does not count.
    assert loss.item() == pytest.approx((term_image0 + term_image1) / 2, rel=1e-6)


def test_eq8_s_plus_defaults_to_every_batch_pair_with_a_same_lens_slot():
    e1, e2, e3, zero = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]
    # image 0 (id 10): Literal e1, Figurative e2; image 1 (id 11): one Figurative slot e3.
    img_slots = _slots([[e1, e2], [e3, zero]])
    img_lens = torch.tensor([[0, 1], [1, -1]])
    # caption 0 (of image 0): Figurative slot u; caption 1 (of image 1): Literal slot e1.
    u = [0.0, 0.6, 0.8]
    txt_slots = _slots([[zero, u, zero, zero, zero], [e1, zero, zero, zero, zero]])
    txt_lens = torch.tensor([[-1, 1, -1, -1, -1], [0, -1, -1, -1, -1]])
    img_ids, txt_img_ids = torch.tensor([10, 11]), torch.tensor([10, 11])
    tau = 0.5
    every = slot_loss_pairs(img_ids, txt_img_ids)  # the default is the paper's "pairs (b, n)"
    assert sorted(map(tuple, every.tolist())) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    matched = slot_loss_pairs(img_ids, txt_img_ids, "positive")
    assert sorted(map(tuple, matched.tolist())) == [(0, 0), (1, 1)]
    t00 = _neg_log_softmax([0.0 / tau, 0.6 / tau], 1)  # caption 0 on image 0: its Figurative slot
    t01 = _neg_log_softmax([1.0 / tau, 0.0 / tau], 0)  # caption 1 (Literal) on image 0's Literal slot
    t10 = 0.0  # caption 0 on image 1: one active slot, same lens
    # (1, 1): image 1 has no Literal slot, so the pair is outside S+ in both modes.
    loss_all = caption_slot_loss(img_slots, img_lens, txt_slots, txt_lens, every, tau_s=tau)
    assert loss_all.item() == pytest.approx((t00 + t01 + t10) / 3, rel=1e-6)
    loss_matched = caption_slot_loss(img_slots, img_lens, txt_slots, txt_lens, matched, tau_s=tau)
    assert loss_matched.item() == pytest.approx(t00, rel=1e-6)
    with pytest.raises(ValueError, match="slot pairs"):
        slot_loss_pairs(img_ids, txt_img_ids, "matched")
    from training.retriever.config import LossConfig

    assert LossConfig().slot_pairs == "all"  # the model's loss uses the paper's S+ unless told


def test_caption_slot_loss_zero_without_pairs_keeps_graph():
    img = torch.randn(2, 3, 4, requires_grad=True)
    txt = torch.randn(2, 5, 4, requires_grad=True)
    lens = torch.full((2, 3), -1)
    loss = caption_slot_loss(img, lens, txt, torch.full((2, 5), -1), torch.tensor([[0, 0], [1, 1]]))
    assert loss.item() == 0.0
    loss.backward()
    assert torch.isfinite(img.grad).all() and img.grad.abs().sum() == 0


def test_slot_diversity_hinge_hand_computed():
    e1, e2 = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]
    mixed = [0.6, 0.8, 0.0]
    zero = [0.0, 0.0, 0.0]
    img_slots = _slots([[e1, e1, mixed], [e1, zero, zero], [e1, e2, zero]])
    img_lens = torch.tensor([[0, 1, 2], [3, -1, -1], [0, 4, -1]])
    loss = slot_diversity_loss(img_slots, img_lens, margin=0.5)
    # image 0 ordered pairs: (0,1),(1,0): cos 1 -> 0.5; four pairs with cos 0.6 -> 0.1 each
    # image 1 (single active slot) adds no pair; image 2: two orthogonal slots -> two zero terms
    assert loss.item() == pytest.approx((2 * 0.5 + 4 * 0.1) / (6 + 2), rel=1e-6)


def test_slot_diversity_zero_when_no_pairs_and_gradient_pushes_apart():
    single = torch.randn(3, 4, 8, requires_grad=True)
    lens = torch.tensor([[0, -1, -1, -1]] * 3)
    assert slot_diversity_loss(single, lens).item() == 0.0
    close = torch.tensor([[[1.0, 0.0], [1.0, 0.1]]], requires_grad=True)
    loss = slot_diversity_loss(close, torch.tensor([[0, 1]]), margin=0.2)
    loss.backward()
    before = torch.nn.functional.cosine_similarity(close[0, 0], close[0, 1], dim=0)
    stepped = close.detach() - 0.1 * close.grad
    after = torch.nn.functional.cosine_similarity(stepped[0, 0], stepped[0, 1], dim=0)
    assert after < before


def test_total_loss_weights():
    got = total_loss(
        torch.tensor(2.0), torch.tensor(3.0), torch.tensor(5.0), lambda_slot=0.05, lambda_div=0.01
    )
    assert got.item() == pytest.approx(2.0 + 0.15 + 0.05)
