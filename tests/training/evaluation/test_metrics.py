"""retrieval_metrics against a slow, separately written reference and hand-worked cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lenses_data.schemas import LENS_KEYS
from training.evaluation.metrics.retrieval import retrieval_metrics


def _ranked(scores, items):
    """Items ordered by descending score, ties to the lower index (plain Python)."""
    return sorted(items, key=lambda j: (-float(scores[j]), j))


def _recall(ranks, k):
    if not ranks:
        return float("nan")
    return 100.0 * sum(1 for r in ranks if r <= k) / len(ranks)


def _dcg(flags):
    return sum(1.0 / math.log2(r + 2) for r, f in enumerate(flags) if f)


def _median(values):
    srt = sorted(values)
    mid = len(srt) // 2
    return srt[mid] if len(srt) % 2 else (srt[mid - 1] + srt[mid]) / 2


def reference_macro(out, ks):
    """Main Table 6: per direction, the plain mean of the per-lens R@K of the lenses present."""
    for d in ("i2t", "t2i"):
        for k in ks:
            vals = [
                out[f"{name}/{d}/R@{k}"] for name in LENS_KEYS if not math.isnan(out[f"{name}/{d}/R@{k}"])
            ]
            out[f"macro/{d}/R@{k}"] = sum(vals) / len(vals) if vals else float("nan")
    out["macro/n_lenses"] = float(sum(1 for n in LENS_KEYS if not math.isnan(out[f"{n}/i2t/R@{ks[0]}"])))
    return out


def reference_metrics(sim, cap_img, cap_lens, ks, protocol):
    """The metric definitions of docs/evaluation.md, one query at a time."""
    sim = np.asarray(sim, dtype=np.float64)
    n_img, n_cap = sim.shape
    caps = list(range(n_cap))
    out = {}
    i2t, lens_i2t, every_i2t = [], {lens: [] for lens in range(5)}, []
    lc, all10, ldcg, cdcg, aps = [], [], [], [], []
    for i in range(n_img):
        mine = [j for j in caps if cap_img[j] == i]
        if not mine:
            continue
        order = _ranked(sim[i], caps)
        flags = [cap_img[j] == i for j in order]
        i2t.append(flags.index(True) + 1)
        every_i2t += [r + 1 for r, f in enumerate(flags) if f]  # IMP: the rank of every positive
        for lens in range(5):
            if not any(cap_lens[j] == lens for j in mine):
                continue
            if protocol == "lens_gallery":
                sub = _ranked(sim[i], [j for j in caps if cap_lens[j] == lens])
                lens_i2t[lens].append(next(r for r, j in enumerate(sub) if cap_img[j] == i) + 1)
            else:
                hits = [r for r, j in enumerate(order) if cap_img[j] == i and cap_lens[j] == lens]
                lens_i2t[lens].append(hits[0] + 1)
        lenses = {cap_lens[j] for j in mine}
        top = order[:10]
        seen, gain = set(), 0.0
        for r, j in enumerate(top):
            if cap_img[j] == i and cap_lens[j] not in seen:
                seen.add(cap_lens[j])
                gain += 1.0 / math.log2(r + 2)
        lc.append(len(seen) / len(lenses))
        all10.append(1.0 if seen == lenses else 0.0)
        ldcg.append(gain / _dcg([True] * min(len(lenses), 10)))
        cdcg.append(_dcg(flags[:10]) / _dcg([True] * min(len(mine), 10)))
        big_r = len(mine)
        hits_so_far, ap = 0, 0.0
        for r in range(big_r):
            if flags[r]:
                hits_so_far += 1
                ap += hits_so_far / (r + 1)
        aps.append(ap / big_r)
    t2i = []
    for j in caps:
        order = _ranked(sim[:, j], list(range(n_img)))
        t2i.append(order.index(cap_img[j]) + 1)
    for k in ks:
        out[f"all/i2t/R@{k}"] = _recall(i2t, k)
        out[f"all/t2i/R@{k}"] = _recall(t2i, k)
        for lens, name in enumerate(LENS_KEYS):
            out[f"{name}/i2t/R@{k}"] = _recall(lens_i2t[lens], k)
            out[f"{name}/t2i/R@{k}"] = _recall([t2i[j] for j in caps if cap_lens[j] == lens], k)
    out["RSUM"] = sum(_recall(r, k) for r in (i2t, t2i) for k in (1, 5, 10))
    out["LC@10"] = 100 * sum(lc) / len(lc)
    out["All@10"] = 100 * sum(all10) / len(all10)
    out["LensDCG@10"] = 100 * sum(ldcg) / len(ldcg)
    out["CaptionDCG@10"] = 100 * sum(cdcg) / len(cdcg)
    out["all/i2t/mAP@R"] = 100 * sum(aps) / len(aps)
    for name, ranks, every in (("i2t", i2t, every_i2t), ("t2i", t2i, t2i)):
        out[f"all/{name}/meanR"] = sum(ranks) / len(ranks)
        out[f"all/{name}/medR"] = _median(ranks)
        out[f"all/{name}/meanR_allpos"] = sum(every) / len(every)
        out[f"all/{name}/medR_allpos"] = _median(every)
    return reference_macro(out, ks)


def random_case(seed, n_img=23, max_caps=9, tie_levels=None):
    """Random scores; some images lack lenses or captions; ties planted when tie_levels is set."""
    rng = np.random.default_rng(seed)
    cap_img, cap_lens = [], []
    for i in range(n_img):
        if i % 7 == 3:
            continue  # an image without captions: never a query, still in the t2i gallery
        lenses = rng.choice(5, size=rng.integers(1, 6), replace=False)
        for _ in range(rng.integers(1, max_caps + 1)):
            cap_img.append(i)
            cap_lens.append(int(rng.choice(lenses)))
    perm = rng.permutation(len(cap_img))  # captions not grouped by image
    cap_img, cap_lens = np.array(cap_img)[perm], np.array(cap_lens)[perm]
    if tie_levels:
        sim = rng.integers(0, tie_levels, size=(n_img, len(cap_img))).astype(np.float32)
    else:
        sim = rng.standard_normal((n_img, len(cap_img))).astype(np.float32)
        # Planted exact ties between some caption columns and between some image rows.
        cols = rng.choice(sim.shape[1], size=(sim.shape[1] // 4, 2), replace=False)
        sim[:, cols[:, 0]] = sim[:, cols[:, 1]]
        sim[1::6] = sim[0::6][: len(sim[1::6])]
    return sim, cap_img, cap_lens


def assert_same(got, want):
    assert set(got) == set(want)
    for key, value in want.items():
        if math.isnan(value):
            assert math.isnan(got[key]), key
        else:
            assert got[key] == pytest.approx(value, abs=1e-9), key


@pytest.mark.parametrize("protocol", ["lens_gallery", "full_gallery"])
@pytest.mark.parametrize("seed,tie_levels", [(0, None), (1, 3), (2, 6), (3, None)])
def test_matches_slow_reference(seed, tie_levels, protocol):
    sim, cap_img, cap_lens = random_case(seed, tie_levels=tie_levels)
    want = reference_metrics(sim, cap_img, cap_lens, (1, 3, 5, 10), protocol)
    # A tiny chunk budget forces many blocks (one row each at this size).
    got = retrieval_metrics(sim, cap_img, cap_lens, ks=(1, 3, 5, 10), protocol=protocol, max_chunk_bytes=1)
    assert_same(got, want)
    assert_same(retrieval_metrics(sim, cap_img, cap_lens, ks=(1, 3, 5, 10), protocol=protocol), want)


def test_missing_lens_gives_nan_and_torch_input_matches():
    torch = pytest.importorskip("torch")
    sim, cap_img, cap_lens = random_case(5, tie_levels=4)
    cap_lens = np.where(cap_lens == 2, 1, cap_lens)  # no Abstract caption at all
    want = reference_metrics(sim, cap_img, cap_lens, (1, 5, 10), "lens_gallery")
    assert math.isnan(want["abstract/i2t/R@1"])
    assert_same(retrieval_metrics(torch.from_numpy(sim), cap_img, cap_lens), want)
    assert_same(
        retrieval_metrics(torch.from_numpy(sim).to(torch.bfloat16), cap_img, cap_lens),
        reference_metrics(
            torch.from_numpy(sim).to(torch.bfloat16).float().numpy(),
            cap_img,
            cap_lens,
            (1, 5, 10),
            "lens_gallery",
        ),
    )


def test_hand_worked_case():
    # Image 0 owns captions 0, 1, 4 (Literal, Figurative, Emotional); image 1 owns 2, 3
    # (Literal, Emotional). Worked by hand in the comments below.
    sim = np.array([[0.9, 0.1, 0.8, 0.2, 0.5], [0.3, 0.7, 0.6, 0.95, 0.1]])
    cap_img, cap_lens = [0, 0, 1, 1, 0], [0, 1, 0, 4, 4]
    m = retrieval_metrics(sim, cap_img, cap_lens, ks=(1, 5))
    # Row 0 ranks c0 c2 c4 c3 c1, row 1 ranks c3 c1 c2 c0 c4: both best positives at rank 1.
    assert m["all/i2t/R@1"] == 100.0
    # Columns: c0->img0 rank 1, c1 rank 2, c2 rank 2, c3 rank 1, c4 rank 1.
    assert m["all/t2i/R@1"] == pytest.approx(60.0)
    assert m["all/t2i/meanR"] == pytest.approx(1.4) and m["all/t2i/medR"] == 1.0
    assert m["RSUM"] == pytest.approx(560.0)
    # AP@R: image 0 (R=3) hits at ranks 1 and 3 -> (1 + 2/3)/3; image 1 (R=2) hit at 1 -> 1/2.
    assert m["all/i2t/mAP@R"] == pytest.approx(100 * (5 / 9 + 1 / 2) / 2)
    # Lens DCG: image 0 lenses first seen at ranks 1, 3, 5; image 1 at ranks 1, 3.
    d = [1 / math.log2(r + 1) for r in range(1, 6)]
    lens_dcg = ((d[0] + d[2] + d[4]) / (d[0] + d[1] + d[2]) + (d[0] + d[2]) / (d[0] + d[1])) / 2
    assert m["LensDCG@10"] == pytest.approx(100 * lens_dcg)
    assert m["CaptionDCG@10"] == pytest.approx(100 * lens_dcg)  # one caption per lens here
    assert m["LC@10"] == 100.0 and m["All@10"] == 100.0
    # Lens gallery: every lens-l query finds its caption first among the lens-l captions.
    assert m["literal/i2t/R@1"] == m["figurative/i2t/R@1"] == m["emotional/i2t/R@1"] == 100.0
    assert m["literal/t2i/R@1"] == 50.0 and m["figurative/t2i/R@1"] == 0.0
    assert math.isnan(m["abstract/i2t/R@1"]) and math.isnan(m["background/t2i/R@5"])
    # IMP meanR/medR over all positives: image 0's captions sit at ranks 1, 5, 3; image 1's at 3, 1.
    assert m["all/i2t/meanR"] == 1.0 and m["all/i2t/meanR_allpos"] == pytest.approx(13 / 5)
    assert m["all/i2t/medR_allpos"] == 3.0
    # Macro over the three lenses present: T->I R@1 is Literal 50, Figurative 0, Emotional 100.
    assert m["macro/t2i/R@1"] == pytest.approx(50.0) and m["macro/i2t/R@1"] == 100.0
    assert m["macro/n_lenses"] == 3.0
    # Full gallery: image 1's Literal caption sits at rank 3, image 0's Figurative at rank 5.
    f = retrieval_metrics(sim, cap_img, cap_lens, ks=(1, 5), protocol="full_gallery")
    assert f["literal/i2t/R@1"] == 50.0 and f["figurative/i2t/R@1"] == 0.0
    assert f["figurative/i2t/R@5"] == 100.0 and f["emotional/i2t/R@1"] == 50.0


def test_hand_worked_ties_go_to_lower_index():
    sim = np.full((2, 3), 0.5, dtype=np.float32)
    m = retrieval_metrics(sim, [1, 0, 1], [0, 0, 0], ks=(1, 2))
    # Row 0 ranks c0 c1 c2 (its caption c1 is 2nd); row 1 finds c0 first.
    assert m["all/i2t/R@1"] == 50.0 and m["all/i2t/meanR"] == 1.5
    # Every column ties, so image 0 comes first: c1 hits at 1, c0 and c2 at rank 2.
    assert m["all/t2i/R@1"] == pytest.approx(100 / 3) and m["all/t2i/medR"] == 2.0


def test_partial_coverage_and_bad_input():
    # Image 0 has Literal and Emotional captions but only Literal ones reach its top 10.
    n = 14
    sim = np.zeros((2, n))
    sim[0, : n - 1] = np.linspace(1.0, 0.5, n - 1)  # captions 0..12 in index order, 13 last
    cap_img = [0] * 2 + [1] * (n - 3) + [0]
    cap_lens = [0, 0] + [1] * (n - 3) + [4]
    m = retrieval_metrics(sim, cap_img, cap_lens)
    # Image 0 covers 1 of 2 lenses; image 1 (only ties at 0 -> its captions in index order) covers 1/1.
    assert m["LC@10"] == pytest.approx(75.0) and m["All@10"] == 50.0
    with pytest.raises(ValueError, match="caption_lens"):
        retrieval_metrics(sim, cap_img, [0] * (n - 1) + [5])
    with pytest.raises(ValueError, match="caption columns"):
        retrieval_metrics(sim, cap_img[:-1], cap_lens[:-1])
    with pytest.raises(ValueError, match="NaN"):
        retrieval_metrics(np.full((2, n), np.nan), cap_img, cap_lens)
    with pytest.raises(ValueError, match="protocol"):
        retrieval_metrics(sim, cap_img, cap_lens, protocol="other")


def test_grouped_metrics_match_reference():
    from training.evaluation.metrics.retrieval import grouped_retrieval_metrics

    rng = np.random.default_rng(7)
    q_group = rng.integers(0, 9, size=31)  # several queries per group; group 8 may lack positives
    g_group = rng.integers(0, 8, size=57)
    sim = rng.integers(0, 4, size=(31, 57)).astype(np.float64)  # heavy ties
    got = grouped_retrieval_metrics(sim, q_group, g_group, ks=(1, 3), max_chunk_bytes=1)
    ranks, aps, every = [], [], []
    for q in range(31):
        positives = {j for j in range(57) if g_group[j] == q_group[q]}
        if not positives:
            continue
        order = _ranked(sim[q], list(range(57)))
        flags = [j in positives for j in order]
        ranks.append(flags.index(True) + 1)
        every += [r + 1 for r, f in enumerate(flags) if f]
        hits, ap = 0, 0.0
        for r in range(len(positives)):
            if flags[r]:
                hits += 1
                ap += hits / (r + 1)
        aps.append(ap / len(positives))
    assert got["n_queries"] == len(ranks) and got["n_skipped"] == 31 - len(ranks)
    assert got["R@1"] == pytest.approx(_recall(ranks, 1)) and got["R@3"] == pytest.approx(_recall(ranks, 3))
    assert got["meanR"] == pytest.approx(np.mean(ranks)) and got["medR"] == pytest.approx(np.median(ranks))
    assert got["mAP@R"] == pytest.approx(100 * np.mean(aps))
    assert got["meanR_allpos"] == pytest.approx(sum(every) / len(every))
    assert got["medR_allpos"] == pytest.approx(_median(every))
    assert got["meanR_allpos"] > got["meanR"]  # several positives per query: the mean must grow


def test_memory_is_bounded_by_the_chunk_budget():
    """Temporaries follow max_chunk_bytes: far below one copy of the score matrix."""
    import tracemalloc

    rng = np.random.default_rng(0)
    sim = rng.standard_normal((400, 6000)).astype(np.float32)  # 9.2 MiB; a float64 copy is 18.3 MiB
    cap_img, cap_lens = rng.integers(0, 400, 6000), rng.integers(0, 5, 6000)
    tracemalloc.start()
    try:
        small = retrieval_metrics(sim, cap_img, cap_lens, max_chunk_bytes=2**19)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20
    assert small == retrieval_metrics(sim, cap_img, cap_lens)  # the budget changes memory, not results
