"""Index benchmark: build time, memory, query latency (single and batched) and recall@10 of our exact (flat)
and approximate (IVF) indexes on clustered synthetic 384-d vectors, against a NumPy brute-force baseline and
FAISS HNSW measured in the same run; then the bundled encoder end to end on the 10k-word list.

    .venv/bin/python bench/bench_index.py                          # 10k + 100k, sweeps, end to end (~3 min)
    .venv/bin/python bench/bench_index.py --sizes 1000000 --no-e2e --no-sweep   # the 1M size (~10 min, ~8 GB)
    .venv/bin/python bench/bench_index.py --sizes 1000000 --kinds ivf,ivfpq --hnsw-max 0 --no-sweep --no-e2e \
        --out bench/index_scale_results.json                       # IVF-PQ next to IVF at 1M (~6 min, ~6 GB)

Results are merged into bench/index_results.json (rows of a size and method not re-run are kept, each row
naming its run) and printed as tables.
One thread everywhere by default (--threads): stable numbers on a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import sys

ARGS = None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated index sizes (default: 10000,100000)")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--threads", type=int, default=1, help="FAISS, BLAS and torch threads (default: 1)")
    parser.add_argument("--queries", type=int, default=1000, help="held-out queries for recall@10")
    parser.add_argument("--single", type=int, default=300, help="single queries timed per method")
    parser.add_argument("--batch", type=int, default=100, help="queries per batch")
    parser.add_argument("--batches", type=int, default=10, help="batches timed per method")
    parser.add_argument("--hnsw-max", type=int, default=100_000, help="largest size with the HNSW comparison")
    parser.add_argument(
        "--kinds", default="flat,ivf", help="our index types to build: flat, ivf, ivfpq (default: flat,ivf)"
    )
    parser.add_argument("--no-sweep", action="store_true", help="skip the flat-vs-IVF threshold sweep")
    parser.add_argument("--nlist-sweep", action="store_true", help="also build IVF with nlist/2 and 2*nlist")
    parser.add_argument("--no-e2e", action="store_true", help="skip the bundled-encoder end-to-end run")
    parser.add_argument("--out", default=None, help="JSON file (default: bench/index_results.json)")
    return parser.parse_args()


if __name__ == "__main__":  # thread counts must be set before numpy / torch / faiss load their pools
    ARGS = parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import faiss  # noqa: E402
import numpy as np  # noqa: E402
from common import ROOT, data_path  # noqa: E402  (puts the project on sys.path)

from index import EXACT_MAX, IndexOptions, VectorIndex, default_nlist  # noqa: E402

K = 10


# ---------------------------------------------------------------- data and measuring helpers


def clustered(n: int, nq: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n indexed + nq held-out unit vectors from one mixture: ~n/1000 clusters of lognormal sizes, each point at
    cosine 0.58-0.86 to its centre (per-cluster spread), so neighbourhoods are dense and uneven as in embeddings."""
    rng = np.random.default_rng(seed)
    clusters = max(8, n // 1000)
    centres = rng.standard_normal((clusters, dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    weights = rng.lognormal(0.0, 0.7, clusters)
    weights /= weights.sum()
    spread = rng.uniform(0.6, 1.4, clusters).astype(np.float32) / np.sqrt(dim)

    def draw(m: int) -> np.ndarray:
        out = np.empty((m, dim), dtype=np.float32)
        for start in range(0, m, 100_000):  # chunks keep the temporary memory small at 1M
            labels = rng.choice(clusters, min(100_000, m - start), p=weights)
            x = rng.standard_normal((len(labels), dim), dtype=np.float32) * spread[labels, None] + centres[labels]
            out[start : start + len(labels)] = x / np.linalg.norm(x, axis=1, keepdims=True)
        return out

    return draw(n), draw(nq)


def index_mb(index: faiss.Index) -> float:
    """Memory held by a FAISS index: the size of its serialised form (vectors, lists, ids, graph links)."""
    with tempfile.TemporaryDirectory() as tmp:
        faiss.write_index(index, f"{tmp}/i")
        return os.path.getsize(f"{tmp}/i") / 2**20


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def latencies(fns: dict[str, Callable[[np.ndarray], Any]], queries: np.ndarray, count: int, batch: int,
              batches: int) -> dict[str, dict]:  # fmt: skip
    """p50/p99 (ms) of `count` single-vector calls and `batches` calls of `batch` vectors, for each method.

    The methods take turns on every query (rotating who goes first), so load from other processes on a shared
    machine hits them alike and the ratios between them stay fair even when absolute numbers drift.
    """
    names = list(fns)
    single: dict[str, list[float]] = {m: [] for m in names}
    many: dict[str, list[float]] = {m: [] for m in names}
    for m in names:
        fns[m](queries[:1])  # warm-up
    for i in range(min(count, len(queries))):
        for m in names[i % len(names) :] + names[: i % len(names)]:
            single[m].append(timed(lambda m=m, i=i: fns[m](queries[i : i + 1]))[1])
    for j, start in enumerate(range(0, batches * batch, batch)):
        for m in names[j % len(names) :] + names[: j % len(names)]:
            many[m].append(timed(lambda m=m, start=start: fns[m](queries[start : start + batch]))[1])
    return {
        m: {
            "single_p50_ms": 1e3 * float(np.percentile(single[m], 50)),
            "single_p99_ms": 1e3 * float(np.percentile(single[m], 99)),
            "batch_p50_ms": 1e3 * float(np.percentile(many[m], 50)),
            "batch_p99_ms": 1e3 * float(np.percentile(many[m], 99)),
            "batch_per_query_ms": 1e3 * float(np.percentile(many[m], 50)) / batch,
        }
        for m in names
    }


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / K for a, b in zip(found, truth, strict=True)]))


