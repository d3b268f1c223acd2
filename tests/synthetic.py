"""Synthetic unit vectors with known structure, and recall against exact search (index tests)."""

from __future__ import annotations

import faiss
import numpy as np

from index.store import VectorIndex


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def clustered(n: int, dim: int, clusters: int, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors around random cluster centres (cosine ~0.7 to their centre)."""
    centres = unit(rng.standard_normal((clusters, dim)))
    labels = rng.integers(0, clusters, n)
    return unit(centres[labels] + rng.standard_normal((n, dim)) / np.sqrt(dim))


def recall_at_10(index: VectorIndex, data: np.ndarray, queries: np.ndarray) -> float:
    exact = faiss.IndexFlatIP(data.shape[1])
    exact.add(data)
    _, truth = exact.search(queries, 10)
    got = [[h.id for h in hits] for hits in index.search_vectors(queries, 10)]
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, truth, strict=True)]))
