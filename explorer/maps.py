"""The Map tab's data: a sample of the strings embedded by both encoders, laid out in 2-D and clustered.

(Today a PCA of each space with k-means clusters of the tuned one; linked, aligned maps are the next step.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mirror.errors import MirrorError

MAX_CLUSTERS = 20


def check_sizes(n_points: Any, n_clusters: Any, max_points: int) -> tuple[int, int]:
    """The number of strings and clusters asked for, as ints in range, or MirrorError."""
    try:
        n, k = int(float(n_points)), int(float(n_clusters))
    except (TypeError, ValueError, OverflowError):
        raise MirrorError("points and clusters must be whole numbers") from None
    if not 10 <= n <= max_points:
        raise MirrorError(f"points must be between 10 and {max_points}")
    if not 2 <= k <= MAX_CLUSTERS:
        raise MirrorError(f"clusters must be between 2 and {MAX_CLUSTERS}")
    return n, k


def project(texts: Sequence[str], base, tuned, n: int, k: int) -> dict[str, list[dict[str, Any]]]:
    """2-D PCA of a sample of `n` strings under both encoders, coloured by k-means clusters of the tuned space
    (the same colour is the same group on both maps)."""
    import faiss
    import numpy as np

    texts = list(texts)
    if len(texts) > n:
        picks = np.sort(np.random.default_rng(0).choice(len(texts), size=n, replace=False))
        texts = [texts[i] for i in picks]
    k = min(k, len(texts))
    spaces_ = {"base": base.encode(texts), "tuned": tuned.encode(texts)}
    km = faiss.Kmeans(spaces_["tuned"].shape[1], k, niter=20, seed=1234, spherical=True, verbose=False)
    km.min_points_per_centroid = 1
    km.train(spaces_["tuned"])
    _, labels = km.index.search(spaces_["tuned"], 1)
    out: dict[str, list[dict[str, Any]]] = {}
    for name, x in spaces_.items():
        xy = pca_2d(x)
        out[name] = [
            {"x": float(a), "y": float(b), "cluster": f"cluster {int(c) + 1}", "text": t}
            for (a, b), c, t in zip(xy, labels[:, 0], texts, strict=True)
        ]
    return out


def pca_2d(x: Any) -> Any:
    """Project rows onto their first two principal components (sign fixed so runs are reproducible)."""
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    centered = x - x.mean(0)
    _, _, vt = np.linalg.svd(centered, full_matrices=False)
    xy = centered @ vt[:2].T
    for j in range(xy.shape[1]):  # make the largest-magnitude coordinate positive
        if xy[np.abs(xy[:, j]).argmax(), j] < 0:
            xy[:, j] *= -1
    return xy
