"""IMP difficulty split and metrics (seed 003) on hand-built cases and against references."""

from __future__ import annotations

import numpy as np
import pytest

from training.evaluation.imp.metrics import (
    EASY,
    HARD,
    MEDIUM,
    UNLABELLED,
    auprc,
    calibrate_threshold,
    difficulty_auprc,
    difficulty_retrieval,
    imp_metrics,
    imp_negatives,
    negative_pair_scores,
    shifted_negatives,
    vote_difficulty,
)
from training.evaluation.metrics.retrieval import retrieval_metrics


def test_auprc_by_hand_and_against_sklearn():
    # Ranked: pos, neg, pos -> precision 1 at recall 1/2, 2/3 at recall 1.
    assert auprc([0.9, 0.8, 0.7], [1, 0, 1]) == pytest.approx(0.5 * 1 + 0.5 * 2 / 3)
    assert auprc([0.1, 0.2], [1, 0]) == pytest.approx(0.5)
    sklearn = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 7, 300) / 7.0  # many ties
    labels = rng.random(300) < 0.3
    assert auprc(scores, labels) == pytest.approx(sklearn.average_precision_score(labels, scores))


def test_calibration_is_the_f1_argmax_of_the_pr_curve():
    scores = [0.9, 0.6, 0.5, 0.55, 0.2]
    labels = [1, 1, 1, 0, 0]
    # Thresholds 0.9/0.6/0.55/0.5/0.2 give F1 0.5/0.8/0.667/0.857/0.75: the best is 0.5.
    cal = calibrate_threshold(scores, labels)
    assert cal.threshold == 0.5 and cal.precision == pytest.approx(0.75) and cal.recall == 1.0
    assert cal.f1 == pytest.approx(6 / 7) and (cal.n_positive, cal.n_negative) == (3, 2)
    # Separable scores: the lowest positive is the threshold, with F1 1.
    assert calibrate_threshold([0.3, 0.4, 0.1], [1, 1, 0]).threshold == 0.3
    with pytest.raises(ValueError, match="positive"):
        calibrate_threshold([0.1, 0.2], [0, 0])


def test_vote_rule_with_six_voters_and_a_tie_breaker():
    yes = [6, 5, 4, 3, 3, 2, 0]
    accept = np.array([[i < n for i in range(6)] for n in yes])
    breaker = np.array([False, False, False, True, False, True, True])
    got = vote_difficulty(accept, breaker)
    # 6/6 easy; 5 and 4 medium; 3-3 decided by the tie-breaker; a majority against is hard
    # whatever the tie-breaker says.
    assert got.tolist() == [EASY, MEDIUM, MEDIUM, MEDIUM, HARD, HARD, HARD]
    with pytest.raises(ValueError, match="tie-breaker"):
        vote_difficulty(accept)
    # Five voters never tie: no tie-breaker needed.
    five = vote_difficulty(np.array([[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1] * 5]))
    assert five.tolist() == [MEDIUM, HARD, EASY]


def test_difficulty_retrieval_by_hand():
    # 3 images x 4 captions; captions 0,1 of image 0 (easy, hard), 2 of image 1 (easy), 3 of image 2 (medium).
    sim = np.array(
        [
            [0.9, 0.1, 0.8, 0.0],  # image 0: easy caption 0 first; hard caption 1 ranks 3rd
            [0.2, 0.3, 0.7, 0.9],  # image 1: its easy caption 2 ranks 2nd
            [0.5, 0.6, 0.1, 0.4],  # image 2: its medium caption 3 ranks 3rd
        ]
    )
    ci, diff = [0, 0, 1, 2], [EASY, HARD, EASY, MEDIUM]
    m = difficulty_retrieval(sim, ci, diff, ks=(1, 2))
    assert m["easy/i2t/n_queries"] == 2 and m["easy/i2t/R@1"] == 50.0 and m["easy/i2t/R@2"] == 100.0
    assert m["hard/i2t/R@2"] == 0.0 and m["hard/i2t/medR"] == 3.0
    assert m["medium/i2t/medR"] == 3.0
    # T->I: caption 0 -> image 0 rank 1; caption 2 -> image 1 rank 2 (0.8 of image 0 ahead).
    assert m["easy/t2i/medR"] == 1.5 and m["easy/t2i/R@1"] == 50.0
    # Caption 1 -> image 0 scores 0.1, behind 0.3 and 0.6: rank 3.
    assert m["hard/t2i/meanR"] == 3.0


