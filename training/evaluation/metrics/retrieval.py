"""Retrieval metrics of the Lenses paper, computed in bounded memory at full test-set scale.

`retrieval_metrics` turns an ``[n_images, n_captions]`` score matrix into the numbers of main
Tables 2, 4 and 6 (recall overall and per lens under the `lens_gallery`/`full_gallery`
protocols, macro R@K over lenses, RSUM, LensCoverage/AllLenses/Lens DCG/Caption DCG at 10)
and the polysemy metrics of the IMP paper (meanR and medR of the best positive and of all
positives, mAP@R). One sweep over blocks of image rows produces everything; see
`training.evaluation.metrics.ranking` for the kernels and docs/evaluation.md for the definitions. The
main paper's lens-slot protocol needs slot-level scores: `training.evaluation.metrics.lens_slot`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from lenses_data.schemas import LENS_KEYS
from training.evaluation.metrics.keys import MAP_R, RSUM
from training.evaluation.metrics.ranking import (
    Positives,
    all_positive_ranks,
    best_positive,
    count_ahead,
    gather_pairs,
    iter_row_blocks,
    matrix_shape,
    rows_per_chunk,
    topk_indices,
)
from training.evaluation.metrics.topk import DiversityAccumulator, average_precision_at_r
from training.retriever.lenses import NUM_LENSES

N_LENSES = NUM_LENSES  # one lens count: training.retriever.lenses
RSUM_KS = (1, 5, 10)
Protocol = Literal["lens_gallery", "full_gallery"]
DEFAULT_CHUNK_BYTES = 256 * 2**20


def validate_labels(
    n_images: int, n_captions: int, caption_image: Any, caption_lens: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Checked int64 copies of the caption->image and caption->lens arrays."""
    if n_images == 0 or n_captions == 0:
        raise ValueError(f"need at least one image and one caption, got {n_images}x{n_captions}")
    ci = np.asarray(caption_image).astype(np.int64).ravel()
    cl = np.asarray(caption_lens).astype(np.int64).ravel()
    if len(ci) != n_captions or len(cl) != n_captions:
        raise ValueError(
            f"sim has {n_captions} caption columns but caption_image has {len(ci)} and "
            f"caption_lens {len(cl)} entries"
        )
    if ci.min() < 0 or ci.max() >= n_images:
        raise ValueError(f"caption_image values must lie in [0, {n_images}), got {ci.min()}..{ci.max()}")
    if cl.min() < 0 or cl.max() >= N_LENSES:
        raise ValueError(f"caption_lens values must lie in [0, {N_LENSES}), got {cl.min()}..{cl.max()}")
    return ci, cl


def check_ks(ks: Sequence[int]) -> tuple[int, ...]:
    out = tuple(int(k) for k in ks)
    if not out or min(out) < 1:
        raise ValueError(f"ks must be positive integers, got {ks!r}")
    return out


def recall_from_ranks(ranks: np.ndarray, ks: Sequence[int]) -> dict[str, float]:
    """R@K in percent from 1-based ranks of each query's best positive (NaN if no queries)."""
    if ranks.size == 0:
        return {f"R@{k}": float("nan") for k in ks}
    return {f"R@{k}": float(np.mean(ranks <= k) * 100.0) for k in ks}


def rank_summary(ranks: np.ndarray, suffix: str = "") -> dict[str, float]:
    """meanR and medR of 1-based ranks (NaN when there are none)."""
    empty = ranks.size == 0
    return {
        f"meanR{suffix}": float("nan") if empty else float(np.mean(ranks)),
        f"medR{suffix}": float("nan") if empty else float(np.median(ranks)),
    }


def protocol_free(metrics: dict[str, float]) -> dict[str, float]:
    """The metrics that do not depend on the per-lens protocol (everything but per-lens and macro)."""
    per_lens = tuple(f"{name}/" for name in LENS_KEYS) + ("macro/",)
    return {k: v for k, v in metrics.items() if not k.startswith(per_lens)}


