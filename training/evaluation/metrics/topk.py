"""Top-10 based metrics (LensCoverage, AllLenses, Lens DCG, Caption DCG) and mAP@R.

They need the ordered head of each image query's ranking, which `topk_indices` gives per block
without sorting full rows. Definitions (per image query, then averaged over image queries):

- LC@10: distinct lenses among its positives in the top 10 / distinct lenses it has.
- All@10: 100 if every lens it has appears there, else 0.
- Lens DCG@10: each lens earns 1/log2(1 + rank) once, at its best-ranked positive in the top
  10, normalised by the ideal sum over ranks 1..min(L, 10) for L lenses.
- Caption DCG@10: binary DCG@10 over all positives / ideal DCG for min(P, 10) positives.
- AP@R: R = number of positives; mean over the R first ranks of precision@rank at positives.
"""

from __future__ import annotations

import numpy as np

from training.evaluation.metrics.keys import ALL10, CAPTION_DCG10, DIVERSITY_KEYS, LC10, LENS_DCG10, MAP_R
from training.evaluation.metrics.ranking import topk_indices

DIVERSITY_K = 10


def ideal_dcg(n_relevant: np.ndarray, k: int) -> np.ndarray:
    """DCG of a ranking whose first min(n, k) items are all relevant."""
    gains = np.concatenate([[0.0], np.cumsum(1.0 / np.log2(np.arange(2, k + 2)))])
    return gains[np.minimum(n_relevant, k)]


def average_precision_at_r(hit: np.ndarray, n_pos: np.ndarray) -> np.ndarray:
    """AP@R per row from ranked positive flags [n, k] (k >= R) and R = n_pos per row."""
    width = hit.shape[1]
    rel = hit & (np.arange(width)[None, :] < n_pos[:, None])
    precision = np.cumsum(rel, axis=1) / np.arange(1, width + 1)
    return (precision * rel).sum(1) / n_pos


class DiversityAccumulator:
    """Collects per-image lens-diversity metrics and AP@R block by block."""

    def __init__(self, caption_image: np.ndarray, caption_lens: np.ndarray, lens_counts: np.ndarray):
        self.ci, self.cl = caption_image, caption_lens
        self.n_lenses = (lens_counts > 0).sum(1)
        self.n_pos = lens_counts.sum(1)
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in (*DIVERSITY_KEYS, MAP_R)}

    def add_block(self, rows: np.ndarray, block: np.ndarray) -> None:
        """rows: global image indices (all with >= 1 caption) of the block's rows, in order."""
        if rows.size == 0:
            return
        n_pos = self.n_pos[rows]
        top = topk_indices(block, max(DIVERSITY_K, int(n_pos.max())))
        hit = self.ci[top] == rows[:, None]
        k10 = min(DIVERSITY_K, top.shape[1])
        n_lenses = self.n_lenses[rows]
        first_rank = np.zeros((len(rows), self.n_lens_columns), np.int64)  # 0: lens absent
        for c in range(k10 - 1, -1, -1):  # backwards, so each lens keeps its best rank
            r = np.nonzero(hit[:, c])[0]
            first_rank[r, self.cl[top[r, c]]] = c + 1
        covered = np.count_nonzero(first_rank, axis=1)
        lens_gain = np.where(first_rank > 0, 1.0 / np.log2(1.0 + np.maximum(first_rank, 1)), 0.0)
        discount = 1.0 / np.log2(np.arange(2, k10 + 2))
        self.parts[LC10].append(covered / n_lenses)
        self.parts[ALL10].append((covered == n_lenses).astype(float))
        self.parts[LENS_DCG10].append(lens_gain.sum(1) / ideal_dcg(n_lenses, DIVERSITY_K))
        self.parts[CAPTION_DCG10].append((hit[:, :k10] * discount).sum(1) / ideal_dcg(n_pos, DIVERSITY_K))
        self.parts[MAP_R].append(average_precision_at_r(hit, n_pos))

    @property
    def n_lens_columns(self) -> int:
        return int(self.cl.max()) + 1 if self.cl.size else 1

    def summary(self) -> dict[str, float]:
        out = {}
        for key, parts in self.parts.items():
            values = np.concatenate(parts) if parts else np.zeros(0)
            name = f"all/i2t/{MAP_R}" if key == MAP_R else key
            out[name] = float(values.mean() * 100.0) if values.size else float("nan")
        return out