def numpy_topk(x: np.ndarray, q: np.ndarray, k: int = K) -> np.ndarray:
    """Brute force in NumPy: one matrix product, argpartition, then sort the k best (rows of ids)."""
    scores = q @ x.T
    top = np.argpartition(-scores, k, axis=1)[:, :k]
    order = np.take_along_axis(scores, top, 1).argsort(axis=1)[:, ::-1]
    return np.take_along_axis(top, order, 1)


def numpy_all(x: np.ndarray, q: np.ndarray, chunk: int = 50) -> np.ndarray:
    """numpy_topk over many queries in chunks (1,000 x 1M scores would be 4 GB at once)."""
    return np.vstack([numpy_topk(x, q[s : s + chunk]) for s in range(0, len(q), chunk)])


def index_searcher(index: VectorIndex) -> Callable[[np.ndarray], Any]:
    return lambda v: index.search_vectors(v, K)


def hit_ids(results: list) -> np.ndarray:
    return np.array([[h.id for h in hits] for hits in results])


def folder_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.iterdir()) / 2**20


# ---------------------------------------------------------------- synthetic sizes


def bench_size(n: int, args: argparse.Namespace) -> list[dict]:
    """Build every method over the same n vectors, then time them query by query in turn."""
    print(f"\n== {n:,} vectors ==", flush=True)
    x, q = clustered(n, args.queries, args.dim, seed=n)
    texts = [str(i) for i in range(n)]
    truth, truth_s = timed(lambda: exact_ids(x, q))
    print(f"  exact ground truth for {len(q)} queries: {truth_s:.1f}s", flush=True)
    rows: dict[str, dict] = {}
    searchers: dict[str, Callable[[np.ndarray], Any]] = {}

    def add(method: str, params: str, build_s: float, mem_mb: float, found: np.ndarray, search, **extra) -> None:
        rows[method] = {"size": n, "method": method, "params": params, "build_s": build_s, "index_mb": mem_mb,
                        "recall@10": recall(found, truth), **extra}  # fmt: skip
        searchers[method] = search
        print(f"  {method:<24} {params:<36} build {build_s:7.2f}s  recall {rows[method]['recall@10']:.4f}", flush=True)

    # NumPy baseline: the matrix is the index
    add(
        "numpy brute force",
        "x @ q.T + argpartition",
        0.0,
        x.nbytes / 2**20,
        numpy_all(x, q),
        lambda v: numpy_topk(x, v),
    )

    ours: dict[str, VectorIndex] = {}
    for kind in [k.strip() for k in args.kinds.split(",") if k.strip()]:
        gc.collect()
        index, build_s = timed(lambda kind=kind: VectorIndex.from_vectors(x, texts, IndexOptions(kind=kind), gpu=False))
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "idx"
            _, save_s = timed(lambda index=index, folder=folder: index.save(folder))
            disk = folder_mb(folder)
            _, load_s = timed(lambda folder=folder: VectorIndex.load(folder, gpu=False))
        info = index.meta["index"]
        params = {
            "flat": "IndexFlatIP (exact)",
            "ivf": f"IVF{info.get('nlist')},Flat nprobe={info.get('nprobe')} (calibrated)",
            "ivfpq": f"IVF{info.get('nlist')},PQ{info.get('pq_m')}x{info.get('pq_bits')} nprobe={info.get('nprobe')} "
            f"rerank={info.get('rerank')} (calibrated)",
        }[kind]
        extra = {"disk_mb": disk, "save_s": save_s, "load_s": load_s, "ram_bytes_per_vector":
                 info["bytes_per_vector"]["ram"], "disk_bytes_per_vector": info["bytes_per_vector"]["disk"]}  # fmt: skip
        if kind != "flat":
            extra.update(nlist=info["nlist"], nprobe=info["nprobe"], calibrated_recall=info["calibrated_recall_at_10"])
        if kind == "ivfpq":
            extra.update(rerank=info["rerank"], pq_m=info["pq_m"], pq_bits=info["pq_bits"])
        add(f"ours: {kind}", params, build_s, index_mb(index._cpu), hit_ids(index.search_vectors(q, K)),
            index_searcher(index), **extra)  # fmt: skip
        ours[kind] = index

    if n <= args.hnsw_max:
        hnsw = faiss.IndexHNSWFlat(args.dim, 32, faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = 40
        _, build_s = timed(lambda: hnsw.add(x))
        for ef in (16, 32, 64, 128, 256, 512):  # smallest efSearch reaching 0.95 on these very queries
            hnsw.hnsw.efSearch = ef
            found = hnsw.search(q, K)[1]
            if recall(found, truth) >= 0.95:
                break
        add("faiss HNSW (comparison)", f"HNSW32 efC=40 efSearch={ef}", build_s, index_mb(hnsw), found,
            lambda v: hnsw.search(v, K))  # fmt: skip

    print("  timing (methods take turns per query)...", flush=True)
    for method, lat in latencies(searchers, q, args.single, args.batch, args.batches).items():
        rows[method].update(lat)
    base = rows["numpy brute force"]
    for r in rows.values():
        r["single_vs_numpy"] = r["single_p50_ms"] / base["single_p50_ms"]
        r["batch_vs_numpy"] = r["batch_p50_ms"] / base["batch_p50_ms"]
        print(f"  {r['method']:<24} single p50 {r['single_p50_ms']:8.3f} ms  batch of {args.batch} "
              f"p50 {r['batch_p50_ms']:8.2f} ms  ({r['single_vs_numpy']:.3f}x / {r['batch_vs_numpy']:.3f}x numpy)",
              flush=True)  # fmt: skip

    out = list(rows.values())
    if "ivf" in ours:
        out += nprobe_sweep(ours["ivf"], q, truth, n, args)
    if "ivfpq" in ours:
        out += rerank_sweep(ours["ivfpq"], q, truth, n, args)
    searchers.clear()
    ours.clear()
    gc.collect()
    if args.nlist_sweep:
        out += nlist_sweep(x, texts, q, truth, n, args)
    return out


def exact_ids(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    exact = faiss.IndexFlatIP(x.shape[1])
    exact.add(x)
    return exact.search(q, K)[1]


def nprobe_sweep(index: VectorIndex, q: np.ndarray, truth: np.ndarray, n: int, args) -> list[dict]:
    """Recall and latency of the same IVF at other nprobe values: the evidence behind the calibration."""
    chosen, nlist = index.meta["index"]["nprobe"], index.meta["index"]["nlist"]
    rows = []
    for nprobe in sorted({1, 2, 4, 8, 16, 32, 64, chosen} & set(range(1, nlist + 1))):
        index.set_nprobe(nprobe)
        lat = latencies({"ivf": index_searcher(index)}, q, min(100, args.single), args.batch, 2)["ivf"]
        rows.append({"size": n, "method": "ours: ivf nprobe sweep", "params": f"IVF{nlist} nprobe={nprobe}",
                     "nprobe": nprobe, "recall@10": recall(hit_ids(index.search_vectors(q, K)), truth),
                     "single_p50_ms": lat["single_p50_ms"], "chosen": nprobe == chosen})  # fmt: skip
    index.set_nprobe(chosen)
    return rows


def rerank_sweep(index: VectorIndex, q: np.ndarray, truth: np.ndarray, n: int, args) -> list[dict]:
    """Recall and latency of the same IVF-PQ at other re-ranking depths (rerank * k candidates re-scored exactly
    from the float16 rows; rerank=1: the PQ codes alone) and, at the calibrated depth, other nprobe values."""
    info = index.meta["index"]
    nprobe, rerank, nlist = info["nprobe"], info["rerank"], info["nlist"]
    settings = [(nprobe, r) for r in sorted({1, 4, 16, 64, 128, rerank})]
    settings += [(p, rerank) for p in sorted({1, 2, 4, 8, 16, 32, 64} - {nprobe}) if p <= nlist]
    rows = []
    for p, r in settings:
        index.set_nprobe(p)
        index.set_rerank(r)
        lat = latencies({"pq": index_searcher(index)}, q, min(100, args.single), args.batch, 2)["pq"]
        rows.append({"size": n, "method": "ours: ivfpq rerank/nprobe sweep", "params": f"nprobe={p} rerank={r}",
                     "nprobe": p, "rerank": r, "recall@10": recall(hit_ids(index.search_vectors(q, K)), truth),
                     "single_p50_ms": lat["single_p50_ms"], "chosen": (p, r) == (nprobe, rerank)})  # fmt: skip
        print(f"  ivfpq nprobe={p:<3} rerank={r:<3} recall {rows[-1]['recall@10']:.4f} "
              f"single p50 {lat['single_p50_ms']:.3f} ms", flush=True)  # fmt: skip
    index.set_nprobe(nprobe)
    index.set_rerank(rerank)
    return rows


def nlist_sweep(x: np.ndarray, texts: list[str], q, truth, n: int, args) -> list[dict]:
    rows = []
    for nlist in [v for v in (default_nlist(n) // 2, default_nlist(n) * 2) if v <= n // 39]:  # k-means needs 39/list
        index, build_s = timed(
            lambda nlist=nlist: VectorIndex.from_vectors(x, texts, IndexOptions(kind="ivf", nlist=nlist), gpu=False)
        )
        info = index.meta["index"]
        lat = latencies({"ivf": index_searcher(index)}, q, min(100, args.single), args.batch, 2)["ivf"]
        rows.append({"size": n, "method": "ours: ivf nlist sweep", "params": f"IVF{nlist} nprobe={info['nprobe']}",
                     "nlist": nlist, "nprobe": info["nprobe"], "build_s": build_s,
                     "recall@10": recall(hit_ids(index.search_vectors(q, K)), truth),
                     "single_p50_ms": lat["single_p50_ms"]})  # fmt: skip
        print(
            f"  nlist sweep: {rows[-1]['params']} build {build_s:.1f}s recall {rows[-1]['recall@10']:.4f}", flush=True
        )
        del index
        gc.collect()
    return rows


def threshold_sweep(args: argparse.Namespace) -> list[dict]:
    """Single-query p50 of flat vs IVF as the index grows: where exact search stops being cheap."""
    print("\n== flat vs IVF threshold sweep ==", flush=True)
    rows = []
    for n in (5_000, 10_000, 20_000, 30_000, 50_000, 70_000, 100_000):
        x, q = clustered(n, 300, args.dim, seed=7 + n)
        texts = [str(i) for i in range(n)]
        row: dict[str, Any] = {"size": n}
        searchers = {}
        for kind in ("flat", "ivf"):
            index, row[f"{kind}_build_s"] = timed(
                lambda kind=kind, x=x, texts=texts: VectorIndex.from_vectors(
                    x, texts, IndexOptions(kind=kind), gpu=False
                )
            )
            searchers[kind] = index_searcher(index)
            if kind == "ivf":
                row["ivf_params"] = f"IVF{index.meta['index']['nlist']} nprobe={index.meta['index']['nprobe']}"
        for kind, lat in latencies(searchers, q, 200, args.batch, 2).items():
            row[f"{kind}_single_p50_ms"] = lat["single_p50_ms"]
            row[f"{kind}_batch_per_query_ms"] = lat["batch_per_query_ms"]
        print(f"  {n:>7,}: flat {row['flat_single_p50_ms']:.3f} ms, ivf {row['ivf_single_p50_ms']:.3f} ms", flush=True)
        rows.append(row)
    return rows


# ---------------------------------------------------------------- end to end with the bundled encoder


def bench_e2e(args: argparse.Namespace) -> dict:
    import torch

    from mirror.data import read_texts
    from mirror.encoder import load_encoder
    from mirror.evaluate import read_pairs

    print("\n== end to end: bundled encoder, 10k words ==", flush=True)
    torch.set_num_threads(args.threads)
    words = [w.strip() for w in read_texts(data_path("words")) if w.strip()]
    encoder, load_s = timed(lambda: load_encoder("bundled", device="cpu"))
    index, build_s = timed(lambda: VectorIndex.build(encoder, words))
    rng = np.random.default_rng(0)
    sample = [words[i] for i in rng.choice(len(words), args.single, replace=False)]
    vectors = index.embed(sample)
    steps = {  # timed in turns on every word, like the synthetic methods
        "query": lambda i: index.search(sample[i], K),  # what a user waits for: embed + search + hits
        "embed": lambda i: index.embed([sample[i]]),
        "search": lambda i: index.search_vectors(vectors[i], K),
        "encoder_encode": lambda i: encoder.encode([sample[i]]),  # the general batch path, for comparison
    }
    times: dict[str, list[float]] = {name: [] for name in steps}
    for name in steps:
        steps[name](0)  # warm-up
    names = list(steps)
    for i in range(len(sample)):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            times[name].append(timed(lambda name=name, i=i: steps[name](i))[1])
    batch = sample[: args.batch]
    batch_s = min(timed(lambda: index.search(batch, K))[1] for _ in range(3))
    out = {
        "texts": len(index), "kind": index.kind, "encoder_load_s": load_s, "build_s": build_s,
        **{f"{name}_p50_ms": 1e3 * float(np.median(t)) for name, t in times.items()},
        "query_p99_ms": 1e3 * float(np.percentile(times["query"], 99)),
        f"batch{len(batch)}_ms": 1e3 * batch_s, "torch_threads": torch.get_num_threads(),
    }  # fmt: skip
    print("  " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in out.items()), flush=True)

    # Recall of a calibrated IVF on real embeddings: 9,000 words indexed; queries are the 1,000 held-out words
    # (like the indexed texts) and STS-dev sentences (unlike them: short words indexed, sentences asked).
    x = index._cpu.reconstruct_n(0, len(index))
    sentences = list(dict.fromkeys(s for p in read_pairs(data_path("sts_dev")) for s in p[:2]))[:500]
    held, sents = x[9_000:], encoder.encode(sentences)
    ivf = VectorIndex.from_vectors(x[:9_000], index.texts[:9_000], IndexOptions(kind="ivf"), gpu=False)
    exact = faiss.IndexFlatIP(x.shape[1])
    exact.add(x[:9_000])
    info = ivf.meta["index"]
    out["real_ivf"] = {"params": f"IVF{info['nlist']} nprobe={info['nprobe']}",
                       "calibrated_recall": info["calibrated_recall_at_10"]}  # fmt: skip
    for name, qv in (("held_out_words", held), ("sts_sentences", sents)):
        out["real_ivf"][f"recall_{name}"] = recall(hit_ids(ivf.search_vectors(qv, K)), exact.search(qv, K)[1])
    print(f"  real embeddings, IVF: {out['real_ivf']}", flush=True)
    return out


# ---------------------------------------------------------------- output


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def table(rows: list[dict], columns: list[str]) -> str:
    cells = [[fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    lines += ["| " + " | ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) + " |" for row in cells]
    return "\n".join(lines)


MAIN_COLUMNS = ["size", "method", "params", "build_s", "index_mb", "disk_mb", "ram_bytes_per_vector",
                "disk_bytes_per_vector", "single_p50_ms", "single_p99_ms", "batch_p50_ms", "batch_per_query_ms",
                "recall@10", "single_vs_numpy", "batch_vs_numpy"]  # fmt: skip


def main(args: argparse.Namespace) -> None:
    faiss.omp_set_num_threads(args.threads)
    out_path = Path(args.out) if args.out else ROOT / "bench" / "index_results.json"
    previous = json.loads(out_path.read_text()) if out_path.is_file() else {}
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    run = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv, "threads": args.threads,
           "loadavg_start": os.getloadavg()}  # fmt: skip

    rows = [r for n in sizes for r in bench_size(n, args)]
    sweep = None if args.no_sweep else threshold_sweep(args)
    e2e = None if args.no_e2e else bench_e2e(args)
    run["loadavg_end"] = os.getloadavg()

    for r in rows:
        r["run"] = run["started"]
    fresh = {(r["size"], r["method"]) for r in rows}  # rows of a (size, method) not re-run are kept, with their run
    kept = [r for r in previous.get("synthetic", []) if (r["size"], r["method"]) not in fresh]
    payload = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "cpu": cpu_model(),
                    "faiss": faiss.__version__, "numpy": np.__version__, "faiss_gpus": faiss.get_num_gpus()},
        "exact_max": EXACT_MAX,
        "runs": previous.get("runs", []) + [run],
        "synthetic": sorted(kept + rows, key=lambda r: r["size"]),
        "threshold_sweep": sweep if sweep is not None else previous.get("threshold_sweep"),
        "e2e": e2e if e2e is not None else previous.get("e2e"),
    }  # fmt: skip
    out_path.write_text(json.dumps(payload, indent=2, default=str))

    main_rows = [r for r in payload["synthetic"] if "sweep" not in r["method"]]
    if main_rows:
        print("\n" + table(main_rows, MAIN_COLUMNS))
    sweeps = [r for r in payload["synthetic"] if "sweep" in r["method"]]
    if sweeps:
        print("\n" + table(sweeps, ["size", "method", "params", "build_s", "recall@10", "single_p50_ms", "chosen"]))
    print("\n" + json.dumps({"run": run, "peak_rss_mb": peak_rss_mb()}, default=str))
    if payload["threshold_sweep"]:
        cols = ["size", "flat_single_p50_ms", "ivf_single_p50_ms", "flat_batch_per_query_ms", "ivf_batch_per_query_ms",
                "ivf_params", "ivf_build_s"]  # fmt: skip
        print("\n" + table(payload["threshold_sweep"], cols))
    if payload["e2e"]:
        print("\n" + json.dumps(payload["e2e"], indent=2))
    print(f"\nwrote {out_path}")


if __name__ == "__main__":
    main(ARGS)
