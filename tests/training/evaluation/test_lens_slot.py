"""The lens-slot protocol (main Sec. 4.2) against plain per-query loops, from scores and from slots."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lenses_data.schemas import LENS_KEYS
from training.evaluation.metrics.lens_slot import LensSlotMatrix, lens_slot_metrics, lens_slot_recall
from training.evaluation.metrics.retrieval import retrieval_metrics
from training.evaluation.scoring.similarity import label_text_slots, score_lens_slots, score_one_lens

from .test_metrics import _ranked, _recall, assert_same, reference_macro

KS = (1, 2, 5)


def reference_lens_slot(sims, cap_img, cap_lens, galleries, has_slot, fallback, ks=KS):
    """docs/evaluation.md's lens-slot definitions, one query at a time.

    sims[c][i][g] is image i's score with caption galleries[c][g].
    """
    n_img = len(sims[0])
    out = {}
    for c, name in enumerate(LENS_KEYS):
        gal = list(galleries[c])
        col_of = {j: g for g, j in enumerate(gal)}
        i2t, t2i, i2t_missing, t2i_missing = [], [], 0, 0
        for i in range(n_img):
            mine = [j for j in gal if cap_lens[j] == c and cap_img[j] == i]
            if not mine:
                continue
            i2t_missing += not has_slot[c][i]
            if not fallback and not has_slot[c][i]:
                i2t.append(math.inf)
                continue
            order = _ranked({j: sims[c][i][col_of[j]] for j in gal}, gal)
            i2t.append(next(r for r, j in enumerate(order) if j in mine) + 1)
        for j in range(len(cap_img)):
            if cap_lens[j] != c:
                continue
            own = cap_img[j]
            t2i_missing += not has_slot[c][own]
            if not fallback and not has_slot[c][own]:
                t2i.append(math.inf)
                continue
            column = [sims[c][i][col_of[j]] for i in range(n_img)]
            t2i.append(_ranked(column, list(range(n_img))).index(own) + 1)
        for k in ks:
            out[f"{name}/i2t/R@{k}"] = _recall(i2t, k)
            out[f"{name}/t2i/R@{k}"] = _recall(t2i, k)
        out[f"{name}/i2t/n_without_slot"] = float(i2t_missing)
        out[f"{name}/t2i/n_without_slot"] = float(t2i_missing)
    return reference_macro(out, ks)


def random_labels(rng, n_img, n_cap):
    cap_img = rng.integers(0, n_img - 1, n_cap)  # the last image has no caption: gallery only
    cap_lens = rng.integers(0, 4, n_cap)  # no Emotional caption: NaN, left out of the macro
    return cap_img, cap_lens


@pytest.mark.parametrize("fallback", [True, False])
@pytest.mark.parametrize("seed,levels", [(0, 3), (1, 2), (2, None)])
def test_recall_matches_loop_on_tied_scores(seed, levels, fallback):
    rng = np.random.default_rng(seed)
    n_img, n_cap = 11, 40
    cap_img, cap_lens = random_labels(rng, n_img, n_cap)
    galleries, sims, has_slot = [], [], []
    for c in range(5):
        # Odd lenses: every caption in the gallery (text_slots all); even: the lens-c captions only.
        gal = np.arange(n_cap) if c % 2 else np.nonzero(cap_lens == c)[0]
        shape = (n_img, len(gal))
        sim = rng.integers(0, levels, shape).astype(np.float32) if levels else rng.standard_normal(shape)
        galleries.append(gal)
        sims.append(sim)
        has_slot.append(rng.random(n_img) < 0.7)
    want = reference_lens_slot(sims, cap_img, cap_lens, galleries, has_slot, fallback)
    for budget in (1, 2**20):  # one query per block, and everything in one block
        got = lens_slot_recall(
            sims, cap_img, cap_lens, galleries, has_slot, fallback=fallback, ks=KS, max_chunk_bytes=budget
        )
        assert_same(got, want)
    assert math.isnan(got["emotional/t2i/R@1"]) and got["macro/n_lenses"] == 4.0


def test_recall_rejects_a_gallery_without_its_queries():
    cap_img, cap_lens = np.array([0, 1]), np.array([0, 0])
    sims = [np.zeros((2, 1))] + [np.zeros((2, 2))] * 4
    galleries = [np.array([1])] + [np.arange(2)] * 4
    with pytest.raises(ValueError, match="text slot active"):
        lens_slot_recall(sims, cap_img, cap_lens, galleries, [np.ones(2, bool)] * 5)


def reference_pair_score(v, v_lens, gv, u, gu, c, fallback, alpha=16.0, denominator=2.0):
    """Eq. 4 with only lens c: the image's c-slots vs the caption's c-slot, in float64."""
    unit = lambda x: np.asarray(x, np.float64) / np.linalg.norm(np.asarray(x, np.float64))  # noqa: E731
    cos = [float(unit(v[s]) @ unit(u)) for s in range(len(v)) if v_lens[s] == c]
    if not cos:
        return float(unit(gv) @ unit(gu)) if fallback else -2.0 / denominator - 1.0
    side_img = sum(cos) / len(cos)  # each image slot's only partner is the c text slot
    top = max(alpha * x for x in cos)
    side_txt = (top + math.log(sum(math.exp(alpha * x - top) for x in cos))) / alpha
    return (side_img + side_txt) / denominator


def encodings(seed, one_hot, n_img=10, n_slots=5, n_cap=33, dim=6):
    """Random encodings; one_hot gives exactly representable scores with many exact ties."""
    rng = np.random.default_rng(seed)
    if one_hot:  # <= 1 slot per lens, vectors on the axes: every cosine is exactly 0 or 1

        def vec(*shape):
            return np.eye(dim, dtype=np.float32)[rng.integers(0, dim, shape)]

        lens = np.stack([rng.permutation(np.array([0, 1, 2, 3, 4, -1, -1])[:n_slots]) for _ in range(n_img)])
    else:

        def vec(*shape):
            return rng.standard_normal((*shape, dim)).astype(np.float32)

        lens = rng.integers(-1, 5, (n_img, n_slots))  # several slots of one lens: smooth Chamfer
    lens[0] = -1  # an image without any slot: global fallback (or a miss) for every lens
    cap_img, cap_lens = random_labels(rng, n_img, n_cap)
    cap_img[:3] = 0  # image 0 has captions, so it is a query
    t = torch.from_numpy
    return (
        (t(vec(n_img, n_slots)), t(lens), t(vec(n_img)), t(vec(n_cap, 5)), t(vec(n_cap))),
        cap_img,
        cap_lens,
    )


@pytest.mark.parametrize("text_slots,gallery", [("all", "active"), ("label", "active"), ("all", "label")])
@pytest.mark.parametrize("fallback", [True, False])
@pytest.mark.parametrize("seed,one_hot", [(0, False), (1, True), (2, True)])
def test_lens_slot_metrics_match_loop_from_slots(seed, one_hot, fallback, text_slots, gallery):
    (v, v_lens, gv, u, gu), cap_img, cap_lens = encodings(seed, one_hot)
    txt_lens = None if text_slots == "all" else label_text_slots(cap_lens)
    n_img, n_cap = len(v), len(u)
    whole = text_slots == "all" and gallery == "active"  # every caption's c slot is on
    galleries = [list(range(n_cap)) if whole else np.nonzero(cap_lens == c)[0] for c in range(5)]
    sims = [
        [
            [reference_pair_score(v[i], v_lens[i], gv[i], u[j, c], gu[j], c, fallback) for j in gal]
            for i in range(n_img)
        ]
        for c, gal in enumerate(galleries)
    ]
    has_slot = [[bool((v_lens[i] == c).any()) for i in range(n_img)] for c in range(5)]
    want = reference_lens_slot(sims, cap_img, cap_lens, galleries, has_slot, fallback)
    got = lens_slot_metrics(
        v, v_lens, gv, u, gu, cap_img, cap_lens, txt_slot_lens=txt_lens, gallery=gallery,
        fallback=fallback, image_chunk=3, text_chunk=4, ks=KS, max_chunk_bytes=1,
    )  # fmt: skip
    assert_same(got, want)
    if gallery == "label":  # the paper's gallery is the default
        kw = dict(txt_slot_lens=txt_lens, fallback=fallback, ks=KS)
        assert_same(lens_slot_metrics(v, v_lens, gv, u, gu, cap_img, cap_lens, **kw), want)
    assert got["literal/i2t/n_without_slot"] >= 1  # image 0 has no slot at all
    if one_hot:  # exact ties are present, so the tie rule was exercised
        assert any(len(set(row)) < len(row) for lens_sims in sims for row in lens_sims)


@pytest.mark.parametrize("fallback", [True, False])
def test_one_lens_scores_equal_the_full_scorer_with_other_slots_off(fallback):
    (v, v_lens, gv, u, gu), _, _ = encodings(3, one_hot=False)
    for c in range(5):
        only = torch.where(v_lens == c, v_lens, torch.full_like(v_lens, -1))
        c_only = torch.full((len(u), 5), -1, dtype=torch.long)
        c_only[:, c] = c
        full = score_lens_slots(v, only, gv, u, gu, txt_slot_lens=c_only, fallback=fallback)
        fast = score_one_lens(v, v_lens, gv, u[:, c], gu, c, fallback=fallback, image_chunk=4, text_chunk=5)
        np.testing.assert_allclose(fast, full, atol=1e-6)
        matrix = LensSlotMatrix(v, v_lens, gv, u, gu, c, np.arange(len(u)), fallback=fallback)
        np.testing.assert_array_equal(
            matrix.rows(np.arange(len(v))), score_one_lens(v, v_lens, gv, u[:, c], gu, c, fallback=fallback)
        )


def test_slot_protocol_differs_from_the_full_score_by_hand():
    """The lens-slot protocol reads the Figurative slots alone; the full score also sees the Literal ones.

    Orthonormal e0..e3. Image 0: Literal slot e0, Figurative slot e1; image 1: Literal e2,
    Figurative e3. Two Figurative captions: c0 of image 0 (Literal slot e0, Figurative slot
    0.6 e1 + 0.8 e3), c1 of image 1 (Literal slot e2, Figurative slot e1); their other slots
    meet no image slot. With one slot per lens the full score is the mean of the two same-lens
    cosines: image 0 -> (c0 0.8, c1 0.5), image 1 -> (c0 0.4, c1 0.5): both I->T hits.
    Figurative slots alone: image 0 -> (c0 0.6, c1 1.0), image 1 -> (c0 0.8, c1 0.0): both miss.
    """
    e = torch.eye(4)
    v = torch.stack([torch.stack([e[0], e[1]]), torch.stack([e[2], e[3]])])
    v_lens = torch.tensor([[0, 1], [0, 1]])
    u = torch.zeros(2, 5, 4)
    u[:, 2:] = e[0] + e[1] + e[2] + e[3]  # unused slots (no Abstract/Background/Emotional image slot)
    u[0, 0], u[0, 1] = e[0], 0.6 * e[1] + 0.8 * e[3]
    u[1, 0], u[1, 1] = e[2], e[1]
    cap_img, cap_lens = np.array([0, 1]), np.array([1, 1])
    g = torch.ones(2, 4)
    full = score_lens_slots(v, v_lens, g, u, g)
    np.testing.assert_allclose(full, [[0.8, 0.5], [0.4, 0.5]], atol=1e-6)
    gallery = retrieval_metrics(full, cap_img, cap_lens, ks=(1,))
    assert gallery["figurative/i2t/R@1"] == 100.0 and gallery["figurative/t2i/R@1"] == 50.0
    m = lens_slot_metrics(v, v_lens, g, u, g, cap_img, cap_lens, ks=(1, 2))
    assert m["figurative/i2t/R@1"] == 0.0 and m["figurative/i2t/R@2"] == 100.0
    # T->I: c0's Figurative slot prefers image 1 (0.8 > 0.6), c1's prefers image 0 (1.0 > 0.0).
    assert m["figurative/t2i/R@1"] == 0.0
    assert m["macro/i2t/R@1"] == 0.0 and m["macro/n_lenses"] == 1.0 and math.isnan(m["literal/i2t/R@1"])


class _Recorded:
    """A numpy matrix served through the rows/columns accessors, recording each block's size."""

    def __init__(self, sim):
        self.sim, self.shape, self.sizes = sim, sim.shape, []

    def rows(self, idx):
        self.sizes.append(("rows", len(idx)))
        return self.sim[idx]

    def columns(self, idx):
        self.sizes.append(("columns", len(idx)))
        return self.sim[:, idx]


