"""IMP (seed 003) difficulty splits and their metrics, as pure functions of arrays.

- `calibrate_threshold`: a model's image-text matching threshold, the point of its
  precision-recall curve with the highest F1 (the paper: "the argmax of this curve ... which
  maximizes the precision-recall balance"; F1 is our reading of "balance").
- `vote_difficulty`: Easy / Medium / Hard from the voters' accept/reject votes on true pairs.
- `auprc`: area under the precision-recall curve (average precision, step-wise, as sklearn's
  `average_precision_score`), the binary image-text classification metric of IMP Table 5.
- `difficulty_retrieval`: R@K, meanR/medR (best positive and all positives) per difficulty,
  IMP Table 4's "retrieval results filtered by category".
- `difficulty_auprc`: AUPRC per difficulty against one shared set of negative pairs, one per
  captioned image: a text of the same image that the build's validators discarded
  (`imp_negatives`; IMP's negatives are captions its annotators rejected for that image), or,
  for an image without one, the shifted stand-in (`shifted_negatives`); both are counted.

Difficulty codes: 0 easy, 1 medium, 2 hard, -1 unlabelled (left out of every per-difficulty metric).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from training.evaluation.metrics.ranking import (
    count_ahead,
    gather_pairs,
    matrix_shape,
    rows_per_chunk,
    to_numpy_block,
)
from training.evaluation.metrics.retrieval import (
    DEFAULT_CHUNK_BYTES,
    check_ks,
    grouped_retrieval_metrics,
    rank_summary,
    recall_from_ranks,
)

DIFFICULTIES: tuple[str, ...] = ("easy", "medium", "hard")
EASY, MEDIUM, HARD, UNLABELLED = 0, 1, 2, -1


def _scores_labels(scores: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels).astype(bool).ravel()
    if s.shape != y.shape:
        raise ValueError(f"{s.size} scores but {y.size} labels")
    if not y.any():
        raise ValueError("need at least one positive pair")
    if np.isnan(s).any():
        raise ValueError("scores contain NaN")
    return s, y


def pr_curve(scores: Any, labels: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(thresholds [t], precision [t], recall [t]) at every distinct score, highest first.

    Accepting "score >= thresholds[i]" gives precision[i] and recall[i]; tied scores move together.
    """
    s, y = _scores_labels(scores, labels)
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last_of_tie = np.r_[np.nonzero(np.diff(s))[0], s.size - 1]  # [t] last index of each score value
    tp = np.cumsum(y)[last_of_tie]
    accepted = last_of_tie + 1
    return s[last_of_tie], tp / accepted, tp / y.sum()


def auprc(scores: Any, labels: Any) -> float:
    """Average precision: sum over thresholds of (recall step) x precision; in [0, 1]."""
    _, precision, recall = pr_curve(scores, labels)
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


@dataclass(frozen=True)
class Calibration:
    threshold: float  # accept a pair when its score >= threshold
    f1: float
    precision: float
    recall: float
    n_positive: int
    n_negative: int


def calibrate_threshold(scores: Any, labels: Any) -> Calibration:
    """The threshold of the precision-recall curve's best F1 (ties: the higher threshold)."""
    s, y = _scores_labels(scores, labels)
    thresholds, precision, recall = pr_curve(s, y)
    f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
    best = int(np.argmax(f1))  # first maximum = highest threshold
    return Calibration(
        float(thresholds[best]), float(f1[best]), float(precision[best]), float(recall[best]),
        int(y.sum()), int((~y).sum()),
    )  # fmt: skip


def vote_difficulty(accept: Any, tie_breaker: Any | None = None) -> np.ndarray:
    """Difficulty codes [n_pairs] int8 from voters' votes on true pairs.

    accept: [n_pairs, n_voters] bool, voter v accepts pair p (its score >= its threshold).
    tie_breaker: [n_pairs] bool, the tie-breaking model's vote (needed with an even number of voters).
    Easy: every voter accepts. Hard: the ensemble rejects (a majority rejects, or a tie that the
    tie-breaker rejects). Medium: accepted by the ensemble without unanimity.
    """
    votes = np.asarray(accept, dtype=bool)
    if votes.ndim != 2 or votes.shape[1] == 0:
        raise ValueError(f"accept must be [n_pairs, n_voters] with at least one voter, got {votes.shape}")
    n_voters = votes.shape[1]
    yes = votes.sum(1)  # [n_pairs]
    tie = 2 * yes == n_voters
    if tie.any() and tie_breaker is None:
        raise ValueError(f"{int(tie.sum())} pairs are tied between {n_voters} voters; give a tie-breaker")
    breaker = np.zeros(len(yes), bool) if tie_breaker is None else np.asarray(tie_breaker, bool).ravel()
    if breaker.shape != yes.shape:
        raise ValueError(f"tie_breaker has {breaker.size} votes for {yes.size} pairs")
    accepted = (2 * yes > n_voters) | (tie & breaker)
    out = np.full(len(yes), MEDIUM, np.int8)
    out[yes == n_voters] = EASY
    out[~accepted] = HARD
    return out