def test_one_difficulty_everywhere_equals_the_overall_metrics():
    rng = np.random.default_rng(1)
    sim = rng.normal(size=(7, 20)).astype(np.float32)
    ci = rng.integers(0, 7, 20)
    m = difficulty_retrieval(sim, ci, np.full(20, MEDIUM), ks=(1, 5))
    ref = retrieval_metrics(sim, ci, np.zeros(20, int), ks=(1, 5))
    for key in ("i2t/R@1", "i2t/R@5", "i2t/medR_allpos", "i2t/meanR", "t2i/R@1", "t2i/medR"):
        assert m[f"medium/{key}"] == pytest.approx(ref[f"all/{key}"]), key
    assert np.isnan(m["easy/i2t/R@1"]) and m["easy/t2i/n_queries"] == 0


def test_auprc_per_difficulty_with_shifted_negatives():
    images, captions = shifted_negatives([2, 0, 0, 1])
    assert images.tolist() == [0, 1, 2] and captions.tolist() == [3, 0, 1]  # next image's first caption
    sim = np.array(
        [
            [0.9, 0.2, 0.0, 0.5],  # positives 0.9 (easy), 0.2 (hard); negative (0, caption 3) = 0.5
            [0.4, 0.0, 0.0, 0.8],  # positive 0.8 (medium); negative (1, caption 2) = 0.0
            [0.0, 0.1, 0.3, 0.0],  # positive 0.3 (easy); negative (2, caption 0) = 0.0
        ]
    )
    m = difficulty_auprc(sim, [0, 0, 2, 1], [EASY, HARD, EASY, MEDIUM])
    # easy 0.9, 0.3 against negatives 0.5, 0.0, 0.0: ranked + - + - -, AP = (1 + 2/3) / 2.
    assert m["easy/AUPRC"] == pytest.approx(5 / 6)
    assert m["medium/AUPRC"] == 1.0  # 0.8 above every negative
    assert m["hard/AUPRC"] == pytest.approx(0.5)  # 0.2 behind the 0.5 negative
    assert m["all/AUPRC"] == pytest.approx((1 + 1 + 3 / 4 + 4 / 5) / 4)  # 0.9 0.8 | 0.5 | 0.3 0.2
    assert m["n_negatives"] == 3


def test_auprc_negatives_are_the_same_images_discarded_texts_with_fallback_counted():
    """Images 0 and 2 have texts the validators discarded (IMP's rejected captions of the same
    image); image 1 has none and falls back to the shifted stand-in, caption 2 (score 0.0)."""
    sim = np.array([[0.9, 0.2, 0.0, 0.5], [0.4, 0.0, 0.0, 0.8], [0.0, 0.1, 0.3, 0.0]])
    ci, diff = [0, 0, 2, 1], [EASY, HARD, EASY, MEDIUM]
    discarded_image = [2, 0, 0]  # image 0's first discarded text is index 1
    discarded_scores = [0.35, 0.85, 0.1]  # each discarded text against its own image
    neg = imp_negatives(ci, discarded_image)
    assert neg.images.tolist() == [0, 1, 2] and neg.discarded.tolist() == [1, -1, 0]
    m = difficulty_auprc(sim, ci, diff, discarded_image, discarded_scores)
    assert (m["n_negatives"], m["n_negatives_discarded"], m["n_negatives_shifted"]) == (3, 2, 1)
    # negatives 0.85 (image 0), 0.0 (image 1, shifted), 0.35 (image 2)
    # easy 0.9, 0.3: ranked + - - + -, AP = (1 + 2/4) / 2 (0.83 with the shifted negatives alone)
    assert m["easy/AUPRC"] == pytest.approx(0.75)
    assert m["medium/AUPRC"] == pytest.approx(0.5)  # 0.8 behind 0.85
    assert m["hard/AUPRC"] == pytest.approx(1 / 3)  # 0.2 behind 0.85 and 0.35
    old = difficulty_auprc(sim, ci, diff)  # no discarded texts: every negative falls back
    assert old["n_negatives_discarded"] == 0 and old["n_negatives_shifted"] == 3
    assert old["easy/AUPRC"] == pytest.approx(5 / 6)
    with pytest.raises(ValueError, match="discarded_scores"):
        negative_pair_scores(sim, neg, None)


def test_imp_metrics_leave_unlabelled_pairs_out():
    rng = np.random.default_rng(2)
    sim = rng.normal(size=(5, 12))
    ci = np.repeat(np.arange(4), 3)
    diff = np.array([EASY, MEDIUM, HARD] * 4)
    with_unlabelled = diff.copy()
    with_unlabelled[::3] = UNLABELLED
    a, b = imp_metrics(sim, ci, diff), imp_metrics(sim, ci, with_unlabelled)
    assert a["medium/t2i/R@5"] == b["medium/t2i/R@5"] and a["hard/AUPRC"] == b["hard/AUPRC"]
    assert b["easy/n_pairs"] == 0 and b["unlabelled/n_pairs"] == 4 and np.isnan(b["easy/AUPRC"])
