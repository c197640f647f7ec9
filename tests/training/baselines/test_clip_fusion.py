"""Seed 004's weighted CLIP ensemble (Eq. 2, weights tuned on validation rows) and MLP fusion (Eq. 3)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.baselines.clip_fusion import (
    Embeddings,
    MLPRecipe,
    candidate_pairs,
    convex_weight_grid,
    mlp_score_matrix,
    pair_features,
    train_fusion_mlp,
    tune_weights,
    weighted_ensemble,
)
from training.external.irfl import DetectionTask, detection_accuracy


def test_weight_grid_is_the_convex_simplex_in_tenths():
    grid = convex_weight_grid(4, 0.1)
    assert grid.shape == (286, 4)  # C(10 + 3, 3) points
    assert np.allclose(grid.sum(1), 1) and (grid >= 0).all()
    assert len({tuple(np.round(g, 6)) for g in grid}) == 286
    for row in ([0.1, 0.1, 0.2, 0.6], [0.5, 0.1, 0.2, 0.2], [0, 0, 0, 1]):  # seed 004 Table 2 rows
        assert np.isclose(grid, row).all(1).any()
    with pytest.raises(ValueError, match="divide 1"):
        convex_weight_grid(4, 0.3)


def test_weighted_ensemble_is_the_convex_combination():
    sims = np.random.default_rng(0).normal(size=(3, 2, 5))
    got = weighted_ensemble(sims, [0.2, 0.5, 0.3])
    np.testing.assert_allclose(got, 0.2 * sims[0] + 0.5 * sims[1] + 0.3 * sims[2])
    for bad in ([0.5, 0.5, 0.5], [1.2, -0.2, 0.0], [0.5, 0.5]):
        with pytest.raises(ValueError, match="summing to 1"):
            weighted_ensemble(sims, bad)


def _task(n_rows: int) -> DetectionTask:
    """Row r: candidates 4r..4r+3 (three distractors, then the answer)."""
    cands = [np.arange(4 * r, 4 * r + 4) for r in range(n_rows)]
    return DetectionTask([f"p{r}" for r in range(n_rows)], ["idiom"] * n_rows, [f"i{j}" for j in range(4 * n_rows)],
                         cands, np.ones(n_rows, np.int64))  # fmt: skip


def test_tuned_weights_are_the_best_on_validation_rows():
    task = _task(4)
    rng = np.random.default_rng(1)
    sims = rng.normal(0, 0.1, size=(3, 4, 16))
    for r in range(4):  # variant 2 ranks every answer first; variant 0 ranks it last
        sims[2, r, 4 * r + 3] += 1.0
        sims[0, r, 4 * r + 3] -= 5.0
    w, acc, grid, accs = tune_weights(sims, lambda s: detection_accuracy(task, s)["accuracy"])
    assert acc == 100.0 and accs.max() == 100.0 and len(accs) == len(grid) == 66
    assert w[0] <= 0.1 and w[2] >= 0.8  # variant 0's weight must stay small
    first_best = grid[int(np.argmax(accs == 100.0))]
    np.testing.assert_allclose(w, first_best)  # ties keep the first grid point


def test_pair_features_concatenate_image_then_text_per_variant():
    emb = Embeddings([torch.ones(3, 2), 2 * torch.ones(3, 4)], [3 * torch.ones(5, 2), 4 * torch.ones(5, 4)])
    phrase, image, label = candidate_pairs([np.array([0, 2]), np.array([1])], np.array([1, 1]))
    assert phrase.tolist() == [0, 0, 1] and image.tolist() == [0, 2, 1] and label.tolist() == [0, 1, 1]
    h = pair_features(emb, phrase, image)
    assert h.shape == (3, 12)
    assert h[0].tolist() == [1, 1, 3, 3, 2, 2, 2, 2, 4, 4, 4, 4]


def _separable(n_rows: int, seed: int) -> tuple[Embeddings, DetectionTask]:
    """Answers' images share a direction that distractors lack; texts are noise."""
    g = torch.Generator().manual_seed(seed)
    task = _task(n_rows)
    images = torch.randn(4 * n_rows, 6, generator=g) * 0.1
    images[3::4, 0] += 1.0
    return Embeddings([images], [torch.randn(n_rows, 6, generator=g)]), task


def test_mlp_learns_a_separable_task_and_keeps_its_best_epoch():
    train_emb, train_task = _separable(12, 0)
    valid_emb, valid_task = _separable(6, 1)

    def valid_accuracy(model):
        return detection_accuracy(valid_task, mlp_score_matrix(model, valid_emb, valid_task.candidates))[
            "accuracy"
        ]

    recipe = MLPRecipe(hidden=(16, 8), lr=1e-2, batch_size=8, max_epochs=60, patience=5)
    model, history = train_fusion_mlp(
        (train_emb, train_task.candidates, train_task.n_answers), valid_accuracy, recipe
    )
    assert max(history["valid_accuracy"]) == 100.0
    assert history["epochs_run"] < recipe.max_epochs  # stopped early after reaching 100 %
    assert valid_accuracy(model) == history["valid_accuracy"][history["best_epoch"]]
    assert history["train_loss"][-1] < history["train_loss"][0]
    sim = mlp_score_matrix(model, valid_emb, valid_task.candidates)
    assert np.isfinite(sim[0, :4]).all() and np.isnan(sim[0, 4:]).all()  # only candidates are scored


def test_mlp_returns_the_weights_of_its_best_validation_epoch():
    emb, task = _separable(6, 0)
    scripted = iter([10.0, 50.0, 20.0, 30.0, 40.0, 45.0])  # best at epoch 1, then 4 epochs without gain
    snapshots = []

    def valid_accuracy(model):
        snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
        return next(scripted)

    recipe = MLPRecipe(hidden=(8, 4), lr=1e-2, batch_size=4, max_epochs=50, patience=3)
    model, history = train_fusion_mlp((emb, task.candidates, task.n_answers), valid_accuracy, recipe)
    assert history["best_epoch"] == 1 and history["epochs_run"] == 5  # epochs 2-4 bring nothing: stop
    for key, value in model.state_dict().items():
        assert torch.equal(value, snapshots[1][key])
    assert not torch.equal(snapshots[1]["net.0.weight"], snapshots[-1]["net.0.weight"])
