"""Encoding speed: our index build and query path against the naive one, on the bundled model, in one process.

Naive: `SentenceTransformer(path).encode(texts, batch_size=32, normalize_embeddings=True)` + `faiss.IndexFlatIP`.
Ours: `VectorIndex.build(encoder, texts)` (Encoder.encode: token-budgeted batches, bf16 autocast where the CPU
has native bf16, precision "auto") and `VectorIndex.search` for a query. Both sides run on the same strings one
after the other (a single query alternates between them), so their ratio is fair on a shared machine; the JSON
records the load average. Faithfulness: cosine of our vectors to the naive fp32 ones, and top-10 agreement.

    .venv/bin/python bench/bench_encode.py [--sizes 1000 10000] [--queries 100] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from common import data_path, print_table, write_json


def build_naive(st, texts: list[str]):
    import faiss

    vectors = st.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    return index, vectors


def timed(fn, *args):
    started = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - started, out


def agreement(ours: np.ndarray, naive: np.ndarray, queries: int = 500, k: int = 10) -> dict[str, float]:
    """Row cosines of our vectors to the naive ones, and the mean share of identical top-k neighbours of
    `queries` of the strings searched among all of them (exact search on both)."""
    cos = (ours * naive).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(naive, axis=1))
    picks = np.random.default_rng(0).choice(len(ours), size=min(queries, len(ours)), replace=False)

    def top(x: np.ndarray) -> np.ndarray:
        return np.argsort(-(x[picks] @ x.T), axis=1, kind="stable")[:, :k]

    same = [len(set(a) & set(b)) / k for a, b in zip(top(ours), top(naive), strict=True)]
    return {"cos_min": float(cos.min()), "cos_mean": float(cos.mean()), "top10_same": float(np.mean(same))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--queries", type=int, default=100, help="single queries timed (after 10 warm-up ones)")
    parser.add_argument("--threads", type=int, help="torch threads for both sides (default: torch's default)")
    parser.add_argument("--out", default="encode.json")
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from index.store import VectorIndex
    from mirror.encoder import bundled_model_path, load_encoder, load_sentence_transformer, resolve_precision

    path = bundled_model_path()
    st = load_sentence_transformer(path)
    enc = load_encoder(path)
    precision = resolve_precision(enc.device, "auto")
    print(f"torch threads {torch.get_num_threads()}, our precision {precision or 'fp32'}, load {os.getloadavg()}")
    data = {
        name: [t.strip() for t in data_path(name).read_text().splitlines() if t.strip()]
        for name in ("words", "sentences")
    }
    data = {name: list(dict.fromkeys(texts)) for name, texts in data.items()}  # unique: VectorIndex drops repeats
    build_naive(st, data["words"][:64]), VectorIndex.build(enc, data["words"][:64], gpu=False)  # warm up both

    rows, details = [], []
    for name, texts in data.items():
        for n in args.sizes:
            sample = texts[:n]
            load = os.getloadavg()[0]
            naive_s, (_, naive_vectors) = timed(build_naive, st, sample)
            ours_s, index = timed(lambda s: VectorIndex.build(enc, s, gpu=False), sample)
            ours_vectors = index._cpu.reconstruct_n(0, len(index))
            fidelity = agreement(ours_vectors, naive_vectors)
            rows.append({"task": f"index build, {len(sample):,} {name}", "naive s": naive_s, "ours s": ours_s,
                         "ours / naive": ours_s / naive_s, "cos min": fidelity["cos_min"],
                         "top-10 same": fidelity["top10_same"], "load": load})  # fmt: skip
            details.append({"data": name, "n": len(sample), "naive_s": naive_s, "ours_s": ours_s, **fidelity})
            print(rows[-1], flush=True)

    # single queries: words, on an index of sentences, alternating naive / ours, each warm
    import faiss

    index = VectorIndex.build(enc, data["sentences"][: max(args.sizes)], gpu=False)
    flat = faiss.IndexFlatIP(enc.dim)
    flat.add(index._cpu.reconstruct_n(0, len(index)))
    queries = data["words"][5000 : 5000 + args.queries + 10]
    times: dict[str, list[float]] = {"naive": [], "ours": [], "naive_encode": [], "ours_encode": []}
    load = os.getloadavg()[0]
    for i, q in enumerate(queries):
        naive_s, vector = timed(lambda q: st.encode([q], normalize_embeddings=True, convert_to_numpy=True), q)
        search_s, _ = timed(flat.search, vector, 10)
        ours_encode_s, _ = timed(index.embed, [q])
        ours_s, _ = timed(index.search, q, 10)
        if i >= 10:
            times["naive"].append(naive_s + search_s)
            times["naive_encode"].append(naive_s)
            times["ours"].append(ours_s)
            times["ours_encode"].append(ours_encode_s)
    p50 = {k: 1e3 * float(np.median(v)) for k, v in times.items()}
    rows.append({"task": f"single query p50 ms (encode + top-10, {args.queries} warm)", "naive s": p50["naive"],
                 "ours s": p50["ours"], "ours / naive": p50["ours"] / p50["naive"], "load": load})  # fmt: skip
    rows.append({"task": "single query p50 ms, encoding only", "naive s": p50["naive_encode"],
                 "ours s": p50["ours_encode"], "ours / naive": p50["ours_encode"] / p50["naive_encode"],
                 "load": load})  # fmt: skip

    print()
    print_table(rows, ["task", "naive s", "ours s", "ours / naive", "cos min", "top-10 same", "load"])
    write_json(
        args.out,
        {
            "threads": torch.get_num_threads(),
            "precision": str(precision or "fp32"),
            "rows": rows,
            "builds": details,
            "query_p50_ms": p50,
            "loadavg_end": os.getloadavg(),
        },
    )


if __name__ == "__main__":
    main()
