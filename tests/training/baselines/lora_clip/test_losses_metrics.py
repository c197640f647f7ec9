"""L_dev against its written form, and the IRFL margin / literal-bias metrics on hand-built rows."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from training.baselines.lora_clip.losses import deviation_loss, triple_scores
from training.baselines.lora_clip.metrics import figurative_metrics, forced_choices
from training.external.irfl import DetectionTask


def test_deviation_loss_is_eq7():
    g = torch.Generator().manual_seed(0)
    s_fig, s_lit = torch.rand(7, generator=g) * 2 - 1, torch.rand(7, generator=g) * 2 - 1
    tau = 0.1
    expected = [
        -math.log(math.exp(f / tau) / (math.exp(f / tau) + math.exp(lit / tau)))
        for f, lit in zip(s_fig.tolist(), s_lit.tolist(), strict=True)
    ]
    assert deviation_loss(s_fig, s_lit, tau).item() == pytest.approx(np.mean(expected), rel=1e-5)
    # Equal scores: a fair coin, log 2; a wide positive margin drives it to ~0, a negative one up.
    assert deviation_loss(torch.zeros(3), torch.zeros(3)).item() == pytest.approx(math.log(2), rel=1e-6)
    assert deviation_loss(torch.ones(1), -torch.ones(1), 0.07).item() < 1e-6
    assert deviation_loss(-torch.ones(1), torch.ones(1), 0.07).item() == pytest.approx(2 / 0.07, rel=1e-4)


def test_deviation_loss_gradient_widens_the_margin():
    s_fig = torch.tensor([0.2, 0.5], requires_grad=True)
    s_lit = torch.tensor([0.3, 0.1], requires_grad=True)
    deviation_loss(s_fig, s_lit).backward()
    assert (s_fig.grad < 0).all() and (s_lit.grad > 0).all()  # descent raises s_fig, lowers s_lit
    empty = torch.zeros(0, requires_grad=True)
    loss = deviation_loss(empty, empty)
    loss.backward()
    assert loss.item() == 0.0
    with pytest.raises(ValueError):
        deviation_loss(torch.zeros(2), torch.zeros(3))
    with pytest.raises(ValueError):
        deviation_loss(torch.zeros(2), torch.zeros(2), tau=0.0)


def test_triple_scores_are_rowwise_cosines():
    g = torch.Generator().manual_seed(1)
    t, a, b = (torch.nn.functional.normalize(torch.randn(4, 8, generator=g), dim=-1) for _ in range(3))
    s_fig, s_lit = triple_scores(t, a, b)
    assert torch.allclose(s_fig, torch.diag(t @ a.T)) and torch.allclose(s_lit, torch.diag(t @ b.T))


def _task():
    # row 0: distractors 0, 1 then answer 2; row 1: distractor 3 then answers 4, 5; row 2: 0 vs 5
    return DetectionTask(
        phrases=["a", "b", "c"],
        figurative_type=["idiom", "simile", "idiom"],
        image_paths=[f"{i}.jpeg" for i in range(6)],
        candidates=[np.array([0, 1, 2]), np.array([3, 4, 5]), np.array([0, 5])],
        n_answers=np.array([1, 2, 1]),
    )


def test_figurative_metrics_by_hand():
    sim = np.zeros((3, 6))
    sim[0, [0, 1, 2]] = [0.30, 0.10, 0.20]  # a literal image wins: wrong; pairs +-: -0.10, +0.10
    sim[1, [3, 4, 5]] = [0.25, 0.40, 0.25]  # answer 4 wins: right; pairs: +0.15, 0.00 (a tie: bias)
    sim[2, [0, 5]] = [0.50, 0.90]  # right; pair +0.40
    m = figurative_metrics(_task(), sim)
    assert m["accuracy"] == pytest.approx(200 / 3)
    assert m["n_pairs"] == 5
    assert m["margin"] == pytest.approx((-0.10 + 0.10 + 0.15 + 0.0 + 0.40) / 5)
    assert m["literal_bias"] == pytest.approx(2 / 5 * 100)  # row 0's first pair and row 1's tie
    assert m["accuracy/idiom"] == pytest.approx(50.0) and m["accuracy/simile"] == pytest.approx(100.0)
    assert m["margin/simile"] == pytest.approx(0.075) and m["literal_bias/simile"] == pytest.approx(50.0)
    assert m["n_pairs/idiom"] == 3


def test_binary_choices_bias_is_complement_of_accuracy():
    task = DetectionTask(["p"] * 4, ["idiom"] * 4, ["l", "f"], [np.array([0, 1])] * 4, np.ones(4, np.int64))
    sim = np.array([[0.1, 0.2], [0.3, 0.2], [0.2, 0.2], [0.0, 0.5]])
    m = figurative_metrics(task, sim)
    assert m["accuracy"] == pytest.approx(50.0)  # the tie counts against the model in both metrics
    assert m["literal_bias"] == pytest.approx(100 - m["accuracy"])
    s_fig, s_lit, rows = forced_choices(task, sim)
    assert s_fig.tolist() == [0.2, 0.2, 0.2, 0.5] and s_lit.tolist() == [0.1, 0.3, 0.2, 0.0]
    assert rows.tolist() == [0, 1, 2, 3]