def macro_recall(metrics: dict[str, float], ks: Sequence[int]) -> dict[str, float]:
    """Main Table 6's macro R@K: per direction, the unweighted mean of the per-lens R@K.

    Lenses without queries in the split (NaN) are left out; `macro/n_lenses` says how many
    lenses were averaged (5 on a full split).
    """
    out: dict[str, float] = {}
    n_lenses = 0
    for direction in ("i2t", "t2i"):
        for k in ks:
            values = [metrics[f"{name}/{direction}/R@{k}"] for name in LENS_KEYS]
            present = [v for v in values if not np.isnan(v)]
            out[f"macro/{direction}/R@{k}"] = float(np.mean(present)) if present else float("nan")
            n_lenses = max(n_lenses, len(present))
    out["macro/n_lenses"] = float(n_lenses)
    return out


class _LensSweep:
    """State of one pass over image-row blocks: every per-query quantity the metrics need."""

    def __init__(self, sim: Any, ci: np.ndarray, cl: np.ndarray, protocol: Protocol) -> None:
        n_images, n_captions = matrix_shape(sim)
        self.ci, self.cl, self.protocol = ci, cl, protocol
        self.pos = Positives.from_groups(np.arange(n_images), ci, cl)
        self.lens_counts = np.zeros((n_images, N_LENSES), np.int64)
        np.add.at(self.lens_counts, (ci, cl), 1)
        # Captions grouped by lens (stable, so index order survives inside each lens block).
        self.lens_perm = np.argsort(cl, kind="stable")
        self.lens_bounds = np.searchsorted(cl[self.lens_perm], np.arange(N_LENSES + 1))
        self.pos_in_lens = np.empty(n_captions, np.int64)
        self.pos_in_lens[self.lens_perm] = np.arange(n_captions) - self.lens_bounds[cl[self.lens_perm]]
        self.t2i_score = gather_pairs(sim, ci, np.arange(n_captions))
        self.t2i_ahead = np.zeros(n_captions, np.int64)
        self.i2t_rank = np.zeros(n_images, np.int64)  # 0 marks "not a query"
        self.i2t_all_ranks: list[np.ndarray] = []  # rank of every positive caption (IMP)
        self.lens_rank = np.zeros((N_LENSES, n_images), np.int64)
        self.diversity = DiversityAccumulator(ci, cl, self.lens_counts)

    def add_block(self, start: int, stop: int, block: np.ndarray) -> None:
        rows = np.arange(start, stop)
        # Text-to-image: each caption column's single positive is its image's row.
        s = self.t2i_score[None, :]
        self.t2i_ahead += np.count_nonzero(block > s, axis=0)
        self.t2i_ahead += np.count_nonzero((block == s) & (rows[:, None] < self.ci[None, :]), axis=0)
        # Image-to-text over the whole gallery.
        has = self.pos.counts[start:stop] > 0
        score, col = best_positive(block, self.pos, start, stop)
        self.i2t_rank[start:stop][has] = (count_ahead(block, score, col) + 1)[has]
        self.i2t_all_ranks.append(all_positive_ranks(block, self.pos, start, stop))
        self._add_lens_ranks(start, stop, block)
        self.diversity.add_block(rows[has], block[has] if not has.all() else block)

    def _add_lens_ranks(self, start: int, stop: int, block: np.ndarray) -> None:
        grouped = block[:, self.lens_perm] if self.protocol == "lens_gallery" else None
        for lens in range(N_LENSES):
            has = self.lens_counts[start:stop, lens] > 0
            if not has.any():
                continue
            score, col = best_positive(block, self.pos, start, stop, lens=lens)
            if grouped is None:  # full gallery: only the lens-l captions count as hits
                ahead = count_ahead(block, score, col)
            else:  # lens gallery: rank among the lens-l captions only
                lo, hi = self.lens_bounds[lens], self.lens_bounds[lens + 1]
                ahead = count_ahead(grouped[:, lo:hi], score, self.pos_in_lens[col])
            self.lens_rank[lens, start:stop][has] = (ahead + 1)[has]

    def summary(self, ks: tuple[int, ...]) -> dict[str, float]:
        out: dict[str, float] = {}
        i2t = self.i2t_rank[self.i2t_rank > 0]
        t2i = self.t2i_ahead + 1
        for direction, ranks in (("i2t", i2t), ("t2i", t2i)):
            for key, val in recall_from_ranks(ranks, ks).items():
                out[f"all/{direction}/{key}"] = val
        out[RSUM] = float(sum(recall_from_ranks(r, RSUM_KS)[f"R@{k}"] for r in (i2t, t2i) for k in RSUM_KS))
        for lens, name in enumerate(LENS_KEYS):
            lens_i2t = self.lens_rank[lens][self.lens_rank[lens] > 0]
            for key, val in recall_from_ranks(lens_i2t, ks).items():
                out[f"{name}/i2t/{key}"] = val
            for key, val in recall_from_ranks(t2i[self.cl == lens], ks).items():
                out[f"{name}/t2i/{key}"] = val
        out.update(macro_recall(out, ks))
        out.update(self.diversity.summary())
        # A caption has exactly one positive image, so for t2i "all positives" is the best one.
        i2t_all = np.concatenate(self.i2t_all_ranks) if self.i2t_all_ranks else np.zeros(0, np.int64)
        for direction, best, every in (("i2t", i2t, i2t_all), ("t2i", t2i, t2i)):
            for key, val in {**rank_summary(best), **rank_summary(every, "_allpos")}.items():
                out[f"all/{direction}/{key}"] = val
        return out