def _t2i_ranks(sim: Any, caption_image: np.ndarray, cols: np.ndarray, max_chunk_bytes: int) -> np.ndarray:
    """Rank [len(cols)] of each caption's own image among all images (ties: lower index first)."""
    n_images, _ = matrix_shape(sim)
    step = rows_per_chunk(n_images, max_chunk_bytes)
    out = np.empty(len(cols), np.int64)
    for start in range(0, len(cols), step):
        part = cols[start : start + step]
        block = to_numpy_block(sim[:, part]).T  # [c, n_images]: one ranking per caption
        own = caption_image[part]
        out[start : start + len(part)] = count_ahead(block, block[np.arange(len(part)), own], own) + 1
    return out


def _check(sim: Any, caption_image: Any, difficulty: Any) -> tuple[np.ndarray, np.ndarray]:
    n_images, n_captions = matrix_shape(sim)
    ci = np.asarray(caption_image, dtype=np.int64).ravel()
    diff = np.asarray(difficulty, dtype=np.int64).ravel()
    if len(ci) != n_captions or len(diff) != n_captions:
        raise ValueError(f"sim has {n_captions} captions; got {len(ci)} images and {len(diff)} difficulties")
    if ci.size and (ci.min() < 0 or ci.max() >= n_images):
        raise ValueError(f"caption_image values must lie in [0, {n_images})")
    if not np.isin(diff, (UNLABELLED, EASY, MEDIUM, HARD)).all():
        raise ValueError("difficulty codes must be -1, 0, 1 or 2")
    return ci, diff


