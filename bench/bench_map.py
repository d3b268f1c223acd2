"""Map layout time: explorer.compare.maps.twin_map (two UMAP layouts, base then tuned started from it, Procrustes, k-means
clusters per space, what moved) for 1k, 3k and 20k strings, the process's first call (numba compiles UMAP's kernels,
or loads them from its cache) apart from warm calls.

Vectors: synthetic clustered 384-d unit vectors (the bundled model's width), 40 groups, the "tuned" space the same
groups with a third of the strings moved to another group and fresh noise; encoding 20k strings twice with the
bundled model on 2 shared CPU cores would take longer than the layouts being timed, and UMAP's cost depends on the
number of points and their neighbour graph, not on where the vectors came from. Wall time and this process's CPU
time are both given: on a shared machine the wall time is mostly waiting for a core.

    .venv/bin/python bench/bench_map.py                 # 1k, 3k, 20k; the app's 20k case (sampled to 3k) too
    .venv/bin/python bench/bench_map.py --cold          # first call with an empty numba cache (a fresh server)
    .venv/bin/python bench/bench_map.py --sizes 1000    # quick
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
from common import print_table, write_json


def clustered(n: int, dim: int = 384, groups: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(groups, dim))
    label = rng.integers(0, groups, size=n)
    base = centres[label] + 0.6 * rng.normal(size=(n, dim))
    moved = rng.random(n) < 1 / 3
    label2 = np.where(moved, rng.integers(0, groups, size=n), label)
    tuned = centres[label2] + 0.5 * rng.normal(size=(n, dim))
    return base.astype(np.float32), tuned.astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000, 20000])
    parser.add_argument("--cold", action="store_true", help="an empty numba cache: the first call compiles")
    parser.add_argument("--repeats", type=int, default=1, help="warm calls per size")
    args = parser.parse_args()
    if args.cold:
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="numba-cold-")
    from explorer.compare import maps

    umap_s: list[float] = []
    real_umap = maps._umap

    def timed_umap(*a, **k):
        t0 = time.perf_counter()
        try:
            return real_umap(*a, **k)
        finally:
            umap_s.append(time.perf_counter() - t0)

    maps._umap = timed_umap
    rows = []

    def measure(label: str, n: int, max_points: int) -> None:
        base, tuned = clustered(n)
        texts = [f"s{i}" for i in range(n)]
        umap_s.clear()
        t0, c0 = time.perf_counter(), time.process_time()
        out = maps.twin_map(texts, base, tuned, max_points=max_points)
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
        row = {
            "call": label,
            "strings": n,
            "laid out": out["n_shown"],
            "total_s": round(total, 1),
            "umap_s (2 layouts)": round(sum(umap_s), 1),
            "rest_s": round(total - sum(umap_s), 1),
            "cpu_s": round(cpu, 1),  # this process's CPU time: what the wall time would be on an idle core or two
        }
        rows.append(row)
        print(row, flush=True)

    first = min(args.sizes)
    measure("first (" + ("cold numba cache" if args.cold else "numba cache as found") + ")", first, first)
    for n in args.sizes:
        for _ in range(args.repeats):
            measure("warm", n, n)
        if n > 3000:
            measure("warm, the app's sample (MIRROR_MAX_MAP_POINTS=3000)", n, 3000)
    print()
    print_table(rows, list(rows[0]))
    write_json(
        f"map-{int(time.time())}.json", {"vectors": "synthetic clustered 384-d", "cold": args.cold, "rows": rows}
    )


if __name__ == "__main__":
    sys.exit(main())
