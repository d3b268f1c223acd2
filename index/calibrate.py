"""Calibration of approximate indexes: the smallest IVF nprobe (and ivfpq rerank) whose recall@10 against exact
search reaches CALIBRATION_RECALL on a sample of the indexed rows."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import faiss
import numpy as np

from index.exact import exact_top_k
from index.inputs import as_matrix
from index.rows import Rows

TARGET_RECALL = 0.95
# nprobe is calibrated to this recall@10 on a sample of indexed rows: a margin over the 0.95 promise for
# the sampling error of 256 queries and for user queries that look less like the indexed texts.
CALIBRATION_RECALL = 0.97
CALIBRATION_QUERIES = 256
RECALL_K = 10
# PQ codes alone reach recall@10 0.26 (clustered synthetic) / 0.75 (MiniLM embeddings) at best: an ivfpq index
# fetches `rerank * k` candidates by PQ distance and re-ranks them exactly from float16 rows. `rerank` is
# calibrated at build time among powers of two up to RERANK_MAX (bench/RESULTS.md, "Index scale-out").
RERANK_MAX = 128
# ivfpq calibration first picks the smallest nprobe whose probed lists hold this share of the exact
# neighbours (free to compute), then the smallest rerank reaching CALIBRATION_RECALL there, then lowers nprobe.
LIST_COVERAGE = 0.99

PqSearch = Callable[[np.ndarray, int, int, int], np.ndarray]
"""An ivfpq index's re-ranked search: (queries, k, nprobe, rerank) -> ids of the hits, best first, -1 if none."""


@dataclass(frozen=True)
class Calibration:
    """What calibration chose: nprobe (and rerank for ivfpq), the recall@10 measured there, over `count` rows."""

    nprobe: int
    recall_at_10: float
    count: int
    rerank: int | None = None


def calibrate_ivf(ivf: faiss.IndexIVF) -> Calibration:
    """Smallest nprobe whose recall@10 against exact search reaches CALIBRATION_RECALL on sampled rows.

    Queries are indexed rows with themselves left out of both result lists; the exact answer comes from
    the same IVF scanning every list, so no second copy of the vectors is needed (it needs a direct map).
    """
    n, nlist = ivf.ntotal, int(ivf.nlist)
    ids = _sample(n)
    q = np.vstack([ivf.reconstruct(int(i)) for i in ids])
    k = min(RECALL_K + 1, n)

    def neighbours(nprobe: int) -> np.ndarray:
        return ivf.search(q, k, params=faiss.SearchParametersIVF(nprobe=nprobe))[1]

    exact = _others(neighbours(nlist), ids, k)

    def recall(nprobe: int) -> float:
        return _recall(_others(neighbours(nprobe), ids, k), exact)

    nprobe = smallest_passing(lambda p: recall(p) >= CALIBRATION_RECALL, nlist)
    return Calibration(nprobe=nprobe, recall_at_10=round(recall(nprobe), 4), count=n)


def calibrate_ivfpq(
    ivf: faiss.IndexIVFPQ, rows: Rows, search: PqSearch, nprobe: int | None, rerank: int | None
) -> Calibration:
    """nprobe and rerank of an ivfpq index, calibrating whichever is None for recall@10 >= CALIBRATION_RECALL.

    Queries are sampled indexed rows (their float16 copies in `rows`) with themselves left out of both result
    lists; the exact answers come from a brute-force pass over `rows`. nprobe starts at the smallest value
    whose probed lists hold LIST_COVERAGE of those exact neighbours (read from the lists, no search needed);
    rerank is the smallest value (up to RERANK_MAX) that reaches the target there; then nprobe is lowered to
    the smallest value that still does with that rerank. A target the codes cannot reach even at RERANK_MAX
    becomes the recall reached there.
    """
    n = len(rows)
    ids = _sample(n)
    q = as_matrix(rows.take(ids), rows.dim, "rows")
    k = min(RECALL_K + 1, n)
    exact = _others(exact_top_k(rows, q, k), ids, k)
    memo: dict[tuple[int, int], float] = {}

    def recall(p: int, r: int) -> float:
        if (p, r) not in memo:
            memo[p, r] = _recall(_others(search(q, k, p, r), ids, k), exact)
        return memo[p, r]

    start = nprobe if nprobe is not None else _covering_nprobe(ivf, q, exact)
    if rerank is None:
        rerank = smallest_passing(lambda r: recall(start, r) >= CALIBRATION_RECALL, RERANK_MAX)
    target = min(CALIBRATION_RECALL, recall(start, rerank))
    final = start if nprobe is not None else smallest_passing(lambda p: recall(p, rerank) >= target, start)
    return Calibration(nprobe=final, recall_at_10=round(recall(final, rerank), 4), count=n, rerank=rerank)


def smallest_passing(ok: Callable[[int], bool], hi: int) -> int:
    """Smallest v in [1, hi] with ok(v), for ok monotone in v: doubling, then bisection; hi if none below passes."""
    v = 1
    while v < hi and not ok(v):
        v *= 2
    v = min(v, hi)
    lo = v // 2  # ok(lo) is false (or lo == 0)
    while v - lo > 1:
        mid = (lo + v) // 2
        if ok(mid):
            v = mid
        else:
            lo = mid
    return v


def _sample(n: int) -> np.ndarray:
    """The ids of the rows used as calibration queries (sorted, the same for the same n)."""
    rng = np.random.default_rng(0)
    return np.sort(rng.choice(n, size=min(n, CALIBRATION_QUERIES), replace=False))


def _others(found: np.ndarray, ids: np.ndarray, k: int) -> list[list[int]]:
    """Each query's hits without the query's own row (and without -1 fillers), at most k - 1 of them."""
    return [[j for j in row if j != i and j >= 0][: k - 1] for row, i in zip(found.tolist(), ids.tolist(), strict=True)]


def _recall(got: list[list[int]], exact: list[list[int]]) -> float:
    hits = sum(len(set(a) & set(b)) for a, b in zip(got, exact, strict=True))
    return hits / max(1, sum(len(b) for b in exact))


def _covering_nprobe(ivf: faiss.IndexIVF, q: np.ndarray, exact: list[list[int]]) -> int:
    """How many lists (in each query's probe order) it takes to hold LIST_COVERAGE of the exact neighbours."""
    nlist = int(ivf.nlist)
    where = _list_of_rows(ivf)
    order = ivf.quantizer.search(q, nlist)[1]
    rank = np.empty_like(order)
    rank[np.arange(len(q))[:, None], order] = np.arange(nlist)
    need = np.sort(np.concatenate([rank[i, where[e]] + 1 for i, e in enumerate(exact)] + [np.ones(1, int)]))
    return int(need[min(len(need) - 1, math.ceil(LIST_COVERAGE * len(need)) - 1)])


def _list_of_rows(ivf: faiss.IndexIVF) -> np.ndarray:
    """The inverted list each row id sits in, read from the lists themselves (no direct map needed)."""
    where = np.zeros(ivf.ntotal, dtype=np.int64)
    invlists = ivf.invlists
    for lst in range(ivf.nlist):
        size = invlists.list_size(lst)
        if size:
            ptr = invlists.get_ids(lst)
            where[faiss.rev_swig_ptr(ptr, size)] = lst
            invlists.release_ids(lst, ptr)
    return where
