"""lens_similarity against an independent slow reference (explicit loops over pairs and slots)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from training.retriever.similarity import (  # noqa: E402
    global_similarity,
    lens_similarity,
    lens_similarity_with_details,
    no_match_floor,
)


def _unit(x: list[float]) -> list[float]:
    n = math.sqrt(sum(a * a for a in x)) or 1.0
    return [a / n for a in x]


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def reference_score(v, v_lens, gv, u, u_lens, gu, alpha, denominator, fallback):
    """Plain-Python Eq. 4 for one (image, caption) pair; lists in, float out."""
    vs = [_unit(x) for x, lens in zip(v, v_lens, strict=True) if lens >= 0]
    vl = [lens for lens in v_lens if lens >= 0]
    us = [_unit(x) for x, lens in zip(u, u_lens, strict=True) if lens >= 0]
    ul = [lens for lens in u_lens if lens >= 0]
    img_terms, txt_terms = [], []
    for a, la in zip(vs, vl, strict=True):
        partners = [alpha * _dot(a, b) for b, lb in zip(us, ul, strict=True) if lb == la]
        if partners:
            m = max(partners)
            img_terms.append(m + math.log(sum(math.exp(p - m) for p in partners)))
    for b, lb in zip(us, ul, strict=True):
        partners = [alpha * _dot(a, b) for a, la in zip(vs, vl, strict=True) if la == lb]
        if partners:
            m = max(partners)
            txt_terms.append(m + math.log(sum(math.exp(p - m) for p in partners)))
    if not img_terms:
        return _dot(_unit(gv), _unit(gu)) if fallback else -2.0 / denominator - 1.0
    side_i = sum(img_terms) / len(img_terms) / alpha
    side_t = sum(txt_terms) / len(txt_terms) / alpha
    return (side_i + side_t) / denominator


def reference_matrix(inputs, alpha=16.0, denominator=2.0, fallback=True):
    vs, vl, gv, us, ul, gu = (t.tolist() for t in inputs)
    return torch.tensor(
        [
            [
                reference_score(vs[b], vl[b], gv[b], us[n], ul[n], gu[n], alpha, denominator, fallback)
                for n in range(len(us))
            ]
            for b in range(len(vs))
        ]
    )


def random_sets(seed: int, n_img=5, s_img=6, n_txt=7, s_txt=5, d=8, disjoint=False):
    """Random slots with padding (-1) rows, inactive caption slots and optional disjoint lenses."""
    g = torch.Generator().manual_seed(seed)
    img_slots = torch.randn(n_img, s_img, d, generator=g)
    txt_slots = torch.randn(n_txt, s_txt, d, generator=g)
    img_lens = torch.randint(0, 5, (n_img, s_img), generator=g)
    img_lens[torch.rand(n_img, s_img, generator=g) < 0.3] = -1  # padding
    img_lens[0] = -1  # an image with no active slot at all
    img_slots[0] = 0.0  # ... and zero (padding) vectors
    txt_lens = torch.full((n_txt, s_txt), -1)
    labels = torch.randint(0, 5, (n_txt,), generator=g)
    txt_lens[torch.arange(n_txt), labels] = labels  # one active caption slot, as in training
    txt_lens[1] = torch.arange(s_txt)  # all five active, as at inference
    if disjoint:
        img_lens = torch.where(img_lens >= 0, torch.zeros_like(img_lens), img_lens)
        txt_lens = torch.where(txt_lens >= 0, torch.full_like(txt_lens, 3), txt_lens)
    return (
        img_slots,
        img_lens,
        torch.randn(n_img, d, generator=g),
        txt_slots,
        txt_lens,
        torch.randn(n_txt, d, generator=g),
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("fallback", [True, False])
def test_matches_reference_with_padding_and_inactive_slots(seed, fallback):
    inputs = random_sets(seed)
    got = lens_similarity(*inputs, fallback=fallback)
    want = reference_matrix(inputs, fallback=fallback)
    assert got.shape == (5, 7) and got.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("alpha,denominator", [(4.0, 1.0), (30.0, 2.0)])
def test_matches_reference_for_other_hyperparameters(alpha, denominator):
    inputs = random_sets(5)
    got = lens_similarity(*inputs, alpha=alpha, denominator=denominator)
    torch.testing.assert_close(got, reference_matrix(inputs, alpha, denominator), atol=1e-5, rtol=1e-5)


def test_fully_disjoint_lenses_fall_back_to_global_cosine():
    inputs = random_sets(3, disjoint=True)
    details = lens_similarity_with_details(*inputs)
    assert bool(details.used_fallback.all())
    torch.testing.assert_close(details.scores, global_similarity(inputs[2], inputs[5]))
    assert bool((details.best_img_slot == -1).all())
    floor = lens_similarity(*inputs, fallback=False)
    assert bool((floor == no_match_floor(2.0)).all())


def test_fallback_mask_and_winning_slot_are_consistent_with_lenses():
    inputs = random_sets(7)
    img_lens, txt_lens = inputs[1], inputs[4]
    details = lens_similarity_with_details(*inputs)
    for b in range(img_lens.shape[0]):
        for n in range(txt_lens.shape[0]):
            active_img = {int(x) for x in img_lens[b] if x >= 0}
            active_txt = {int(x) for x in txt_lens[n] if x >= 0}
            assert bool(details.used_fallback[b, n]) == (not (active_img & active_txt))
            slot = int(details.best_img_slot[b, n])
            if slot >= 0:  # the winning slot carries a lens the caption has active
                assert int(img_lens[b, slot]) in active_txt


def test_chunking_does_not_change_scores():
    inputs = random_sets(11, n_img=9, n_txt=13)
    full = lens_similarity_with_details(*inputs).scores
    chunked = lens_similarity_with_details(*inputs, chunk_images=2, chunk_texts=3).scores
    torch.testing.assert_close(full, chunked)


def test_single_matching_pair_reduces_to_cosine():
    v = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    u = torch.tensor([[[0.6, 0.8]]])
    score = lens_similarity(
        v, torch.tensor([[2, 4]]), torch.ones(1, 2), u, torch.tensor([[4]]), torch.ones(1, 2)
    )
    torch.testing.assert_close(score, torch.tensor([[0.8]]))  # only slot 1 (lens 4) may match


@pytest.mark.parametrize("disjoint", [False, True])
@pytest.mark.parametrize("fallback", [True, False])
def test_gradients_are_finite_everywhere(disjoint, fallback):
    inputs = [
        t.clone().requires_grad_(True) if t.is_floating_point() else t
        for t in random_sets(4, disjoint=disjoint)
    ]
    scores = lens_similarity(*inputs, fallback=fallback)
    (scores * torch.randn_like(scores)).sum().backward()
    assert torch.isfinite(scores).all()
    for k, t in enumerate(inputs):
        if k in (2, 5) and not fallback:
            assert t.grad is None  # globals are not used without the fallback
        elif t.is_floating_point():
            assert t.grad is not None and torch.isfinite(t.grad).all()
    if not disjoint:  # active slots with partners receive gradient; the empty image gets none
        assert inputs[0].grad[1:].abs().sum() > 0
    assert inputs[0].grad[0].abs().sum() == 0


def test_low_precision_inputs_are_scored_in_float32():
    inputs = random_sets(2)
    half = [t.to(torch.bfloat16) if t.is_floating_point() else t for t in inputs]
    got = lens_similarity(*half)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, reference_matrix(half), atol=1e-5, rtol=1e-5)


def test_shape_errors_are_clear():
    inputs = list(random_sets(0))
    inputs[1] = inputs[1][:, :2]
    with pytest.raises(ValueError, match="slot lens"):
        lens_similarity(*inputs)


def test_zero_slot_sets_fall_back_everywhere():
    inputs = random_sets(6)
    no_img_slots = (inputs[0][:, :0], inputs[1][:, :0], *inputs[2:])
    details = lens_similarity_with_details(*no_img_slots)
    assert bool(details.used_fallback.all()) and bool((details.best_img_slot == -1).all())
    torch.testing.assert_close(details.scores, global_similarity(inputs[2], inputs[5]))
    no_txt_slots = (*inputs[:3], inputs[3][:, :0], inputs[4][:, :0], inputs[5])
    floor = lens_similarity(*no_txt_slots, fallback=False)
    assert floor.shape == (5, 7) and bool((floor == no_match_floor(2.0)).all())


def test_the_score_formula_is_written_once():
    # Eq. 4's combination of the two sides, the global fallback and the no-match floor live here;
    # the evaluation's faster scorers (scoring.py, the no-mask ablation) compute the sums their own
    # way and call `smooth_chamfer` / `with_global_fallback` / `no_match_floor` (issue 34, part 4).
    import re
    from pathlib import Path

    training = Path(__file__).resolve().parents[3] / "training"
    formula = re.compile(r"alpha \* denominator|/ denominator - 1|-2\.0 / denominator")
    written = sorted(
        p.relative_to(training).as_posix() for p in training.rglob("*.py") if formula.search(p.read_text())
    )
    assert written == ["retriever/similarity.py"]


def test_alpha_and_denominator_are_written_once():
    # Supp. Sec. 7's alpha = 16.0 and denominator 2.0 are `SMOOTH_CHAMFER_*` of training.retriever.config;
    # every scorer's signature and both configs default to those names, never to a number.
    import inspect
    import re
    from pathlib import Path

    from training.evaluation.config import ScoringSection
    from training.evaluation.scoring.similarity import score_lens_slots
    from training.retriever.config import SMOOTH_CHAMFER_ALPHA, SMOOTH_CHAMFER_DENOMINATOR, LossConfig

    training = Path(__file__).resolve().parents[3] / "training"
    literal = re.compile(r"\b(alpha|denominator)\s*(: float)?\s*=\s*(Field\(default=)?[0-9]")
    restated = [
        f"{p.relative_to(training).as_posix()}: {line.strip()}"
        for p in training.rglob("*.py")
        for line in p.read_text().splitlines()
        if literal.search(line.split("#")[0]) and "lora" not in line.lower()
    ]
    assert restated == []
    defaults = (SMOOTH_CHAMFER_ALPHA, SMOOTH_CHAMFER_DENOMINATOR) == (16.0, 2.0)
    assert defaults and (LossConfig().alpha, LossConfig().denominator) == (16.0, 2.0)
    assert (ScoringSection().alpha, ScoringSection().denominator) == (16.0, 2.0)
    signature = inspect.signature(score_lens_slots).parameters
    assert (signature["alpha"].default, signature["denominator"].default) == (16.0, 2.0)
