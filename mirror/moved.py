"""What moved: the user's strings ranked by how much tuning changed their nearest neighbours (1 - overlap@k of
the base and the tuned top k), with the neighbours each one gained and lost."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

import numpy as np

BLOCK = 16_384  # queries per exact search: its results stay a few MB (FAISS blocks the matrix product itself;
# 2,048 a call made 20k strings 3x slower than 4,096 or more with the generic build: 3.0 s vs 1.1 s of CPU)


def nearest(vecs: np.ndarray, k: int, queries: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For each row number in `queries` (default: every row), its k nearest other rows of `vecs` (cosine, exact
    FAISS inner product on unit rows) and their scores, nearest first; the row itself is left out wherever ties
    put it."""
    import faiss

    x = np.ascontiguousarray(vecs, dtype=np.float32)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    k = min(k, len(x) - 1)
    q = np.arange(len(x)) if queries is None else np.asarray(queries, dtype=np.int64)
    ids = np.empty((len(q), k), dtype=np.int64)
    scores = np.empty((len(q), k), dtype=np.float32)
    for start in range(0, len(q), BLOCK):
        block = q[start : start + BLOCK]
        found_s, found_i = index.search(x[block], k + 1)
        # the first k results that are not the row itself, in order (a stable sort puts the dropped ones last)
        dropped = (found_i == block[:, None]) | (found_i < 0)
        if (dropped.sum(axis=1) > 1).any():  # FAISS found fewer than k others: non-finite vectors
            raise ValueError("fewer than k neighbours found: the vectors hold NaN or infinite values")
        kept = np.argsort(dropped, axis=1, kind="stable")[:, :k]
        ids[start : start + len(block)] = np.take_along_axis(found_i, kept, 1)
        scores[start : start + len(block)] = np.take_along_axis(found_s, kept, 1)
    return ids, scores


def top_k(vecs: np.ndarray, k: int) -> np.ndarray:
    """Each row's k nearest other rows (cosine, exact), nearest first."""
    return nearest(vecs, k)[0]


def neighbour_changes(texts: Sequence[str], base: np.ndarray, tuned: np.ndarray, k: int = 10) -> list[dict[str, Any]]:
    """Every string with `moved` = 1 - |base top k ∩ tuned top k| / k, the neighbours `gained` (tuned only, in
    tuned order) and `lost` (base only, in base order), and both top k; most moved first (ties: input order)."""
    texts = list(texts)
    if len(texts) < 2:
        return []
    nb, nt = top_k(base, k), top_k(tuned, k)
    k = nb.shape[1]
    rows = []
    for i, text in enumerate(texts):
        b, t = list(nb[i]), list(nt[i])
        sb, st = set(b), set(t)
        rows.append(
            {
                "i": i,
                "text": text,
                "moved": 1.0 - len(sb & st) / k,
                "gained": [texts[j] for j in t if j not in sb],
                "lost": [texts[j] for j in b if j not in st],
                "base_neighbours": [texts[j] for j in b],
                "tuned_neighbours": [texts[j] for j in t],
            }
        )
    rows.sort(key=lambda r: (-r["moved"], r["i"]))
    return rows


def changed_share(base: np.ndarray, tuned: np.ndarray, k: int = 10) -> float:
    """The mean over strings of `moved` (1 - overlap of the base and tuned top k): the share of the strings' nearest
    neighbours that tuning changed, 0 to 1 (0 with fewer than two strings)."""
    if len(base) < 2:
        return 0.0
    nb, nt = top_k(base, k), top_k(tuned, k)
    return float(np.mean([1.0 - len(set(b) & set(t)) / nb.shape[1] for b, t in zip(nb, nt, strict=True)]))


def filter_rows(rows: Sequence[dict[str, Any]], text_filter: str = "") -> list[dict[str, Any]]:
    """The rows whose string contains `text_filter`, ignoring case and runs of spaces (all rows for an empty filter)."""
    needle = " ".join(str(text_filter or "").split()).casefold()
    if not needle:
        return list(rows)
    return [r for r in rows if needle in " ".join(r["text"].split()).casefold()]  # spacing ignored on both sides


def moved_csv(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as CSV: rank, string, moved, gained and lost (joined with " | ")."""
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["rank", "string", "moved", "gained", "lost"])
    for rank, r in enumerate(rows, 1):
        w.writerow([rank, r["text"], f"{r['moved']:.2f}", " | ".join(r["gained"]), " | ".join(r["lost"])])
    return out.getvalue()
