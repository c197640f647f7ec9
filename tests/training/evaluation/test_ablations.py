"""Similarity ablations and text-only retrieval: checked against training.retriever.similarity and by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.evaluation.metrics.ablations import (
    no_mask_scores,
    similarity_ablation_scores,
    text_only_retrieval,
)
from training.evaluation.scoring.similarity import all_lens_text_slots
from training.retriever.similarity import lens_similarity, no_match_floor


def _encodings(seed=0, n_img=9, n_txt=21, n_slots=6, dim=12):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, 5, (n_img, n_slots), generator=g)
    lens[torch.rand(n_img, n_slots, generator=g) < 0.3] = -1
    lens[2] = -1  # no active slot
    lens[3] = 0  # only Literal slots
    return (
        torch.randn(n_img, n_slots, dim, generator=g),
        lens,
        torch.randn(n_img, dim, generator=g),
        torch.randn(n_txt, 5, dim, generator=g),
        torch.randn(n_txt, dim, generator=g),
    )


def test_no_mask_equals_reference_with_lenses_ignored():
    img_slots, img_lens, img_g, txt_slots, txt_g = _encodings()
    # Ignoring lenses == giving every active slot the same lens in the reference similarity.
    same_img = torch.where(img_lens >= 0, torch.zeros_like(img_lens), img_lens)
    same_txt = torch.zeros(len(txt_slots), 5, dtype=torch.long)
    want = lens_similarity(img_slots, same_img, img_g, txt_slots, same_txt, txt_g).numpy()
    got = no_mask_scores(img_slots, img_lens, img_g, txt_slots, txt_g, image_chunk=4, text_chunk=5)
    np.testing.assert_allclose(got, want, atol=2e-5)


def test_ablation_variants():
    img_slots, img_lens, img_g, txt_slots, txt_g = _encodings(1)
    txt_lens = all_lens_text_slots(len(txt_slots))
    full = similarity_ablation_scores("lens_masked_global", img_slots, img_lens, img_g, txt_slots, txt_g)
    np.testing.assert_allclose(
        full, lens_similarity(img_slots, img_lens, img_g, txt_slots, txt_lens, txt_g).numpy(), atol=2e-5
    )
    masked = similarity_ablation_scores("lens_masked", img_slots, img_lens, img_g, txt_slots, txt_g)
    assert np.all(masked[2] == np.float32(no_match_floor(2.0)))  # slot-less image: floor, no fallback
    glob = similarity_ablation_scores("global", img_slots, img_lens, img_g, txt_slots, txt_g)
    np.testing.assert_allclose(full[2], glob[2], atol=1e-6)  # ...and the global cosine with it
    cos = (img_g[0] / img_g[0].norm()) @ (txt_g[4] / txt_g[4].norm())
    assert glob[0, 4] == pytest.approx(float(cos), abs=1e-6)
    with pytest.raises(ValueError, match="unknown similarity variant"):
        similarity_ablation_scores("bogus", img_slots, img_lens, img_g, txt_slots, txt_g)


def test_text_only_retrieval_by_hand():
    # Prompts of (image 0, Literal) and (image 1, Emotional); captions of the same keys + one extra.
    prompts = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    captions = torch.tensor([[0.9, 0.1], [0.2, 0.8], [1.0, 0.05]])
    out = text_only_retrieval(prompts, [0, 1], [0, 4], captions, [0, 1, 0], [0, 4, 1], ks=(1, 2))
    # P0's best caption is c2 (image 0 but Figurative: not a match), c0 is second.
    assert out["P2C/R@1"] == 50.0 and out["P2C/R@2"] == 100.0
    # C2 has no matching prompt, so only c0 and c1 are queries, both hit at rank 1.
    assert out["C2P/R@1"] == 100.0 and out["C2P/n_skipped"] == 1.0
