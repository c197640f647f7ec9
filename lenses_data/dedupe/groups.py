"""Pairs from both signals -> connected groups -> one survivor per group, with the reason recorded.

Two tiers of pairs:
- duplicate: Hamming <= hamming_radius or cosine >= clip_threshold. Connected components of these
  pairs are the dedupe groups; all but one member (the survivor) are removed.
- leakage: Hamming <= leakage radius or cosine >= leakage_threshold (a superset). Components of
  these pairs are the split groups: the split stage never puts two members in different splits.

Survivor rule (documented, deterministic): largest resolution (width * height), then lowest
image id. A removed member records the survivor (`duplicate_of`), the pair that linked it to the
group (`linked_via`: the survivor itself when they are a direct pair, else its closest group
neighbour), that pair's signal (phash, clip, both, or phash_crop: aligned crop hashes confirmed by
dHash) and its distance (Hamming bits for phash and both, aligned bits for phash_crop, 1 - cosine
for clip).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Thresholds:
    hamming_radius: int
    leak_radius: int
    clip_threshold: float
    leakage_threshold: float


def _signal(phash: pd.Series, clip: pd.Series) -> pd.Series:
    return pd.Series(
        np.select([phash & clip, phash, clip], ["both", "phash", "clip"], default=""), index=phash.index
    )


def combine_pairs(
    codes: np.ndarray,
    hash_pairs: np.ndarray,
    clip_pairs: np.ndarray,
    clip_sims: np.ndarray,
    emb: np.ndarray | None,
    t: Thresholds,
    crop: tuple[np.ndarray, np.ndarray] | None = None,
) -> pd.DataFrame:
    """One row per linked pair (a < b, row indices): hamming, cosine, aligned, tier, signal.

    `crop`: (pairs, aligned distances) confirmed by the crop signal (`dedupe/crops.py`); they
    are duplicates with signal `phash_crop` unless the whole-image hash or CLIP already says so.
    """
    crop_pairs, crop_dist = crop if crop is not None else (np.empty((0, 2), np.int64), np.empty(0, np.int64))
    frames = [pd.DataFrame(hash_pairs, columns=["a", "b"]), pd.DataFrame(clip_pairs, columns=["a", "b"]),
              pd.DataFrame(crop_pairs, columns=["a", "b"])]  # fmt: skip
    pairs = pd.concat(frames, ignore_index=True).drop_duplicates().sort_values(["a", "b"], ignore_index=True)
    a, b = pairs["a"].to_numpy(np.int64), pairs["b"].to_numpy(np.int64)
    unsigned = codes.astype(np.int64).view(np.uint64)
    pairs["hamming"] = np.bitwise_count(unsigned[a] ^ unsigned[b]).astype(np.int64)
    if emb is not None and len(a):
        # exact cosine from the stored float16 embeddings, so the record matches what is on disk
        pairs["cosine"] = np.einsum("ij,ij->i", emb[a].astype(np.float32), emb[b].astype(np.float32))
    else:
        pairs["cosine"] = np.nan
    cos = pairs["cosine"].fillna(-1.0)
    ph_dup, ph_leak = pairs["hamming"] <= t.hamming_radius, pairs["hamming"] <= t.leak_radius
    cl_dup, cl_leak = cos >= t.clip_threshold, cos >= t.leakage_threshold
    n = max(len(codes), 1)
    aligned = pd.Series(crop_dist, index=crop_pairs[:, 0] * n + crop_pairs[:, 1], dtype=float)
    pairs["aligned"] = aligned.reindex(a * n + b).to_numpy()
    crop_dup = pairs["aligned"].notna() & ~ph_dup & ~cl_dup
    dup = ph_dup | cl_dup | crop_dup
    pairs["tier"] = np.where(dup, "duplicate", "leakage")
    signal = np.where(dup, _signal(ph_dup, cl_dup), _signal(ph_leak, cl_leak))
    pairs["signal"] = np.where(crop_dup, "phash_crop", signal)
    return pairs[dup | ph_leak | cl_leak].reset_index(drop=True)


def _components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(len(a), dtype=np.int8), (a, b)), shape=(n, n))
    return connected_components(graph, directed=False)[1]


def _norm_distance(edges: pd.DataFrame, t: Thresholds) -> np.ndarray:
    """Distance relative to its own threshold, so phash and clip pairs compare."""
    ham = edges["hamming"].to_numpy(float) / (t.hamming_radius + 1)
    crop = edges["aligned"].to_numpy(float) / (t.hamming_radius + 1)
    cos = (1.0 - edges["cosine"].fillna(-1.0).to_numpy(float)) / max(1e-9, 1.0 - t.clip_threshold)
    return np.select(
        [edges["signal"].isin(["phash", "both"]), edges["signal"] == "phash_crop"], [ham, crop], cos
    )


def build_groups(ids: np.ndarray, areas: np.ndarray, pairs: pd.DataFrame, t: Thresholds) -> pd.DataFrame:
    """Per image: group_id, kept, duplicate_of, linked_via, signal, distance, split_group_id."""
    n = len(ids)
    ids = np.asarray(ids, dtype=object)
    dup = pairs[pairs["tier"] == "duplicate"]
    labels = _components(n, dup["a"].to_numpy(np.int64), dup["b"].to_numpy(np.int64))
    # survivor = first member in (largest area, lowest id) order, per component
    order = np.lexsort((ids.astype(str), -np.asarray(areas, dtype=np.int64)))
    first = pd.Series(order).groupby(labels[order]).first()
    survivor_row = first.reindex(labels).to_numpy()
    frame = pd.DataFrame({"image_id": ids, "group_id": ids[survivor_row]})
    frame["kept"] = survivor_row == np.arange(n)
    leak_labels = _components(n, pairs["a"].to_numpy(np.int64), pairs["b"].to_numpy(np.int64))
    frame["split_group_id"] = pd.Series(ids).groupby(leak_labels).transform("min").to_numpy()
    links = _links(dup, survivor_row, t)
    frame["duplicate_of"] = np.where(frame["kept"], None, frame["group_id"])
    for column in ("linked_via", "signal", "distance"):
        frame[column] = links[column].reindex(range(n)).to_numpy(dtype=object)
    frame["linked_via"] = frame["linked_via"].map(lambda row: None if pd.isna(row) else ids[int(row)])
    return frame


def _links(dup: pd.DataFrame, survivor_row: np.ndarray, t: Thresholds) -> pd.DataFrame:
    """For each removed row: the pair that linked it (direct pair to its survivor first)."""
    if "aligned" not in dup:  # pairs built without the crop signal
        dup = dup.assign(aligned=np.nan)
    forward = dup.rename(columns={"a": "src", "b": "dst"})
    backward = dup.rename(columns={"a": "dst", "b": "src"})
    edges = pd.concat([forward, backward], ignore_index=True)
    edges = edges[survivor_row[edges["src"].to_numpy(np.int64)] != edges["src"].to_numpy(np.int64)].copy()
    edges["indirect"] = survivor_row[edges["src"].to_numpy(np.int64)] != edges["dst"].to_numpy(np.int64)
    edges["norm"] = _norm_distance(edges, t)
    edges = edges.sort_values(["src", "indirect", "norm", "dst"], kind="stable")
    best = edges.groupby("src").first()
    best["distance"] = np.select(
        [best["signal"].isin(["phash", "both"]), best["signal"] == "phash_crop"],
        [best["hamming"].astype(float), best["aligned"].astype(float)],
        1.0 - best["cosine"],
    )
    return best.rename(columns={"dst": "linked_via"})[["linked_via", "signal", "distance"]]
