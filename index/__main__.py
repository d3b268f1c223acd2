"""`python -m index build|query ...`: the command line over VectorIndex.

`torchrun --nproc_per_node N -m index build ...` splits the encoding over N processes (index/distributed.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from index.options import BATCH_SIZE, EXACT_MAX, KINDS, IndexOptions
from mirror.cli import add_limit_flags, load_input, run_cli
from mirror.config import BUNDLED_MODEL
from mirror.data import SURROGATE
from mirror.errors import MirrorError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m index", description="Build and query similarity indexes of texts.")
    sub = parser.add_subparsers(dest="command", required=True)

    build = sub.add_parser("build", help="embed a list of strings and save a searchable index folder")
    build.add_argument("--encoder", default=BUNDLED_MODEL, help="a tuned model folder, a hub id or 'bundled' (default)")
    build.add_argument("--input", required=True, help="a .txt (one string per line), .csv/.tsv or .jsonl file")
    build.add_argument(
        "--out", required=True, help="folder for the index: new, empty, or an index (replaced atomically)"
    )
    build.add_argument("--column", help="text column of a .csv/.tsv, or field of a .jsonl")
    build.add_argument(
        "--type",
        default="auto",
        choices=KINDS,
        help="index type (default: auto by size: flat, then ivf; ivfpq: compressed codes for corpora past memory)",
    )
    build.add_argument("--nlist", type=int, help="IVF lists (default: ~2*sqrt(n))")
    build.add_argument(
        "--nprobe", type=int, help="IVF lists scanned per query (default: calibrated for recall@10 >= 0.95)"
    )
    build.add_argument(
        "--exact-max",
        type=int,
        default=EXACT_MAX,
        help=f"with --type auto: largest index kept exact (default: {EXACT_MAX})",
    )
    build.add_argument("--pq-m", type=int, help="ivfpq: code bytes per vector, a divisor of the dim (default: dim/8)")
    build.add_argument(
        "--rerank", type=int, help="ivfpq: candidates per hit re-ranked exactly (default: calibrated with nprobe)"
    )
    build.add_argument(
        "--batch-size", type=int, default=BATCH_SIZE, help=f"most strings per encoding batch (default: {BATCH_SIZE})"
    )
    build.add_argument("--device", default="auto", help="encoder device: auto, cpu or cuda (default: auto)")
    build.add_argument("--quiet", action="store_true", help="no progress bar")
    add_limit_flags(build)

    query = sub.add_parser("query", help="print the nearest indexed strings of one or more queries")
    query.add_argument("index", help="an index folder made by `build`")
    query.add_argument("text", nargs="+", help="query string(s)")
    query.add_argument("-k", type=int, default=10, help="hits per query (default: 10)")
    query.add_argument("--json", action="store_true", help="print JSON: [{query, hits: [{rank, score, text, id}]}]")
    query.add_argument("--encoder", help="load this encoder instead of the stored path (it must be the same model)")
    query.add_argument("--nprobe", type=int, help="override an IVF index's nprobe for this query")
    query.add_argument("--device", default="auto", help="encoder device: auto, cpu or cuda (default: auto)")
    return parser


def cmd_build(args: argparse.Namespace) -> int:
    from mirror import distributed

    rank, world_size = distributed.init_from_env()  # torchrun: one process per GPU (or CPU, gloo)
    if world_size == 1:
        return _build(args, rank, world_size)
    _exit_on_sigterm()  # torchrun stops the other ranks with SIGTERM when one fails: clean up on the way out
    try:
        return _build(args, rank, world_size)
    finally:
        import torch.distributed as dist

        dist.destroy_process_group()


def _build(args: argparse.Namespace, rank: int, world_size: int) -> int:
    from index.distributed import build_index
    from index.folder import check_target
    from mirror.distributed import shard_bounds

    options = IndexOptions(
        kind=args.type,
        nlist=args.nlist,
        nprobe=args.nprobe,
        exact_max=args.exact_max,
        pq_m=args.pq_m,
        rerank=args.rerank,
    )  # checked here: before reading the input and encoding it
    check_target(args.out, "--out")  # fail before a long encoding, not after: an index folder (or new or empty)
    texts, stats = load_input(args.input, args.column, args.max_mb, args.max_strings)
    if not texts:
        raise MirrorError(f"{args.input}: no non-empty strings to index")
    lo, hi = shard_bounds(len(texts), world_size, rank)
    if rank == 0:
        split = f"; encoding split over {world_size} processes ({hi - lo} texts on rank 0)" if world_size > 1 else ""
        print(f"input: {stats.summary()}{split}", file=sys.stderr)
    started = time.perf_counter()
    bar = None
    if not args.quiet and rank == 0:
        from tqdm.auto import tqdm

        bar = tqdm(total=hi - lo, unit="text", desc="encoding", dynamic_ncols=True, file=sys.stderr)

    def on_progress(done: int, total: int) -> None:
        if bar is not None:
            bar.update(done - bar.n)

    try:
        index = build_index(
            args.encoder,
            texts,
            args.out,
            options,
            batch_size=args.batch_size,
            on_progress=on_progress,
            device=args.device,
        )
    finally:
        if bar is not None:
            bar.close()
    if index is not None:  # rank 0
        print(f"built {index!r} in {time.perf_counter() - started:.1f}s")
        print(f"saved: {check_target(args.out)}")
    return 0


def _exit_on_sigterm() -> None:
    import signal

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    try:
        signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: keep the default
        pass


def cmd_query(args: argparse.Namespace) -> int:
    # Check what costs nothing before loading the index and its encoder (seconds).
    # A byte the locale cannot decode reaches argv as a lone surrogate: shown and searched as U+FFFD.
    args.text = [SURROGATE.sub("\ufffd", t) for t in args.text]
    if args.k < 1:
        raise MirrorError(f"-k must be a positive integer, got {args.k}")
    for i, text in enumerate(args.text):
        if not text.strip():
            raise MirrorError(f"query {i + 1} is empty; type some text to search for")
    from index.store import VectorIndex

    encoder = None
    if args.encoder:
        from mirror.encoder import load_encoder

        encoder = load_encoder(args.encoder, device=args.device)
    index = VectorIndex.load(args.index, encoder, device=args.device)
    if args.nprobe is not None:
        index.set_nprobe(args.nprobe)
    results = index.search(args.text, args.k)
    if args.json:
        payload = [
            {
                "query": q,
                "hits": [{"rank": h.rank, "score": round(h.score, 6), "text": h.text, "id": h.id} for h in hits],
            }
            for q, hits in zip(args.text, results, strict=True)
        ]
        print(json.dumps(payload, ensure_ascii=False))
        return 0
    for q, hits in zip(args.text, results, strict=True):
        print(f"query: {q}")
        for h in hits:
            print(f"{h.rank:>4}  {h.score:.4f}  {h.text}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(build_parser(), {"build": cmd_build, "query": cmd_query}, argv)


if __name__ == "__main__":
    sys.exit(main())
