"""Exact top-k by NumPy matrix products, block by block: over a flat FAISS index's own storage (batched queries)
and over Rows (the ground truth that ivfpq calibration measures against)."""

from __future__ import annotations

from collections.abc import Iterable

import faiss
import numpy as np

from index.rows import Rows

NUMPY_BATCH_MIN = 20  # flat searches of this many queries or more go through NumPy's GEMM (see flat_search_numpy)
QUERY_CHUNK = 256  # queries per pass over the rows


def flat_search_numpy(index: faiss.IndexFlat, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of many queries as NumPy matrix products over the flat index's own storage (no copy).

    faiss 1.15's wheel runs batches of ~20-1000 queries through its bundled BLAS 4-8x slower than NumPy's
    GEMM on our CPU (bench/RESULTS.md). Queries go in chunks of 256 and the rows in blocks of <= 16M scores
    (64 MB), so the vectors are read once per chunk; ties may come out in another order than faiss'.
    """
    n, dim = index.ntotal, index.d
    xb = faiss.rev_swig_ptr(index.get_xb(), n * dim).reshape(n, dim)
    scores = np.empty((len(q), k), dtype=np.float32)
    ids = np.empty((len(q), k), dtype=np.int64)
    for qs in range(0, len(q), QUERY_CHUNK):
        chunk = q[qs : qs + QUERY_CHUNK]
        rows = max(k, (1 << 24) // len(chunk))
        blocks = ((start, xb[start : start + rows]) for start in range(0, n, rows))
        scores[qs : qs + QUERY_CHUNK], ids[qs : qs + QUERY_CHUNK] = top_k_of_blocks(chunk, blocks, k)
    return scores, ids


def exact_top_k(rows: Rows, q: np.ndarray, k: int) -> np.ndarray:
    """Ids of the k rows (normalised) most similar to each query, best first: brute force, block by block."""
    ids = np.empty((len(q), min(k, len(rows))), dtype=np.int64)
    for qs in range(0, len(q), QUERY_CHUNK):
        ids[qs : qs + QUERY_CHUNK] = top_k_of_blocks(q[qs : qs + QUERY_CHUNK], rows.unit_blocks(), k)[1]
    return ids


def top_k_of_blocks(q: np.ndarray, blocks: Iterable[tuple[int, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores, ids) of the k best rows for each query, best first, over (first row id, rows) blocks."""
    best_s, best_i = [], []
    for start, block in blocks:
        sims = q @ block.T
        top = top_k(sims, k)
        best_s.append(np.take_along_axis(sims, top, axis=1))
        best_i.append(top + start)
    cand_s, cand_i = np.hstack(best_s), np.hstack(best_i)
    top = top_k(cand_s, k)
    top_s = np.take_along_axis(cand_s, top, axis=1)
    order = np.argsort(-top_s, axis=1, kind="stable")
    return np.take_along_axis(top_s, order, axis=1), np.take_along_axis(
        np.take_along_axis(cand_i, top, axis=1), order, axis=1
    )


def top_k(sims: np.ndarray, k: int) -> np.ndarray:
    """Column indices of the k largest values of each row (unordered); all columns if there are <= k."""
    if sims.shape[1] <= k:
        return np.broadcast_to(np.arange(sims.shape[1]), sims.shape)
    return np.argpartition(-sims, k - 1, axis=1)[:, :k]
