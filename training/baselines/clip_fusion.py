"""Seed 004's CLIP-ensemble baselines for IRFL (Sec. 3.1): weighted similarity averaging and MLP fusion.

- Weighted ensemble, Eq. 2: S_ens(x, y) = sum_i w_i s_i(x, y) with w_i >= 0, sum_i w_i = 1, where
  s_i is the cosine of CLIP variant i (Eq. 1) and the weights "are tuned on validation data".
  Its Table 2 lists weights in steps of 0.1 and Fig. 2 is a grid search, so the weights here are
  the best of the 0.1-step simplex grid (`convex_weight_grid`) by validation accuracy; a tie
  keeps the first grid point.
- Supervised MLP, Eq. 3: h = [v_1, t_1, ..., v_k, t_k] (the unit-norm image and text embeddings
  of every variant, concatenated) "mapped to a scalar score through a three-layer feedforward
  network", trained "using Adam optimizer with a learning rate of 10^-4 and early stopping"
  (Sec. 4). Not in the seed, ours: the hidden widths (512, 256, ReLU), the loss (binary
  cross-entropy, answers 1 and distractors 0, every candidate of a training row), the batch and
  the stopping rule (best validation accuracy, patience in epochs).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


def convex_weight_grid(k: int, step: float = 0.1) -> np.ndarray:
    """[G, k] every weight vector with entries in multiples of `step` summing to 1."""
    n = round(1 / step)
    if not np.isclose(n * step, 1.0):
        raise ValueError(f"step must divide 1, got {step}")
    points = [c for c in itertools.product(range(n + 1), repeat=k - 1) if sum(c) <= n]
    return np.array([[*c, n - sum(c)] for c in points], dtype=np.float64) / n


def weighted_ensemble(sims: np.ndarray, weights: Sequence[float]) -> np.ndarray:
    """[k, P, I] per-variant cosines, [k] convex weights -> [P, I] S_ens (Eq. 2)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (sims.shape[0],) or (w < 0).any() or not np.isclose(w.sum(), 1.0):
        raise ValueError(
            f"weights must be {sims.shape[0]} non-negative numbers summing to 1, got {w.tolist()}"
        )
    return np.tensordot(w, sims, axes=1)


def tune_weights(
    sims: np.ndarray, accuracy: Callable[[np.ndarray], float], step: float = 0.1
) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    """On validation cosines [k, P, I]: (best weights [k], its accuracy, grid [G, k], accuracies [G])."""
    grid = convex_weight_grid(sims.shape[0], step)
    scores = np.array([accuracy(weighted_ensemble(sims, w)) for w in grid])
    best = int(np.argmax(scores))  # the first of equal maxima
    return grid[best], float(scores[best]), grid, scores


class FusionMLP(nn.Module):
    """Three linear layers from the concatenated embeddings [n, D] to one score per pair [n]."""

    def __init__(self, in_dim: int, hidden: tuple[int, int] = (512, 256)) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden[0]), nn.ReLU(), nn.Linear(hidden[0], hidden[1]), nn.ReLU(),
            nn.Linear(hidden[1], 1),
        )  # fmt: skip

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.net(h).squeeze(-1)


@dataclass
class Embeddings:
    """Unit-norm embeddings of one task by every variant: images[i] [I, d_i], texts[i] [P, d_i]."""

    images: list[torch.Tensor]
    texts: list[torch.Tensor]


def pair_features(emb: Embeddings, phrase: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
    """[n] phrase and [n] image indices -> [n, sum_i 2 d_i] h of Eq. 3 ([v_1, t_1, ..., v_k, t_k])."""
    parts = []
    for v, t in zip(emb.images, emb.texts, strict=True):
        parts += [v[image], t[phrase]]
    return torch.cat(parts, dim=-1)


def candidate_pairs(candidates: Sequence[np.ndarray], n_answers: np.ndarray) -> tuple[torch.Tensor, ...]:
    """([n] phrase index, [n] image index, [n] label) of every candidate; answers (last) are 1."""
    phrase, image, label = [], [], []
    for row, cand in enumerate(candidates):
        phrase += [row] * len(cand)
        image += [int(c) for c in cand]
        label += [0.0] * (len(cand) - int(n_answers[row])) + [1.0] * int(n_answers[row])
    return torch.tensor(phrase), torch.tensor(image), torch.tensor(label)


@torch.no_grad()
def mlp_score_matrix(model: FusionMLP, emb: Embeddings, candidates: Sequence[np.ndarray]) -> np.ndarray:
    """[P, I] MLP scores at every candidate pair; NaN elsewhere (IRFL metrics read candidates only)."""
    model.eval()
    n_phrases, n_images = emb.texts[0].shape[0], emb.images[0].shape[0]
    out = np.full((n_phrases, n_images), np.nan, dtype=np.float32)
    phrase, image, _ = candidate_pairs(candidates, np.zeros(len(candidates), np.int64))
    if len(phrase):
        out[phrase.numpy(), image.numpy()] = model(pair_features(emb, phrase, image)).numpy()
    return out


@dataclass
class MLPRecipe:
    """Adam at 1e-4 with early stopping (seed 004 Sec. 4); the rest is ours."""

    hidden: tuple[int, int] = (512, 256)
    lr: float = 1e-4
    batch_size: int = 64
    max_epochs: int = 200
    patience: int = 10  # epochs without a better validation accuracy before stopping
    seed: int = 0


def train_fusion_mlp(
    train: tuple[Embeddings, Sequence[np.ndarray], np.ndarray],
    valid_accuracy: Callable[[FusionMLP], float],
    recipe: MLPRecipe,
) -> tuple[FusionMLP, dict]:
    """MLP trained on (embeddings, candidates, n_answers) of the training rows; the weights of the
    epoch with the best `valid_accuracy` are kept. Returns (model, {"valid_accuracy": [...], ...})."""
    emb, candidates, n_answers = train
    phrase, image, label = candidate_pairs(candidates, n_answers)
    feats = pair_features(emb, phrase, image)  # [n, D]
    gen = torch.Generator().manual_seed(recipe.seed)
    torch.manual_seed(recipe.seed)
    model = FusionMLP(feats.shape[1], recipe.hidden)
    opt = torch.optim.Adam(model.parameters(), lr=recipe.lr)
    loss_fn = nn.BCEWithLogitsLoss()
    best = (-1.0, 0, {k: v.clone() for k, v in model.state_dict().items()})
    history: dict = {"valid_accuracy": [], "train_loss": []}
    for epoch in range(recipe.max_epochs):
        model.train()
        total = 0.0
        for batch in torch.randperm(len(label), generator=gen).split(recipe.batch_size):
            loss = loss_fn(model(feats[batch]), label[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(batch)
        acc = valid_accuracy(model)
        history["train_loss"].append(total / max(len(label), 1))
        history["valid_accuracy"].append(acc)
        if acc > best[0]:
            best = (acc, epoch, {k: v.clone() for k, v in model.state_dict().items()})
        elif epoch - best[1] >= recipe.patience:
            break
    model.load_state_dict(best[2])
    history.update(best_epoch=best[1], epochs_run=len(history["valid_accuracy"]))
    return model.eval(), history
