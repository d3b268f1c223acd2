"""2-D layouts of the twin maps: UMAP (umap-learn) on a neighbour graph that FAISS builds, the tuned layout started
from the base one, and how faithful a layout is to its space.

Why not `umap.UMAP().fit_transform` on the vectors, as before: its own neighbour search (pynndescent) and 200 epochs
per map cost ~77 s of CPU for 20,000 strings. Here FAISS finds each string's 15 nearest neighbours (exact up to
`EXACT_MAX` strings, an inverted-file index beyond), UMAP builds its fuzzy graph from them (`precomputed_knn`) and
the tuned map starts from the base layout with half the epochs and a tenth of the step, so a string whose neighbours
did not change stays about where it was. bench/bench_map.py measures both ways: time, and the share of each string's 10 nearest
neighbours that are also its 10 nearest on the map (`neighbour_recall`).
"""

from __future__ import annotations

import functools
import math
import os
import threading
import warnings

import numpy as np

N_NEIGHBORS = 15
EXACT_MAX = 10_000  # exact kNN (FAISS flat inner product) up to this many strings; IVF beyond (graph recall ~0.9)
PARALLEL_MIN = 5_000  # from this many strings UMAP's SGD runs on every core (not bit-for-bit reproducible then)
SAMPLE_MAX = 30_000  # past this many strings UMAP lays out a seeded sample; the rest are placed from their neighbours
MIN_DIST = 0.1
_LOCK = threading.Lock()  # numba compiles UMAP's kernels on first use: one thread at a time


def base_epochs(n: int) -> int:
    """SGD epochs of the base layout: UMAP's own 200 (fewer lose neighbours: at 20k real strings, 120 epochs kept
    0.209 of each string's 10 nearest, 200 kept 0.230, full UMAP 0.233), 100 past 50k strings (time)."""
    return 200 if n <= 50_000 else 100


def tuned_epochs(n: int) -> int:
    """Epochs of the tuned layout, which starts from the base one: half (what moved settles, the rest barely moves)."""
    return base_epochs(n) // 2


# The tuned layout's SGD step, a tenth of UMAP's: started from the base layout, a full step first scatters what did
# not move and then gathers it again elsewhere. At 20k real strings (bench_map), 1.0 -> 0.1 raised the tuned map's
# neighbour recall 0.248 -> 0.288 and cut the median shift of strings whose neighbours did not change 0.134 -> 0.117.
TUNED_LEARNING_RATE = 0.1