def test_blocks_follow_the_chunk_budget():
    rng = np.random.default_rng(4)
    n_img, n_cap = 60, 300
    cap_img, cap_lens = random_labels(rng, n_img, n_cap)
    sims = [rng.standard_normal((n_img, n_cap)).astype(np.float32) for _ in range(5)]
    galleries, has_slot = [np.arange(n_cap)] * 5, [np.ones(n_img, bool)] * 5
    budget = 32 * n_cap * 7  # 7 rows of 300 columns, or 35 columns of 60 rows
    wrapped = [_Recorded(s) for s in sims]
    got = lens_slot_recall(wrapped, cap_img, cap_lens, galleries, has_slot, ks=KS, max_chunk_bytes=budget)
    assert_same(got, lens_slot_recall(sims, cap_img, cap_lens, galleries, has_slot, ks=KS))
    sizes = [s for w in wrapped for s in w.sizes]
    assert max(n for kind, n in sizes if kind == "rows") == 7
    assert max(n for kind, n in sizes if kind == "columns") == 35


def test_three_per_lens_protocols_by_hand():
    """Literal I->T R@1 of one tiny split under each protocol, each computed by hand.

    Captions: c0 (image 0, Literal), c1 (image 0, Figurative), c2 (image 1, Literal),
    c3 (image 1, Figurative). Full score (Eq. 4) rows: image 0 (0.5, 0.9, 0.6, 0.1),
    image 1 (0.2, 0.3, 0.4, 0.8). Literal slot scores, rows: image 0 (0.7, 0.95, 0.3, 0.2),
    image 1 (0.1, 0.2, 0.9, 0.95).
    - full_gallery: image 0's top caption is c1, image 1's c3, neither Literal: 0%.
    - lens_gallery (c0, c2 only, full score): image 0 prefers c2 (0.6 > 0.5), a miss; image 1
      prefers c2 (0.4 > 0.2), a hit: 50%.
    - lens_slot, paper gallery (lens-c captions c0, c2; Literal slots): image 0 c0 0.7 > 0.3,
      image 1 c2 0.9 > 0.1: 100%.
    - lens_slot, every caption's slot active: image 0's top is c1 (0.95), image 1's c3 (0.95): 0%.
    """
    cap_img, cap_lens = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])
    full = np.array([[0.5, 0.9, 0.6, 0.1], [0.2, 0.3, 0.4, 0.8]], np.float32)
    literal = np.array([[0.7, 0.95, 0.3, 0.2], [0.1, 0.2, 0.9, 0.95]], np.float32)
    key = "literal/i2t/R@1"
    assert retrieval_metrics(full, cap_img, cap_lens, ks=(1,), protocol="full_gallery")[key] == 0.0
    assert retrieval_metrics(full, cap_img, cap_lens, ks=(1,), protocol="lens_gallery")[key] == 50.0
    figurative = np.zeros((2, 4), np.float32)  # not under test: any matrix of the right shape
    others = [np.zeros((2, 0), np.float32)] * 3
    has_slot = [np.ones(2, bool)] * 5

    def slot_recall(galleries):
        mats = [literal[:, galleries[0]], figurative[:, galleries[1]], *others]
        return lens_slot_recall(mats, cap_img, cap_lens, galleries, has_slot, ks=(1,))[key]

    empty = [np.zeros(0, np.int64)] * 3
    paper = [np.array([0, 2]), np.array([1, 3]), *empty]
    assert slot_recall(paper) == 100.0
    every = [np.arange(4), np.arange(4), *empty]
    assert slot_recall(every) == 0.0
