"""The Explore tab's twin maps: the user's strings under the base and the tuned encoder laid out in 2-D (UMAP on a
FAISS neighbour graph, explorer.compare.layout; PCA for tiny lists), the tuned layout aligned to the base one so a
position means the same on both, clusters per space named by their most central strings, and queries placed on both
maps.

`twin_map` returns the plain dict ui/twinmap draws, one column per field (row j is the string texts[j] = the run's
string number ids[j]):
{"ids": int array, "texts": [str], "base": (n, 2) array, "tuned": (n, 2) array, "base_cluster": int array,
 "tuned_cluster": int array, "moved": float array, "clusters": {"base": [{"id", "name", "colour", "size"}],
 "tuned": [...]}, "queries": [], "method", "n_total", "n_shown", "note", "seconds"}
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from mirror.errors import MirrorError

MIN_UMAP = 50  # fewer strings than this: PCA (UMAP's neighbour graph means little on a handful of points)
MAX_CLUSTERS = 20
# 20 colours of distinct hues, told apart on a light and a dark background (no near-white, no near-black): Sasha
# Trubetskoy's list of 20 distinct colours without white, black and beige, plus dark goldenrod. (It was Tableau 10
# followed by Category 10, the same ten hues twice: 14 clusters showed ~10 colours.) A cluster that persists keeps
# its colour from the base map to the tuned one (matched by members, see _match_colours).
PALETTE = (
    "#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#bfef45", "#ffe119", "#469990",
    "#9a6324", "#800000", "#808000", "#000075", "#a9a9a9", "#fabed4", "#dcbeff", "#aaffc3", "#ffd8b1", "#b8860b",
)  # fmt: skip


def check_points(n_points: Any, max_points: int) -> int:
    """The number of strings asked for on the map, as an int in range, or MirrorError."""
    try:
        n = int(float(n_points))
    except (TypeError, ValueError, OverflowError):
        raise MirrorError("the number of strings on the map must be a whole number") from None
    if not 10 <= n <= max_points:
        raise MirrorError(f"strings on the map must be between 10 and {max_points:,}")
    return n


def n_clusters_for(n: int) -> int:
    """Clusters for `n` strings: about sqrt(n / 2) (60 strings: 5, 400: 14), 3 to 20, never more than half the
    strings. (One per 25 strings gave a 60-word list two clusters, one of them 53 strings: no picture at all.)"""
    if n < 6:
        return max(1, n // 2)
    return int(max(3, min(MAX_CLUSTERS, round(math.sqrt(n / 2)), n // 2)))


def twin_map(
    texts: Sequence[str],
    base_vecs: np.ndarray,
    tuned_vecs: np.ndarray,
    *,
    max_points: int = 20_000,
    n_clusters: int | None = None,
    seed: int = 0,
    method: str = "auto",
    moved: Sequence[float] | None = None,
) -> dict[str, Any]:
    """Aligned 2-D layouts of the strings under both encoders (a seeded sample of `max_points` when there are
    more), their clusters per space and, per string, how much its neighbourhood moved (`moved`, from
    mirror.moved; computed on the shown strings when not given)."""
    from explorer.compare import layout

    started = time.perf_counter()
    texts = list(texts)
    n_total = len(texts)
    if n_total < 3:
        raise MirrorError("a map needs at least 3 strings")
    shown = np.arange(n_total)
    if n_total > max_points:
        shown = np.sort(np.random.default_rng(seed).choice(n_total, size=max_points, replace=False))
    base, tuned = _unit(base_vecs[shown]), _unit(tuned_vecs[shown])
    n = len(shown)
    shown_texts = [texts[i] for i in shown]
    method = ("umap" if n >= MIN_UMAP else "pca") if method == "auto" else method
    if method == "umap":
        xy_base, xy_tuned = layout.twin_layouts(base, tuned, seed)
    elif method == "pca":
        xy_base, xy_tuned = pca_2d(base), pca_2d(tuned)
    else:
        raise MirrorError(f"unknown layout {method!r}: umap or pca")
    xy_base = _normalised(xy_base)
    xy_tuned = align(xy_tuned, xy_base)
    k = n_clusters or n_clusters_for(n)
    base_labels, base_clusters = clusters(base, shown_texts, k, seed)
    tuned_labels, tuned_clusters = clusters(tuned, shown_texts, k, seed)
    _match_colours(base_labels, tuned_labels, base_clusters, tuned_clusters)
    if moved is None:
        from mirror.moved import neighbour_changes

        scores = {r["i"]: r["moved"] for r in neighbour_changes(shown_texts, base, tuned)}
        moved_shown = np.array([scores[j] for j in range(n)], dtype=np.float64)
    else:
        moved_shown = np.asarray(moved, dtype=np.float64)[shown]
    note = ""
    if n < n_total:
        note = f"Showing a seeded random sample of {n:,} of your {n_total:,} strings."
    if method == "pca":
        note = (note + " " if note else "") + f"PCA layout: under {MIN_UMAP} strings UMAP has too few neighbours."
    return {
        "ids": shown.astype(np.int64),
        "texts": shown_texts,
        "base": xy_base.astype(np.float32),
        "tuned": xy_tuned.astype(np.float32),
        "base_cluster": np.asarray(base_labels, dtype=np.int64),
        "tuned_cluster": np.asarray(tuned_labels, dtype=np.int64),
        "moved": np.round(moved_shown, 4),
        "clusters": {"base": base_clusters, "tuned": tuned_clusters},
        "queries": [],
        "method": method,
        "n_total": n_total,
        "n_shown": n,
        "note": note,
        "seconds": round(time.perf_counter() - started, 2),
    }


def sample_of(full: dict[str, Any], n: int, seed: int = 0) -> dict[str, Any]:
    """A seeded sample of `n` of a computed map's strings, at the places the full layout gave them (their clusters
    and colours too): any smaller count of a run's map costs no layout of its own (a new UMAP for every count took
    25-74 s of CPU each on 20k strings, kept in memory, with nothing to bound a visitor asking for many)."""
    total = len(full["ids"])
    if n >= total:
        return full
    rows = np.sort(np.random.default_rng(seed).choice(total, size=n, replace=False))
    out = dict(full)
    for key in ("ids", "base", "tuned", "base_cluster", "tuned_cluster", "moved"):
        out[key] = np.asarray(full[key])[rows]
    out["texts"] = [full["texts"][j] for j in rows]
    out["clusters"] = {
        side: [{**c, "size": int((out[f"{side}_cluster"] == c["id"]).sum())} for c in full["clusters"][side]]
        for side in ("base", "tuned")
    }
    out["n_shown"] = n
    out["note"] = (
        f"Showing a seeded random sample of {n:,} of your {full['n_total']:,} strings, where the map of all of them placed them."
    )
    out["seconds"] = 0.0
    return out


def map_json(data: dict[str, Any]) -> dict[str, Any]:
    """A twin-map dict as plain JSON values (lists, rounded floats): what the /map API endpoint returns (without the
    run it is of: the endpoint names it in its caption)."""
    arrays = ("ids", "base", "tuned", "base_cluster", "tuned_cluster", "moved")
    out = {k: v for k, v in data.items() if k not in (*arrays, "run")}
    out["ids"] = [int(i) for i in data["ids"]]
    for side in ("base", "tuned"):
        out[side] = np.round(np.asarray(data[side], dtype=np.float64), 5).tolist()
        out[f"{side}_cluster"] = [int(c) for c in data[f"{side}_cluster"]]
    out["moved"] = [round(float(m), 4) for m in data["moved"]]
    return out


def place_queries(
    queries: Sequence[str],
    query_base: np.ndarray,
    query_tuned: np.ndarray,
    map_data: dict[str, Any],
    base_shown: np.ndarray,
    tuned_shown: np.ndarray,
    k: int = 10,
) -> list[dict[str, Any]]:
    """Queries on the map without a new layout: in each space, the cosine-weighted mean position of the query's
    k nearest shown strings (a query equal to a shown string lands on it)."""
    out = []
    pos = {side: np.asarray(map_data[side], dtype=np.float64) for side in ("base", "tuned")}
    shown_at: dict[str, int] = {}
    for j, t in enumerate(map_data["texts"]):
        shown_at.setdefault(" ".join(t.split()).casefold(), j)
    for qi, text in enumerate(queries):
        place: dict[str, Any] = {"text": text}
        same = shown_at.get(" ".join(text.split()).casefold())
        for side, q, shown in (("base", query_base, base_shown), ("tuned", query_tuned, tuned_shown)):
            if same is not None:  # the query is one of the shown strings: exactly on it
                place[side] = [round(float(v), 4) for v in pos[side][same]]
                continue
            sims = _unit(shown) @ _unit(q[qi : qi + 1])[0]
            top = np.argsort(-sims)[: min(k, len(sims))]
            if sims[top[0]] > 0.9999:  # the same vector as a shown string (another spelling of it): there
                w = np.zeros(len(top))
                w[0] = 1.0
            else:
                w = np.exp((sims[top] - sims[top[0]]) / 0.05)  # sharply weighted to the nearest
            xy = (w[:, None] * pos[side][top]).sum(0) / w.sum()
            place[side] = [round(float(xy[0]), 4), round(float(xy[1]), 4)]
        out.append(place)
    return out


def align(moving: np.ndarray, target: np.ndarray) -> np.ndarray:
    """`moving` rotated (or reflected), scaled and shifted onto `target` row for row (orthogonal Procrustes):
    the tuned layout in the base layout's frame, so a string that did not move stays where it was."""
    from scipy.linalg import orthogonal_procrustes

    mu_m, mu_t = moving.mean(0), target.mean(0)
    a, b = moving - mu_m, target - mu_t
    r, _ = orthogonal_procrustes(a, b)
    rotated = a @ r
    # the same spread as the target, not the least-squares scale: that one shrinks the layout towards its centre
    # as the two layouts agree less (a tuned map drawn at half the size of the base one, however it moved)
    scale = float(np.linalg.norm(b) / max(np.linalg.norm(rotated), 1e-12))
    return rotated * scale + mu_t