def difficulty_retrieval(
    sim: Any,
    caption_image: Any,
    difficulty: Any,
    *,
    ks: Sequence[int] = (1, 5, 10),
    max_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> dict[str, float]:
    """Per difficulty d, retrieval over the whole gallery with only the d-captions as hits.

    sim: [n_images, n_captions] scores. I->T: queries are the images with a d-caption; their
    d-captions are the positives, every other caption (also the image's other captions) a
    negative. T->I: queries are the d-captions; the positive is the caption's image.
    Keys `<d>/{i2t,t2i}/{R@K, meanR, medR, meanR_allpos, medR_allpos, n_queries}`.
    """
    ks = check_ks(ks)
    ci, diff = _check(sim, caption_image, difficulty)
    n_images = matrix_shape(sim)[0]
    out: dict[str, float] = {}
    for code, name in enumerate(DIFFICULTIES):
        mine = np.nonzero(diff == code)[0]
        if mine.size == 0:
            for key in (*(f"R@{k}" for k in ks), "meanR", "medR", "meanR_allpos", "medR_allpos"):
                out[f"{name}/i2t/{key}"] = out[f"{name}/t2i/{key}"] = float("nan")
            out[f"{name}/i2t/n_queries"] = out[f"{name}/t2i/n_queries"] = 0.0
            continue
        gallery_group = np.where(diff == code, ci, -1)  # -1 matches no image: never a hit
        i2t = grouped_retrieval_metrics(
            sim, np.arange(n_images), gallery_group, ks=ks, max_chunk_bytes=max_chunk_bytes
        )
        for key in (*(f"R@{k}" for k in ks), "meanR", "medR", "meanR_allpos", "medR_allpos", "n_queries"):
            out[f"{name}/i2t/{key}"] = i2t[key]
        ranks = _t2i_ranks(sim, ci, mine, max_chunk_bytes)
        t2i = {**recall_from_ranks(ranks, ks), **rank_summary(ranks), **rank_summary(ranks, "_allpos")}
        t2i["n_queries"] = float(ranks.size)  # one positive per caption: all positives = best
        out.update({f"{name}/t2i/{k}": v for k, v in t2i.items()})
    return out


def shifted_negatives(caption_image: Any) -> tuple[np.ndarray, np.ndarray]:
    """One negative pair per captioned image: (image, first caption of the next captioned image).

    Returns (images [m], captions [m]) indices. A fixed, label-free stand-in for IMP's rejected
    captions ("one true negative for each image") that needs no new encodings.
    """
    ci = np.asarray(caption_image, dtype=np.int64).ravel()
    images, first = np.unique(ci, return_index=True)  # [m] sorted images, their first caption
    if images.size < 2:
        raise ValueError("shifted negatives need captions of at least two images")
    return images, first[np.r_[np.arange(1, images.size), 0]]


@dataclass(frozen=True)
class ImpNegatives:
    """One negative pair per captioned image (IMP: "one true negative for each image")."""

    images: np.ndarray  # [m] image index of each negative pair, ascending
    discarded: np.ndarray  # [m] index of the image's first discarded text, -1 = none (fallback)
    shifted_caption: np.ndarray  # [m] the shifted stand-in caption, used where discarded is -1


def imp_negatives(caption_image: Any, discarded_image: Any | None = None) -> ImpNegatives:
    """Negatives from the same image's discarded texts where it has one, else shifted.

    caption_image [n_captions]; discarded_image [n_discarded]: the image index of each text the
    validators discarded (None or empty: every image falls back). An image's negative is its
    first discarded text, so each image weighs the same as in IMP.
    """
    images, shifted = shifted_negatives(caption_image)  # [m], [m]
    first = np.full(len(images), -1, np.int64)
    if discarded_image is not None and len(discarded_image):
        di = np.asarray(discarded_image, dtype=np.int64).ravel()
        owners, first_of = np.unique(di, return_index=True)  # first discarded text of each image
        at = np.searchsorted(owners, images).clip(max=len(owners) - 1)
        hit = owners[at] == images
        first[hit] = first_of[at[hit]]
    return ImpNegatives(images, first, shifted)


def negative_pair_scores(sim: Any, negatives: ImpNegatives, discarded_scores: Any | None) -> np.ndarray:
    """[m] scores of the negative pairs: discarded_scores[k] is discarded text k's score with its
    own image ([n_discarded]); the fallback pairs are read from sim [n_images, n_captions]."""
    out = gather_pairs(sim, negatives.images, negatives.shifted_caption).astype(np.float64)
    own = negatives.discarded >= 0
    if own.any():
        if discarded_scores is None:
            raise ValueError("negatives use discarded texts but no discarded_scores were given")
        out[own] = np.asarray(discarded_scores, dtype=np.float64).ravel()[negatives.discarded[own]]
    return out


def difficulty_auprc(
    sim: Any,
    caption_image: Any,
    difficulty: Any,
    discarded_image: Any | None = None,
    discarded_scores: Any | None = None,
) -> dict[str, float]:
    """AUPRC per difficulty: the d-pairs (caption, own image) against the negative pairs.

    sim [n_images, n_captions]; discarded_image [n_discarded] and discarded_scores
    [n_discarded]: the texts the validators discarded, their image and their score with it
    (None: every negative is the shifted stand-in). Also `all/AUPRC` over every labelled pair,
    and how many negatives came from discarded texts (`n_negatives_discarded`) or fell back
    (`n_negatives_shifted`).
    """
    ci, diff = _check(sim, caption_image, difficulty)
    negatives = imp_negatives(ci, discarded_image if discarded_scores is not None else None)
    pos_score = gather_pairs(sim, ci, np.arange(len(ci)))  # [n_captions] own-image scores
    neg_score = negative_pair_scores(sim, negatives, discarded_scores)  # [m]
    return pairs_auprc(pos_score, neg_score, diff, int((negatives.discarded >= 0).sum()))


def pairs_auprc(pos_score: Any, neg_score: Any, difficulty: Any, n_own: int) -> dict[str, float]:
    """`<difficulty>/AUPRC`, `all/AUPRC`: the true pairs of each difficulty ([n] scores, [n] codes)
    against every negative pair ([m] scores, n_own of them discarded texts); NaN without pairs."""
    pos, neg = np.asarray(pos_score, np.float64).ravel(), np.asarray(neg_score, np.float64).ravel()
    diff = np.asarray(difficulty, dtype=np.int64).ravel()
    out = {"n_negatives": float(len(neg)), "n_negatives_discarded": float(n_own),
           "n_negatives_shifted": float(len(neg) - n_own)}  # fmt: skip
    groups = [(name, diff == code) for code, name in enumerate(DIFFICULTIES)] + [("all", diff != UNLABELLED)]
    for name, mine in groups:
        labels = np.r_[np.ones(int(mine.sum()), bool), np.zeros(len(neg), bool)]
        out[f"{name}/AUPRC"] = auprc(np.r_[pos[mine], neg], labels) if mine.any() else float("nan")
    return out


def imp_metrics(
    sim: Any,
    caption_image: Any,
    difficulty: Any,
    *,
    ks: Sequence[int] = (1, 5, 10),
    discarded_image: Any | None = None,
    discarded_scores: Any | None = None,
) -> dict[str, float]:
    """Per-difficulty retrieval (IMP Table 4) and AUPRC (IMP Table 5), with the split's counts."""
    diff = np.asarray(difficulty, dtype=np.int64).ravel()
    out = difficulty_retrieval(sim, caption_image, diff, ks=ks)
    out.update(difficulty_auprc(sim, caption_image, diff, discarded_image, discarded_scores))
    for code, name in enumerate(DIFFICULTIES):
        out[f"{name}/n_pairs"] = float((diff == code).sum())
    out["unlabelled/n_pairs"] = float((diff == UNLABELLED).sum())
    return out
