"""Hard literal negatives (seed 004, Sec. 3.3): the literal images the frozen base model scores highest.

"For each phrase p, we identify literal images I_lit that maximize s(p, I) under the frozen base
model and use them as negatives during training." Literal images are an IRFL row's distractors
(the detection task CSV does not label each distractor's category). The pool of a phrase is:

- "phrase": the distractors of every row with that phrase (its own literal renderings);
- "all": every distractor of the split (also other phrases' literal images).

Images that are an answer of the phrase never enter its pool. Each (row, answer) pair gets its
phrase's top_k pool images by frozen score (ties: lower image index first), one triple each.
Mining runs once, before training, so the negatives stay those of the base model.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

import numpy as np

from training.external.irfl import DetectionTask

Pool = Literal["phrase", "all"]


@dataclass
class Triples:
    """Training triples as indices: row into task.phrases, fig and lit into task.image_paths."""

    row: np.ndarray  # [T] int64
    fig: np.ndarray  # [T] int64
    lit: np.ndarray  # [T] int64
    lit_score: np.ndarray  # [T] float64: the frozen model's s(p, I_lit), for logs and checks

    def __len__(self) -> int:
        return len(self.row)


def _answers_and_distractors(task: DetectionTask, row: int) -> tuple[np.ndarray, np.ndarray]:
    cand = np.asarray(task.candidates[row])
    n_dis = len(cand) - int(task.n_answers[row])
    return cand[n_dis:], cand[:n_dis]


def literal_pools(task: DetectionTask, pool: Pool = "phrase") -> dict[str, np.ndarray]:
    """Per phrase: the sorted image indices its negatives are mined from."""
    answers: dict[str, set[int]] = defaultdict(set)
    literal: dict[str, set[int]] = defaultdict(set)
    for row, phrase in enumerate(task.phrases):
        ans, dis = _answers_and_distractors(task, row)
        answers[phrase].update(int(i) for i in ans)
        literal[phrase].update(int(i) for i in dis)
    if pool == "all":
        every = set().union(*literal.values()) if literal else set()
        literal = {p: set(every) for p in answers}
    elif pool != "phrase":
        raise ValueError(f"pool must be 'phrase' or 'all', got {pool!r}")
    return {p: np.asarray(sorted(literal[p] - answers[p]), dtype=np.int64) for p in answers}


def mine_hard_negatives(
    task: DetectionTask, sim: np.ndarray, top_k: int = 1, pool: Pool = "phrase"
) -> Triples:
    """The triples of every (row, answer) with its phrase's top_k literal images under `sim`.

    sim: [n_phrases, n_images] frozen-model cosine scores, rows aligned with task.phrases.
    """
    sim = np.asarray(sim)  # float32 from the encoders is fine; no float64 copy of a large matrix
    if sim.shape != (len(task.phrases), len(task.image_paths)):
        raise ValueError(f"sim must be {len(task.phrases)}x{len(task.image_paths)}, got {sim.shape}")
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    pools = literal_pools(task, pool)
    rows, figs, lits, scores = [], [], [], []
    for row, phrase in enumerate(task.phrases):
        candidates = pools[phrase]
        if candidates.size == 0:
            continue
        s = sim[row, candidates]  # [n_pool]
        order = np.lexsort((candidates, -s))[:top_k]  # highest score first, ties to the lower index
        for fig in _answers_and_distractors(task, row)[0]:
            rows.extend([row] * len(order))
            figs.extend([int(fig)] * len(order))
            lits.extend(candidates[order].tolist())
            scores.extend(s[order].tolist())
    ints = [np.asarray(x, dtype=np.int64) for x in (rows, figs, lits)]
    return Triples(*ints, lit_score=np.asarray(scores, dtype=np.float64))
