"""Twin maps at 3k, 20k and 200k strings: layout time (wall and CPU), how faithful each layout is, the bytes the page
receives and the time until headless Chromium has drawn both maps.

Layouts compared, on the same vectors in the same process:
- "old": what the app did before issue 38, `umap.UMAP(...).fit_transform` per space (its own pynndescent neighbour
  search, 200 epochs past 2,000 strings, seeded so single-threaded), the tuned layout started from the base one;
- "new": explorer.compare.layout.twin_layouts (FAISS kNN graph as UMAP's precomputed_knn, 200 epochs for the base
  map, 100 for the tuned one started from it, SGD on both cores past 5,000 strings).
Both are then aligned the same way (explorer.compare.maps.align). Measures:
- recall@10 (base, tuned): the mean share of each string's 10 nearest neighbours in its space that are among its 10
  nearest on the map (explorer.compare.layout.neighbour_recall; a seeded sample of 3,000 strings);
- unmoved shift: for strings whose 10 nearest neighbours are the same under both encoders (moved = 0), the median
  distance between their base and tuned positions, in units of the map's half-width (both maps span about [-1, 1]);
  0 = a string that did not move stays exactly in place.
- payload: the JSON the page receives for the map (ui.twinmap.twin_map_value: typed arrays + texts), and its columns
  without the texts;
- draw: headless Chromium (Debian's, software WebGL) loading a page with the twin map: `widget ms` from the value's
  arrival to both maps drawn (regl-scatterplot's draw resolved on both), `page s` from navigation to the same.

Vectors: `--vectors DIR` with DIR/base.npy, DIR/tuned.npy (rows in the same order; a seeded sample for sizes below
their count), else synthetic clustered 384-d vectors (40 groups, a third of the strings moved to another group). The
200k row is synthetic (encoding 200k real strings twice takes longer on 2 cores than everything timed here), and
the old layout is not run there (it would take tens of minutes). Wall times on a shared machine are mostly waiting
for a core: read the CPU column and the ratios of one run.

    .venv/bin/python bench/bench_map.py --vectors DIR               # 3k, 20k from DIR; 200k synthetic
    .venv/bin/python bench/bench_map.py --sizes 3000 --no-old        # quick
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from common import print_table, write_json  # noqa: E402


def clustered(n: int, dim: int = 384, groups: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(groups, dim))
    label = rng.integers(0, groups, size=n)
    base = centres[label] + 0.6 * rng.normal(size=(n, dim))
    moved = rng.random(n) < 1 / 3
    label2 = np.where(moved, rng.integers(0, groups, size=n), label)
    tuned = centres[label2] + 0.5 * rng.normal(size=(n, dim))
    return base.astype(np.float32), tuned.astype(np.float32)


def unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def old_layouts(base: np.ndarray, tuned: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The layouts as explorer/maps.py made them before issue 38."""
    import umap

    def one(x: np.ndarray, init) -> np.ndarray:
        n = len(x)
        return umap.UMAP(
            n_neighbors=int(min(15, max(5, n // 10))),
            min_dist=0.1,
            metric="cosine",
            init=init if init is not None else "spectral",
            n_epochs=200 if n > 2000 else 300,
            random_state=seed,
            n_jobs=1,
            low_memory=True,
        ).fit_transform(x)

    xy_base = one(base, None)
    return xy_base, one(tuned, xy_base)


def timed(fn):
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def faithfulness(base, tuned, xy_base, xy_tuned, moved) -> dict[str, float]:
    from explorer.compare import layout, maps

    xy_base = maps._normalised(xy_base)
    xy_tuned = maps.align(xy_tuned, xy_base)
    still = moved == 0
    shift = np.linalg.norm(xy_base[still] - xy_tuned[still], axis=1)
    return {
        "recall_base": round(layout.neighbour_recall(base, xy_base, sample=3000), 3),
        "recall_tuned": round(layout.neighbour_recall(tuned, xy_tuned, sample=3000), 3),
        "unmoved": int(still.sum()),
        "unmoved_shift": round(float(np.median(shift)), 3) if still.any() else None,
    }


def moved_scores(base: np.ndarray, tuned: np.ndarray) -> np.ndarray:
    """mirror.moved's score (1 - overlap of the 10 nearest) per string; past 50k strings from the layout's IVF
    neighbour graph (an exact 200k x 200k search alone would take longer than everything timed here)."""
    from explorer.compare import layout
    from mirror.moved import top_k

    if len(base) <= 50_000:
        nb, nt = top_k(base, 10), top_k(tuned, 10)
    else:
        nb, nt = layout.neighbours(base, 11)[0][:, 1:], layout.neighbours(tuned, 11)[0][:, 1:]
    return np.array([1 - len(set(a) & set(b)) / 10 for a, b in zip(nb, nt, strict=True)])


def draw_times(values: dict[int, dict], repeats: int = 2) -> dict[int, dict[str, float]]:
    """Per size: the widget's time from value to both maps drawn and the page's from navigation, in headless
    Chromium (the best of `repeats` page loads)."""
    import gradio as gr
    from playwright.sync_api import sync_playwright

    from tests.server import free_port
    from tests.test_browser import CHROMIUM_ARGS, chromium_or_skip
    from ui.twinmap import TwinMap

    out = {}
    exe = chromium_or_skip()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        for n, value in values.items():
            with gr.Blocks() as demo:
                TwinMap(value, elem_id="tm")
            port = free_port()
            demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
            best = None
            for _ in range(repeats):
                page = browser.new_page(viewport={"width": 1300, "height": 900})
                t0 = time.perf_counter()
                page.goto(f"http://127.0.0.1:{port}/")
                page.wait_for_function(f"document.querySelector('#tm .tm')?.dataset.drawn === '{n}'", timeout=300_000)
                page_s = time.perf_counter() - t0
                widget_ms = int(page.locator("#tm .tm").get_attribute("data-draw-ms"))
                drawn = page.evaluate(
                    "['base', 'tuned'].map((m) => document.querySelector('#tm .tm').twinmap.drawn(m))"
                )
                assert drawn == [n, n], drawn
                page.close()
                if best is None or page_s < best["page_s"]:
                    best = {"widget_ms": widget_ms, "page_s": round(page_s, 2)}
            demo.close()
            out[n] = best
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[3000, 20000, 200000])
    parser.add_argument("--vectors", type=Path, help="a folder with base.npy and tuned.npy (real vectors)")
    parser.add_argument("--no-old", action="store_true", help="skip the old layout")
    parser.add_argument("--no-browser", action="store_true", help="skip the draw times")
    args = parser.parse_args()
    os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "mirror-numba"))
    from explorer.compare import layout, maps
    from ui.twinmap import twin_map_value

    real = None
    if args.vectors:
        real = unit(np.load(args.vectors / "base.npy")), unit(np.load(args.vectors / "tuned.npy"))
    # numba compiles (or loads from its cache) UMAP's kernels on first use: once, before anything is timed
    warm = unit(np.random.default_rng(0).normal(size=(300, 16)))
    layout.twin_layouts(warm, warm)
    old_layouts(warm, warm) if not args.no_old else None

    rows, values = [], {}
    for n in args.sizes:
        if real is not None and n <= len(real[0]):
            keep = np.sort(np.random.default_rng(0).choice(len(real[0]), size=n, replace=False))
            base, tuned, source = real[0][keep], real[1][keep], "real"
        else:
            base, tuned = clustered(n)
            base, tuned, source = unit(base), unit(tuned), "synthetic"
        moved = moved_scores(base, tuned)
        methods = [("new", layout.twin_layouts)]
        if not args.no_old and n <= 50_000:
            methods.insert(0, ("old", old_layouts))
        for name, fn in methods:
            (xy_base, xy_tuned), wall, cpu = timed(lambda fn=fn, base=base, tuned=tuned: fn(base, tuned))
            row = {"strings": n, "vectors": source, "layout": name, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}
            row.update(faithfulness(base, tuned, xy_base, xy_tuned, moved))
            rows.append(row)
            print(row, flush=True)
        texts = [f"string number {i} of the benchmark" for i in range(n)]  # ~32 characters, like a short sentence
        data = maps.twin_map(texts, base, tuned, max_points=n, moved=moved, method="pca")  # the dict's shape only
        data["base"], data["tuned"] = maps._normalised(xy_base), maps.align(xy_tuned, maps._normalised(xy_base))
        value = twin_map_value(data)
        rows[-1]["payload_kb"] = round(len(json.dumps(value)) / 1024)
        rows[-1]["columns_kb"] = round(len(json.dumps({k: v for k, v in value.items() if k != "texts"})) / 1024)
        values[n] = value
    if not args.no_browser:
        for n, t in draw_times(values).items():
            for row in rows:
                if row["strings"] == n and row["layout"] == "new":
                    row.update(t)
    print()
    print_table(rows, list(dict.fromkeys(k for r in rows for k in r)))
    write_json(f"map-{int(time.time())}.json", {"vectors": str(args.vectors or "synthetic"), "rows": rows})


if __name__ == "__main__":
    sys.exit(main())
