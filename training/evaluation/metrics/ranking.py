"""Chunked ranking kernels behind the retrieval metrics.

Everything here works on one block of query rows of a score matrix at a time, so the caller
bounds peak memory by the block size. Ranking is by descending score; equal scores are broken
by the lower gallery index, so the rank of gallery item j in a row is
``#(score > s_j) + #(score == s_j and index < j) + 1``. No function sorts a full row.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

# Sentinel larger than any gallery index, used when taking a minimum over candidate indices.
_NO_INDEX = np.iinfo(np.int64).max


def to_numpy_block(block: Any) -> np.ndarray:
    """A numpy float view/copy of a block of a numpy array or torch tensor (torch never imported)."""
    if hasattr(block, "detach"):  # torch tensor: move to CPU; half types have no numpy twin
        block = block.detach()
        if str(block.dtype) in ("torch.float16", "torch.bfloat16"):
            block = block.float()
        block = block.cpu().numpy()
    arr = np.asarray(block)
    if arr.dtype == np.float16:
        arr = arr.astype(np.float32)
    elif arr.dtype.kind != "f":
        arr = arr.astype(np.float64)
    if np.isnan(arr).any():
        raise ValueError("score matrix contains NaN; rankings would be undefined")
    return arr


def matrix_shape(sim: Any) -> tuple[int, int]:
    shape = tuple(sim.shape)
    if len(shape) != 2:
        raise ValueError(f"score matrix must be 2-D [n_queries, n_gallery], got shape {shape}")
    return int(shape[0]), int(shape[1])


def gather_pairs(sim: Any, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """sim[rows[i], cols[i]] for every i, without materialising anything else."""
    if hasattr(sim, "detach"):
        import torch

        idx_r = torch.as_tensor(rows, dtype=torch.long, device=sim.device)
        idx_c = torch.as_tensor(cols, dtype=torch.long, device=sim.device)
        return to_numpy_block(sim[idx_r, idx_c])
    return to_numpy_block(np.asarray(sim)[rows, cols])


def rows_per_chunk(n_cols: int, max_chunk_bytes: int, bytes_per_cell: int = 32) -> int:
    """Rows per block so that the block and its temporaries stay within max_chunk_bytes."""
    return max(1, int(max_chunk_bytes // max(1, n_cols * bytes_per_cell)))


def iter_row_blocks(sim: Any, block_rows: int) -> Iterator[tuple[int, int, np.ndarray]]:
    n_rows, _ = matrix_shape(sim)
    for start in range(0, n_rows, block_rows):
        stop = min(n_rows, start + block_rows)
        yield start, stop, to_numpy_block(sim[start:stop])


def count_ahead(block: np.ndarray, score: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Per row, how many columns rank ahead of the item with (score, column index).

    Rows whose score is NaN (no such item) get 0; callers ignore them.
    """
    s = score[:, None]
    ahead = np.count_nonzero(block > s, axis=1)
    tied_before = (block == s) & (np.arange(block.shape[1])[None, :] < index[:, None])
    return ahead + np.count_nonzero(tied_before, axis=1)


def topk_indices(block: np.ndarray, k: int) -> np.ndarray:
    """Column indices of the k best items per row, best first, ties to the lower index.

    Uses a partition to find the k-th best value, keeps everything strictly better and fills
    the rest with the lowest-index ties, then orders only those k items.
    """
    n_rows, n_cols = block.shape
    k = min(k, n_cols)
    if k == 0:
        return np.zeros((n_rows, 0), dtype=np.int64)
    if k == n_cols:
        return np.argsort(-block, axis=1, kind="stable")
    kth = np.partition(block, n_cols - k, axis=1)[:, n_cols - k][:, None]
    better = block > kth
    tied = block == kth
    need = k - np.count_nonzero(better, axis=1)
    chosen = better | tied
    crowded = np.nonzero(np.count_nonzero(tied, axis=1) > need)[0]
    if crowded.size:  # more ties at the boundary than free places: keep the lowest indices
        first_ties = np.cumsum(tied[crowded], axis=1) <= need[crowded, None]
        chosen[crowded] = better[crowded] | (tied[crowded] & first_ties)
    idx = np.nonzero(chosen)[1].reshape(n_rows, k)
    order = np.argsort(-np.take_along_axis(block, idx, axis=1), axis=1, kind="stable")
    return np.take_along_axis(idx, order, axis=1)