def clusters(vecs: np.ndarray, texts: list[str], k: int, seed: int = 0) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Spherical k-means labels of `vecs` and one entry per cluster: id, a name made of its (up to) three most
    central strings, a colour, its size."""
    import faiss

    k = max(1, min(k, len(vecs)))
    km = faiss.Kmeans(vecs.shape[1], k, niter=20, seed=1234 + seed, spherical=True, verbose=False)
    km.min_points_per_centroid = 1
    km.max_points_per_centroid = 100_000
    km.train(np.ascontiguousarray(vecs, dtype=np.float32))
    _, lab = km.index.search(np.ascontiguousarray(vecs, dtype=np.float32), 1)
    labels = lab[:, 0].astype(int)
    used = sorted(set(labels.tolist()))
    renumber = {old: new for new, old in enumerate(used)}  # empty clusters dropped, ids 0..k-1
    labels = np.array([renumber[x] for x in labels])
    out = []
    for new, old in enumerate(used):
        members = np.flatnonzero(labels == new)
        sims = vecs[members] @ km.centroids[old]
        central = [texts[j] for j in members[np.argsort(-sims)[:3]]]
        out.append(
            {
                "id": new,
                "name": cluster_name(central),
                "examples": [_short(t, 160) for t in central],  # the legend's tooltip: each whole, or nearly
                "colour": PALETTE[new % len(PALETTE)],
                "size": int(len(members)),
            }
        )
    return labels, out


def cluster_name(central: Sequence[str]) -> str:
    """A cluster's name in the legend: its three most central strings when they are words or short terms; its most
    central string alone, up to 60 characters, when they are sentences (three cut to 24 characters each were
    unreadable: "a man is riding a hors… · …")."""
    if sum(len(t) for t in central) <= 24 * len(central):
        return " · ".join(_short(t) for t in central)
    return _short(central[0], 60)


def _match_colours(base_labels, tuned_labels, base_clusters: list[dict], tuned_clusters: list[dict]) -> None:
    """Give each tuned cluster the colour of the base cluster it shares most strings with (one to one), so a
    group that survives tuning keeps its colour; the others get the palette's unused colours."""
    from scipy.optimize import linear_sum_assignment

    overlap = np.zeros((len(base_clusters), len(tuned_clusters)))
    np.add.at(overlap, (base_labels, tuned_labels), 1)
    rows, cols = linear_sum_assignment(-overlap)
    taken = set()
    for r, c in zip(rows, cols, strict=True):
        if overlap[r, c] > 0:
            tuned_clusters[c]["colour"] = base_clusters[r]["colour"]
            taken.add(c)
    free = [col for col in PALETTE if col not in {t["colour"] for i, t in enumerate(tuned_clusters) if i in taken}]
    for i, t in enumerate(tuned_clusters):
        if i not in taken:
            t["colour"] = free.pop(0) if free else PALETTE[i % len(PALETTE)]


def pca_2d(x: Any) -> np.ndarray:
    """Project rows onto their first two principal components (sign fixed so runs are reproducible)."""
    x = np.asarray(x, dtype=np.float64)
    centered = x - x.mean(0)
    _, _, vt = np.linalg.svd(centered, full_matrices=False)
    xy = centered @ vt[:2].T
    if xy.shape[1] < 2:
        xy = np.hstack([xy, np.zeros((len(xy), 2 - xy.shape[1]))])
    for j in range(2):  # make the largest-magnitude coordinate positive
        if xy[np.abs(xy[:, j]).argmax(), j] < 0:
            xy[:, j] *= -1
    return xy


def warm_up() -> None:
    """Compile UMAP's numba kernels (tens of seconds on a small CPU) before the first map is asked for, and FAISS's
    loader (what the first map's neighbours would pay)."""
    import faiss  # noqa: F401

    from explorer.compare import layout

    layout.warm_up()


def _normalised(xy: np.ndarray) -> np.ndarray:
    """Centred and scaled so the layout spans about [-1, 1]."""
    xy = xy - xy.mean(0)
    return xy / max(float(np.abs(xy).max()), 1e-12)


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _short(text: str, n: int = 24) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"