def neighbours(x: np.ndarray, k: int = N_NEIGHBORS, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Each unit row's k nearest rows (itself first) and their cosine distances, as UMAP's `precomputed_knn` wants
    them: exact FAISS inner product up to EXACT_MAX rows, an IVF index (2·√n lists, 12 probed) beyond."""
    import faiss

    x = np.ascontiguousarray(x, dtype=np.float32)
    n, d = x.shape
    k = min(k, n)
    if n <= EXACT_MAX:
        index = faiss.IndexFlatIP(d)
    else:
        nlist = int(2 * math.sqrt(n))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
        train = np.random.default_rng(seed).choice(n, size=min(n, 40 * nlist), replace=False)
        index.train(x[np.sort(train)])
        index.nprobe = 12
    index.add(x)
    sims, idx = index.search(x, k)
    # the row itself first, whatever ties (duplicates) or the IVF probe did: UMAP reads column 0 as the point
    rows = np.arange(n)
    self_at = idx == rows[:, None]
    missing = ~self_at.any(axis=1)
    idx[missing, -1], sims[missing, -1] = rows[missing], 1.0
    order = np.argsort(~(idx == rows[:, None]), axis=1, kind="stable")
    idx, sims = np.take_along_axis(idx, order, 1), np.take_along_axis(sims, order, 1)
    idx[idx < 0] = rows[np.nonzero(idx < 0)[0]]  # an IVF list too short for k: padded with the row itself
    return idx.astype(np.int64), np.maximum(1.0 - sims, 0.0).astype(np.float32)


def umap_layout(
    x: np.ndarray,
    knn: tuple[np.ndarray, np.ndarray],
    *,
    init: np.ndarray | str = "spectral",
    n_epochs: int = 200,
    seed: int = 0,
    parallel: bool = False,
    learning_rate: float = 1.0,
) -> np.ndarray:
    """UMAP of unit rows `x` from their neighbour graph `knn` (see `neighbours`), started from `init`; `parallel`:
    SGD on every core (faster, not reproducible bit for bit)."""
    os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "mirror-numba"))
    with _LOCK:
        import umap

        _cache_kernels()

    reducer = umap.UMAP(
        n_neighbors=int(knn[0].shape[1]),
        min_dist=MIN_DIST,
        metric="cosine",
        init=init,
        n_epochs=int(n_epochs),
        learning_rate=learning_rate,
        precomputed_knn=knn,
        random_state=None if parallel else seed,  # a seed makes UMAP's SGD single-threaded (and reproducible)
        n_jobs=-1 if parallel else 1,
    )
    with _LOCK, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precomputed_knn.*")  # "no search index: no transform"
        return np.asarray(reducer.fit_transform(x), dtype=np.float64)


@functools.cache  # once a process
def _cache_kernels() -> None:
    """Numba compiles UMAP's kernels (the fuzzy graph's, the SGD epoch's: ~20 s of CPU on 2 AVX2 cores) in every
    process that lays out a map, as umap-learn does not mark them `cache=True`: cached here in NUMBA_CACHE_DIR like
    pynndescent's, so a server's first map after a restart (and every test process but the first) loads them
    instead (`Dispatcher.enable_caching`, what `cache=True` calls). Not cached: a kernel numba cannot cache, and the
    parallel twin of a serial one: umap-learn makes the SGD epoch twice from one Python function, serial and
    parallel, and numba's cache keys a function by its source and signature, not by `parallel`, so the two would
    load each other's code (a seeded map would run the parallel SGD, no longer reproducible): only the serial one is
    cached. Called under _LOCK."""
    import umap.layouts
    import umap.umap_
    import umap.utils
    from numba.core.dispatcher import Dispatcher

    found = [k for m in (umap.umap_, umap.layouts, umap.utils) for k in vars(m).values() if isinstance(k, Dispatcher)]
    kernels = list({id(k): k for k in found}.values())  # a kernel one module imports from another: once
    made_from: dict[int, list] = {}
    for kernel in kernels:
        made_from.setdefault(id(kernel.py_func), []).append(kernel)
    for kernel in kernels:
        twins = made_from[id(kernel.py_func)]
        one_of_a_kind = len(twins) == 1 or (
            not kernel.targetoptions.get("parallel") and sum(not t.targetoptions.get("parallel") for t in twins) == 1
        )
        if one_of_a_kind and not kernel.overloads:  # the only kernel its cache file serves, not compiled yet here
            try:
                kernel.enable_caching()
            except Exception:  # noqa: BLE001 - e.g. no writable cache folder: compiled as before
                pass


def twin_layouts(base: np.ndarray, tuned: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """UMAP layouts of the same strings under both encoders (unit rows): the base one from its spectral embedding,
    the tuned one started from the base one, both before alignment (explorer.compare.maps.align)."""
    n = len(base)
    if n > SAMPLE_MAX:  # 200k strings laid out whole: 395 s of CPU (bench_map); a 30k sample and the rest placed
        keep = np.sort(np.random.default_rng(seed).choice(n, size=SAMPLE_MAX, replace=False))
        xy_base, xy_tuned = twin_layouts(base[keep], tuned[keep], seed)
        return place(base, keep, xy_base, seed), place(tuned, keep, xy_tuned, seed)
    parallel = n >= PARALLEL_MIN
    xy_base = umap_layout(base, neighbours(base, seed=seed), n_epochs=base_epochs(n), seed=seed, parallel=parallel)
    xy_tuned = umap_layout(
        tuned,
        neighbours(tuned, seed=seed),
        init=xy_base,
        n_epochs=tuned_epochs(n),
        seed=seed,
        parallel=parallel,
        learning_rate=TUNED_LEARNING_RATE,
    )
    return xy_base, xy_tuned


def warm_up(n: int = 60) -> None:
    """Compile, and cache where they can be, the kernels a map runs on: both layouts of `n` random unit rows, as
    twin_layouts lays out a run of fewer than PARALLEL_MIN strings, their neighbours found by numpy rather than FAISS,
    so that only numpy and umap-learn are needed (scripts/warm_maps.py: while pip installs the rest). On a cold cache
    importing umap alone compiles pynndescent's kernels (~28 s of CPU on an AVX2 core; this project never runs them,
    umap-learn imports them), and the first layout UMAP's (~10 s)."""
    x = np.random.default_rng(0).normal(size=(n, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    sims = x @ x.T
    idx = np.argsort(-sims, axis=1, kind="stable")[:, :N_NEIGHBORS]  # each row first: its own similarity is 1
    knn = idx.astype(np.int64), np.maximum(1.0 - np.take_along_axis(sims, idx, 1), 0.0).astype(np.float32)
    xy = umap_layout(x, knn, n_epochs=base_epochs(n))
    umap_layout(x, knn, init=xy, n_epochs=tuned_epochs(n), learning_rate=TUNED_LEARNING_RATE)


def place(x: np.ndarray, keep: np.ndarray, xy_keep: np.ndarray, seed: int = 0, k: int = 10) -> np.ndarray:
    """Positions of every unit row of `x`: the laid-out rows `keep` where `xy_keep` put them, every other row at the
    similarity-weighted mean of its k nearest laid-out rows (sharply weighted to the nearest, on it when it is the same
    vector, as queries are placed)."""
    import faiss

    n = len(x)
    out = np.empty((n, 2), dtype=np.float64)
    out[keep] = xy_keep
    rest = np.setdiff1d(np.arange(n), keep)
    if not len(rest):
        return out
    sample = np.ascontiguousarray(x[keep], dtype=np.float32)
    d = sample.shape[1]
    if len(sample) <= EXACT_MAX:
        index = faiss.IndexFlatIP(d)
    else:
        nlist = int(2 * math.sqrt(len(sample)))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
        index.train(sample)
        index.nprobe = 12
    index.add(sample)
    sims, idx = index.search(np.ascontiguousarray(x[rest], dtype=np.float32), k)
    found = idx >= 0
    idx = np.where(found, idx, idx[:, :1])
    w = np.exp((sims - sims[:, :1]) / 0.05) * found
    same = sims[:, 0] > 0.9999  # the same vector as a laid-out row (a duplicate): exactly there
    w[same] = 0.0
    w[same, 0] = 1.0
    out[rest] = (w[:, :, None] * np.asarray(xy_keep)[idx]).sum(1) / np.maximum(w.sum(1, keepdims=True), 1e-12)
    return out


def neighbour_recall(x: np.ndarray, xy: np.ndarray, k: int = 10, sample: int | None = 5000, seed: int = 0) -> float:
    """How faithful a layout is: the mean share of each string's k nearest neighbours in the space (cosine, exact)
    that are among its k nearest on the map (Euclidean), over all strings or a seeded sample of them."""
    import faiss

    x = np.ascontiguousarray(x, dtype=np.float32)
    xy = np.ascontiguousarray(xy, dtype=np.float32)
    n = len(x)
    q = np.arange(n) if sample is None or n <= sample else np.random.default_rng(seed).choice(n, sample, replace=False)
    high, low = faiss.IndexFlatIP(x.shape[1]), faiss.IndexFlatL2(2)
    high.add(x)
    low.add(xy)
    _, a = high.search(x[q], k + 1)
    _, b = low.search(xy[q], k + 1)
    kept = [len((set(a[j]) - {q[j]}) & (set(b[j]) - {q[j]})) / k for j in range(len(q))]
    return float(np.mean(kept))
