"""IRFL figurative grounding metrics of seed 004 (Sec. 6.2) next to detection accuracy.

- accuracy (Precision@1): % of rows whose best-scored candidate is a figurative answer
  (`training.external.irfl.detection_accuracy`; a tie counts against the model);
- similarity margin: mean of s(p, I_fig) - s(p, I_lit) over the forced choices;
- literal-bias rate: % of forced choices with s(p, I_lit) >= s(p, I_fig) (Eq. 6: a tie is bias).

The seed defines margin and bias on binary choices (one figurative, one literal image). An IRFL
row has answers and several distractors, so every (answer, distractor) pair of a row is one
forced choice; with one answer and one distractor per row, literal bias = 100 - accuracy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from training.external.irfl import DetectionTask, detection_accuracy


def forced_choices(task: DetectionTask, sim: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(s_fig [P], s_lit [P], row [P]) over every (answer, distractor) pair of every row.

    sim: [n_phrases, n_images] scores, rows aligned with task.phrases.
    """
    sim = np.asarray(sim, dtype=np.float64)
    s_fig, s_lit, rows = [], [], []
    for row, cand in enumerate(task.candidates):
        n_dis = len(cand) - int(task.n_answers[row])
        scores = sim[row, cand]  # [n_candidates]: distractors first, then answers
        fig, lit = np.meshgrid(scores[n_dis:], scores[:n_dis], indexing="ij")  # [n_ans, n_dis]
        s_fig.append(fig.ravel())
        s_lit.append(lit.ravel())
        rows.append(np.full(fig.size, row))
    return np.concatenate(s_fig), np.concatenate(s_lit), np.concatenate(rows)


def _margin_bias(s_fig: np.ndarray, s_lit: np.ndarray) -> dict[str, float]:
    if s_fig.size == 0:
        return {"margin": float("nan"), "literal_bias": float("nan"), "n_pairs": 0.0}
    return {
        "margin": float(np.mean(s_fig - s_lit)),
        "literal_bias": float(np.mean(s_lit >= s_fig) * 100),
        "n_pairs": float(s_fig.size),
    }


def figurative_metrics(task: DetectionTask, sim: Any) -> dict[str, float]:
    """accuracy, margin, literal_bias (and n_pairs), overall and per figurative type (`<key>/<type>`)."""
    out = detection_accuracy(task, sim)
    s_fig, s_lit, rows = forced_choices(task, sim)
    out.update(_margin_bias(s_fig, s_lit))
    types = np.asarray(task.figurative_type)[rows] if rows.size else np.asarray([], dtype=str)
    for t in sorted(set(task.figurative_type)):
        for key, value in _margin_bias(s_fig[types == t], s_lit[types == t]).items():
            out[f"{key}/{t}"] = value
    return out