def retrieval_metrics(
    sim: Any,
    caption_image: Any,
    caption_lens: Any,
    *,
    ks: Sequence[int] = (1, 5, 10),
    protocol: Protocol = "lens_gallery",
    max_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> dict[str, float]:
    """All retrieval metrics (percent; ranks for meanR/medR) of an [n_images, n_captions] matrix.

    Image queries are the images with at least one caption; every caption is a text query.
    Per-lens values are NaN when a lens has no caption. `max_chunk_bytes` bounds the
    temporaries of one block of image rows.
    """
    if protocol not in ("lens_gallery", "full_gallery"):
        raise ValueError(f"protocol must be 'lens_gallery' or 'full_gallery', got {protocol!r}")
    ks = check_ks(ks)
    n_images, n_captions = matrix_shape(sim)
    ci, cl = validate_labels(n_images, n_captions, caption_image, caption_lens)
    sweep = _LensSweep(sim, ci, cl, protocol)
    for start, stop, block in iter_row_blocks(sim, rows_per_chunk(n_captions, max_chunk_bytes)):
        sweep.add_block(start, stop, block)
    return sweep.summary(ks)


def grouped_retrieval_metrics(
    sim: Any,
    query_group: Any,
    gallery_group: Any,
    *,
    ks: Sequence[int] = (1, 5, 10),
    max_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> dict[str, float]:
    """R@K (%), meanR, medR (best positive; `_allpos`: all positives) and mAP@R (%) for queries
    whose positives share their group id.

    Used for text-only prompt<->caption retrieval (group = (image, lens)) and external
    benchmarks. Queries without any positive are left out and counted in `n_skipped`.
    """
    ks = check_ks(ks)
    n_q, n_g = matrix_shape(sim)
    qg, gg = np.asarray(query_group).ravel(), np.asarray(gallery_group).ravel()
    if len(qg) != n_q or len(gg) != n_g:
        raise ValueError(f"sim is {n_q}x{n_g} but got {len(qg)} query and {len(gg)} gallery groups")
    _, codes = np.unique(np.concatenate([qg, gg]), return_inverse=True)
    pos = Positives.from_groups(codes[:n_q], codes[n_q:])
    ranks, aps, every = [], [], []
    for start, stop, block in iter_row_blocks(sim, rows_per_chunk(n_g, max_chunk_bytes)):
        has = pos.counts[start:stop] > 0
        score, col = best_positive(block, pos, start, stop)
        ranks.append((count_ahead(block, score, col) + 1)[has])
        every.append(all_positive_ranks(block, pos, start, stop))
        rows = np.nonzero(has)[0]
        if rows.size:
            n_pos = pos.counts[start:stop][rows]
            top = topk_indices(block[rows], int(n_pos.max()))
            hit = np.zeros(top.shape, bool)
            for r, q in enumerate(rows + start):  # positives per query are few: small loop
                hit[r] = np.isin(top[r], pos.cols[pos.indptr[q] : pos.indptr[q + 1]])
            aps.append(average_precision_at_r(hit, n_pos))
    rank = np.concatenate(ranks) if ranks else np.zeros(0, np.int64)
    out = recall_from_ranks(rank, ks)
    out.update(rank_summary(rank))
    out.update(rank_summary(np.concatenate(every) if every else np.zeros(0, np.int64), "_allpos"))
    out[MAP_R] = float(np.concatenate(aps).mean() * 100) if aps else float("nan")
    out["n_queries"] = float(rank.size)
    out["n_skipped"] = float(n_q - rank.size)
    return out