@dataclass(frozen=True)
class Positives:
    """Which gallery columns are positives of each query row, as CSR.

    Within a query the entries are sorted by (lens, column), so per-lens groups are contiguous.
    """

    indptr: np.ndarray  # [n_queries + 1]
    cols: np.ndarray  # [nnz] gallery column of each positive
    lens: np.ndarray  # [nnz] lens of each positive (all zero when lenses are not used)

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.indptr)

    @classmethod
    def from_groups(
        cls, query_group: np.ndarray, gallery_group: np.ndarray, gallery_lens: np.ndarray | None = None
    ) -> Positives:
        """Positives of query q are the gallery items whose group equals query_group[q]."""
        g_lens = np.zeros(len(gallery_group), np.int64) if gallery_lens is None else gallery_lens
        order = np.lexsort((np.arange(len(gallery_group)), g_lens, gallery_group))
        sorted_groups = gallery_group[order]
        first = np.searchsorted(sorted_groups, query_group, side="left")
        last = np.searchsorted(sorted_groups, query_group, side="right")
        sizes = last - first
        indptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        # Expand each query's [first, last) range into explicit positions in `order`.
        within = np.arange(indptr[-1]) - np.repeat(indptr[:-1], sizes)
        positions = np.repeat(first, sizes) + within
        cols = order[positions].astype(np.int64)
        return cls(indptr=indptr, cols=cols, lens=np.asarray(g_lens)[cols].astype(np.int64))


def best_positive(
    block: np.ndarray, pos: Positives, start: int, stop: int, lens: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Score and column of the best-ranked positive (optionally of one lens) per row of a block.

    Rows without such a positive get (NaN, 0).
    """
    n = stop - start
    best_score = np.full(n, np.nan)
    best_col = np.zeros(n, dtype=np.int64)
    lo, hi = pos.indptr[start], pos.indptr[stop]
    if hi == lo:
        return best_score, best_col
    rows = np.repeat(np.arange(n), pos.counts[start:stop])
    cols, lenses = pos.cols[lo:hi], pos.lens[lo:hi]
    if lens is not None:
        keep = lenses == lens
        rows, cols = rows[keep], cols[keep]
        if rows.size == 0:
            return best_score, best_col
    vals = block[rows, cols]
    seg_start = np.concatenate([[0], np.nonzero(np.diff(rows))[0] + 1])
    seg_rows = rows[seg_start]
    seg_max = np.maximum.reduceat(vals, seg_start)
    at_max = vals == np.repeat(seg_max, np.diff(np.append(seg_start, rows.size)))
    seg_col = np.minimum.reduceat(np.where(at_max, cols, _NO_INDEX), seg_start)
    best_score[seg_rows] = seg_max
    best_col[seg_rows] = seg_col
    return best_score, best_col


def all_positive_ranks(block: np.ndarray, pos: Positives, start: int, stop: int) -> np.ndarray:
    """1-based rank of every positive of every row of a block, in the CSR order of `pos`.

    The rank is the item's position in the row's full ranking (other positives ahead of it
    count, as in a retrieved list). Loop p handles the (p+1)-th positive of the rows that have
    one, so the work is (number of positives) x (columns) comparisons, nothing is sorted, and
    the temporaries stay within one block.
    """
    lo = pos.indptr[start]
    counts = pos.counts[start:stop]
    offsets = pos.indptr[start:stop] - lo
    out = np.zeros(pos.indptr[stop] - lo, np.int64)
    for p in range(int(counts.max()) if counts.size else 0):
        rows = np.nonzero(counts > p)[0]
        idx = offsets[rows] + p
        cols = pos.cols[lo + idx]
        sub = block if rows.size == len(counts) else block[rows]
        score = sub[np.arange(rows.size), cols]
        out[idx] = count_ahead(sub, score, cols) + 1
    return out
