"""Fast lens-slot scoring against training.retriever.similarity, fallback rates and routing by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.evaluation.metrics.routing import fallback_rates, routing_matrix
from training.evaluation.scoring.similarity import all_lens_text_slots, label_text_slots, score_lens_slots
from training.retriever.similarity import lens_similarity_with_details


def random_encodings(seed, n_img=13, n_txt=29, n_slots=7, dim=16):
    g = torch.Generator().manual_seed(seed)
    img_slots = torch.randn(n_img, n_slots, dim, generator=g)
    img_lens = torch.randint(0, 5, (n_img, n_slots), generator=g)
    img_lens[torch.rand(n_img, n_slots, generator=g) < 0.3] = -1  # padding / inactive slots
    img_lens[0] = -1  # an image with no active slot: always falls back
    img_lens[1] = 2  # an image with only Abstract slots
    txt_slots = torch.randn(n_txt, 5, dim, generator=g)
    cap_image = torch.randint(0, n_img, (n_txt,), generator=g).numpy()
    cap_lens = torch.randint(0, 5, (n_txt,), generator=g).numpy()
    return (
        img_slots,
        img_lens,
        torch.randn(n_img, dim, generator=g),
        txt_slots,
        torch.randn(n_txt, dim, generator=g),
        cap_image,
        cap_lens,
    )


@pytest.mark.parametrize("mode", ["all", "label"])
@pytest.mark.parametrize("fallback", [True, False])
def test_fast_scores_equal_reference_similarity(mode, fallback):
    img_slots, img_lens, img_g, txt_slots, txt_g, _, cap_lens = random_encodings(0)
    txt_lens = all_lens_text_slots(len(txt_slots)) if mode == "all" else label_text_slots(cap_lens)
    ref = lens_similarity_with_details(
        img_slots, img_lens, img_g, txt_slots, txt_lens, txt_g, alpha=16.0, denominator=2.0, fallback=fallback
    )
    got = score_lens_slots(
        img_slots,
        img_lens,
        img_g,
        txt_slots,
        txt_g,
        txt_slot_lens=txt_lens,
        fallback=fallback,
        image_chunk=4,
        text_chunk=7,
    )
    np.testing.assert_allclose(got, ref.scores.numpy(), atol=2e-5, rtol=1e-5)
    # Image 0 has no slots: every one of its pairs is the global cosine (or the floor).
    assert ref.used_fallback[0].all()


def test_fallback_rates_match_reference_mask():
    img_slots, img_lens, img_g, txt_slots, txt_g, cap_image, cap_lens = random_encodings(1, n_txt=60)
    txt_lens = label_text_slots(cap_lens)
    mask = lens_similarity_with_details(img_slots, img_lens, img_g, txt_slots, txt_lens, txt_g).used_fallback
    rates = fallback_rates(img_lens, txt_lens, cap_image, cap_lens)
    for k, name in enumerate(("literal", "figurative", "abstract", "background", "emotional")):
        mine = cap_lens == k
        pairs = mask[:, mine].float().mean().item() * 100
        own = mask[cap_image[mine], np.nonzero(mine)[0]].float().mean().item() * 100
        assert rates[f"fallback/{name}/all_pairs"] == pytest.approx(pairs)
        assert rates[f"fallback/{name}/own_image"] == pytest.approx(own)
    # With all five text slots active only slot-less images fall back.
    all_rates = fallback_rates(img_lens, all_lens_text_slots(len(cap_lens)), cap_image, cap_lens)
    assert all_rates["fallback/literal/all_pairs"] == pytest.approx(100 / len(img_lens))


def test_routing_matches_reference_winning_slot_and_hand_case():
    img_slots, img_lens, img_g, txt_slots, txt_g, cap_image, cap_lens = random_encodings(2, n_txt=40)
    details = lens_similarity_with_details(
        img_slots, img_lens, img_g, txt_slots, all_lens_text_slots(len(txt_slots)), txt_g
    )
    routing = routing_matrix(img_slots, img_lens, txt_slots, cap_image, cap_lens, max_chunk_floats=50)
    winner = details.best_img_slot[torch.as_tensor(cap_image), torch.arange(len(cap_image))]
    expect_lens = np.zeros((5, 5), int)
    expect_slot = np.zeros((5, img_slots.shape[1]), int)
    for t, w in enumerate(winner.tolist()):
        if w >= 0:
            expect_lens[cap_lens[t], int(img_lens[cap_image[t], w])] += 1
            expect_slot[cap_lens[t], w] += 1
    np.testing.assert_array_equal(routing.by_lens, expect_lens)
    np.testing.assert_array_equal(routing.by_slot, expect_slot)
    assert routing.fallback.sum() == int((winner < 0).sum())

    # Hand case: one image with a Literal slot along x and an Emotional slot along y. A
    # Figurative caption whose Emotional slot points along y routes to the Emotional slot.
    img = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    lens = torch.tensor([[0, 4]])
    txt = torch.tensor([[[0.6, 0.8], [1, 0], [1, 0], [1, 0], [0.0, 1.0]]])
    r = routing_matrix(img, lens, txt, [0], [1])
    assert r.by_lens[1, 4] == 1 and r.by_lens.sum() == 1 and r.by_slot[1, 1] == 1
    assert np.isnan(r.percent(r.by_lens)[0]).all() and r.percent(r.by_lens)[1, 4] == 100.0
