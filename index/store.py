"""VectorIndex: texts embedded by an encoder, searched by cosine similarity with FAISS, saved as a folder."""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import faiss
import numpy as np

from mirror.cli import check_out_dir
from mirror.errors import MirrorError

if TYPE_CHECKING:
    from mirror.encoder import Encoder

FORMAT = 1
INDEX_FILE, TEXTS_FILE, META_FILE = "index.faiss", "texts.json", "meta.json"
VECTORS_FILE = "vectors.f16.npy"  # ivfpq: the float16 rows re-ranking reads, memory-mapped after save/load
KINDS = ("auto", "flat", "ivf", "ivfpq")
IVF_KINDS = ("ivf", "ivfpq")
# Exact search up to this many vectors: a flat single query scans every row (~0.06 us per 384-d row on
# one core here, 1.7 ms at 30k, 3 ms at 50k, 6 ms at 100k); past it IVF answers in ~0.2 ms. See bench/RESULTS.md.
EXACT_MAX = 30_000
TARGET_RECALL = 0.95
# nprobe is calibrated to this recall@10 on a sample of indexed rows: a margin over the 0.95 promise for
# the sampling error of 256 queries and for user queries that look less like the indexed texts.
CALIBRATION_RECALL = 0.97
CALIBRATION_QUERIES = 256
RECALL_K = 10
MIN_POINTS_PER_LIST = 39  # faiss' k-means wants at least 39 training points per centroid
TRAIN_POINTS_PER_LIST = 64  # k-means sample size per centroid (faiss' default of 256 is 4x slower, same recall)
TRAIN_ITERATIONS = 10
NUMPY_BATCH_MIN = 20  # flat searches of this many queries or more go through NumPy's GEMM (see _flat_search_numpy)
GPU_MAX_K = 2048  # faiss GPU search limits k and nprobe to 2048
# IVF-PQ: one byte (8 bits) per sub-quantizer of ~8 dimensions, so 48 bytes for 384-d vectors instead of 1,536.
PQ_DIMS_PER_CODE = 8
PQ_BITS = 8
GPU_PQ_CODE_BYTES = (1, 2, 3, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64, 96)  # what faiss' GpuIndexIVFPQ takes
# PQ codes alone reach recall@10 0.26 (clustered synthetic) / 0.75 (MiniLM embeddings) at best: an ivfpq index
# fetches `rerank * k` candidates by PQ distance and re-ranks them exactly from float16 rows. `rerank` is
# calibrated at build time among powers of two up to RERANK_MAX (bench/RESULTS.md, "Index scale-out").
RERANK_MAX = 128
# ivfpq calibration first picks the smallest nprobe whose probed lists hold this share of the exact
# neighbours (free to compute), then the smallest rerank reaching CALIBRATION_RECALL there, then lowers nprobe.
LIST_COVERAGE = 0.99
ADD_BLOCK = 65_536  # rows handed to faiss (and converted to float32) at a time
# meta["index"] keys that describe the built index (cleared when it is rebuilt)
_PARAM_KEYS = ("nlist", "nprobe", "nprobe_auto", "calibrated_recall_at_10", "calibrated_count", "pq_m", "pq_bits",
               "rerank", "rerank_auto", "bytes_per_vector", "gpu_shards")  # fmt: skip

ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class Hit:
    """One search result: the indexed text, its cosine similarity to the query, its rank (1 = best) and its id."""

    text: str
    score: float
    rank: int
    id: int


def default_nlist(n: int) -> int:
    """IVF list count: the power of two nearest 2*sqrt(n), with at least 39 points per list."""
    target = 2 ** round(math.log2(max(1.0, 2 * math.sqrt(n))))
    return int(max(1, min(target, n // MIN_POINTS_PER_LIST)))


def default_pq_m(dim: int) -> int:
    """IVF-PQ sub-quantizers: dim / 8 (one byte per ~8 dimensions; 384 -> 48), a divisor of dim, preferring the
    code sizes faiss' GPU IVF-PQ supports (384 -> 48, 768 -> 96, 32 -> 4)."""
    divisors = [m for m in range(1, dim + 1) if dim % m == 0]
    supported = [m for m in divisors if m in GPU_PQ_CODE_BYTES] or divisors
    return min(supported, key=lambda m: (abs(m - dim / PQ_DIMS_PER_CODE), -m))


def pq_bits(n: int) -> int:
    """Bits per PQ code: 8 (256 centroids per sub-quantizer) once there are 39 training rows per centroid."""
    return int(min(PQ_BITS, max(1, math.floor(math.log2(max(2, n) / MIN_POINTS_PER_LIST)))))


class VectorIndex:
    """L2-normalised embeddings in a FAISS inner-product index (scores are cosines), with their texts.

    Build with `VectorIndex.build(encoder, texts)` (or `from_vectors`), query with `search`, grow with
    `add`, persist with `save` / `VectorIndex.load`. Ids are row numbers in `texts`, stable across `add`.
    Searches may run from several threads at once; `add` must not run while another thread searches.

        >>> index = VectorIndex.build("bundled", ["cat", "dog", "car"])  # doctest: +SKIP
        >>> index.search("kitten", k=2)[0][0].text  # doctest: +SKIP
        'cat'
    """

    def __init__(
        self,
        cpu_index: faiss.Index,
        texts: list[str],
        meta: dict[str, Any],
        encoder: Encoder | None = None,
        store: _Rows | None = None,
    ):
        self._cpu = cpu_index
        self._texts = texts
        self._positions: dict[str, int] | None = None  # text -> id, built on the first add
        self.meta = meta
        self.encoder = encoder
        self._gpu: _GpuReplica | None = None
        self._store = store  # ivfpq: float16 copies of the rows, for exact re-ranking

    # ---------------------------------------------------------------- building

    @classmethod
    def build(
        cls,
        encoder: Encoder | str | Path,
        texts: Sequence[str],
        *,
        kind: str = "auto",
        nlist: int | None = None,
        nprobe: int | None = None,
        exact_max: int = EXACT_MAX,
        batch_size: int = 128,
        on_progress: ProgressFn | None = None,
        device: str = "auto",
        gpu: bool | None = None,
        pq_m: int | None = None,
        rerank: int | None = None,
    ) -> VectorIndex:
        """Embed `texts` (duplicates dropped) with `encoder` (an Encoder, a model folder, a hub id or "bundled").

        `kind="auto"` is exact (flat) up to `exact_max` texts and IVF above, with `nprobe` calibrated for
        recall@10 >= 0.95; `kind`, `nlist` and `nprobe` override that. `kind="ivfpq"` keeps PQ codes of `pq_m`
        bytes per row in memory (default dim/8) and re-ranks `rerank * k` candidates (default: calibrated) from
        float16 copies of the rows (memory-mapped from the folder once saved). `on_progress(done, total)` follows
        the encoding. `gpu=None` uses a GPU when faiss sees one (and shards over all of them when it sees several).
        """
        _check_options(kind, nlist, nprobe, exact_max, pq_m, rerank)  # before a long encoding, not after
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise MirrorError(f"batch size must be a positive integer, got {batch_size!r}")
        texts = _unique_texts(texts)
        enc = _as_encoder(encoder, device)
        vectors = enc.encode(texts, batch_size=batch_size, normalize=True, on_progress=on_progress)
        return cls.from_vectors(
            vectors, texts, encoder=enc, kind=kind, nlist=nlist, nprobe=nprobe, exact_max=exact_max, gpu=gpu,
            pq_m=pq_m, rerank=rerank,
        )  # fmt: skip

    @classmethod
    def from_vectors(
        cls,
        vectors: np.ndarray,
        texts: Sequence[str],
        *,
        encoder: Encoder | None = None,
        kind: str = "auto",
        nlist: int | None = None,
        nprobe: int | None = None,
        exact_max: int = EXACT_MAX,
        gpu: bool | None = None,
        pq_m: int | None = None,
        rerank: int | None = None,
    ) -> VectorIndex:
        """Index precomputed embeddings (one row per text; normalised here). Without an encoder, search by vector."""
        _check_options(kind, nlist, nprobe, exact_max, pq_m, rerank)
        unique = _unique_texts(texts)
        texts = list(texts)
        x = _as_matrix(vectors, None, "vectors")
        if len(texts) != len(x):
            raise MirrorError(f"got {len(x)} vectors for {len(texts)} texts; give one vector per text")
        if len(unique) != len(texts):  # keep the first row of each text
            first = {t: i for i, t in reversed(list(enumerate(texts)))}
            x = x[[first[t] for t in unique]]
        return cls._from_rows(
            _Rows([x]), unique, encoder=encoder, kind=kind, nlist=nlist, nprobe=nprobe, exact_max=exact_max, gpu=gpu,
            pq_m=pq_m, rerank=rerank,
        )  # fmt: skip

    @classmethod
    def _from_rows(
        cls,
        rows: _Rows,
        texts: list[str],
        *,
        encoder: Encoder | None,
        kind: str,
        nlist: int | None,
        nprobe: int | None,
        exact_max: int,
        gpu: bool | None,
        pq_m: int | None = None,
        rerank: int | None = None,
        spill_dir: Path | None = None,
    ) -> VectorIndex:
        """Index `rows` (one per unique text, in order; arrays in RAM or memory-mapped shards, read in blocks).

        `spill_dir`: where an ivfpq index writes its float16 rows while building (else they stay in RAM).
        """
        dim = rows.dim
        if encoder is not None and encoder.dim != dim:
            raise MirrorError(f"the encoder makes {encoder.dim}-d vectors but the vectors given are {dim}-d")
        now = _now()
        requested: dict[str, Any] = {"nlist": nlist, "nprobe": nprobe}
        if kind == "ivfpq":
            requested.update(pq_m=pq_m, rerank=rerank)
        meta: dict[str, Any] = {
            "format": FORMAT,
            "created": now,
            "updated": now,
            "count": 0,
            "dim": int(dim),
            "metric": "inner product of L2-normalised vectors (cosine similarity)",
            "encoder": _encoder_meta(encoder) if encoder is not None else None,
            # "requested": the caller's nlist/nprobe, reused if an auto index later grows from flat to IVF
            "index": {
                "auto": kind == "auto",
                "exact_max": int(exact_max),
                "target_recall": TARGET_RECALL,
                "requested": requested,
            },
            "versions": _versions(encoder is not None),
        }
        self = cls(faiss.IndexFlatIP(dim), [], meta, encoder)
        chosen = ("flat" if len(rows) <= exact_max else "ivf") if kind == "auto" else kind
        self._rebuild(
            rows, texts, chosen, nlist=nlist, nprobe=nprobe, gpu=_want_gpu(gpu), pq_m=pq_m, rerank=rerank,
            spill_dir=spill_dir,
        )  # fmt: skip
        return self

    def _rebuild(
        self,
        rows: _Rows,
        texts: list[str],
        kind: str,
        *,
        nlist: int | None,
        nprobe: int | None,
        gpu: bool,
        pq_m: int | None = None,
        rerank: int | None = None,
        spill_dir: Path | None = None,
    ) -> None:
        """(Re)create the FAISS index of kind `kind` over `rows`, training and calibrating an IVF / IVF-PQ."""
        n, dim = len(rows), rows.dim
        info = self.meta["index"]
        for key in _PARAM_KEYS:
            info.pop(key, None)
        started = time.perf_counter()
        if kind == "flat":
            cpu = faiss.IndexFlatIP(dim)
        else:
            nlist = int(nlist) if nlist is not None else default_nlist(n)
            if not 1 <= nlist <= n:
                raise MirrorError(f"an IVF index needs 1 <= nlist <= number of texts ({n}), got nlist={nlist}")
            quantizer = faiss.IndexFlatIP(dim)
            if kind == "ivf":
                cpu = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
            else:
                m = int(pq_m) if pq_m is not None else default_pq_m(dim)
                if dim % m:
                    raise MirrorError(f"pq_m must divide the dimension ({dim}), got {m}")
                cpu = faiss.IndexIVFPQ(quantizer, dim, nlist, m, pq_bits(n), faiss.METRIC_INNER_PRODUCT)
            cpu.cp.niter = TRAIN_ITERATIONS
            cpu.cp.max_points_per_centroid = TRAIN_POINTS_PER_LIST
            cpu.cp.seed = 1234
        # One GPU: train and add there (flat, IVF), keeping a CPU copy for saving. Several GPUs, or IVF-PQ:
        # train and add on the CPU, then copy (shard) the finished index to the GPU(s) for searching.
        on_gpu_build = gpu and kind != "ivfpq" and faiss.get_num_gpus() == 1
        replica = _GpuReplica(cpu, kind) if on_gpu_build else None
        target = replica.index if replica is not None else cpu
        if kind != "flat":
            target.train(_training_sample(rows, cpu))
        for _, block in rows.blocks():
            target.add(_as_matrix(block, dim, "vectors"))
        if replica is not None:
            cpu = faiss.index_gpu_to_cpu(replica.index)
        if kind == "ivf":
            cpu.make_direct_map()  # lets calibration and rebuilds read rows back
        store = _float16_copy(rows, spill_dir) if kind == "ivfpq" else None
        if gpu and replica is None and _gpu_can_search(cpu):
            replica = _GpuReplica(cpu, kind)
        self._cpu, self._gpu, self._texts, self._positions, self._store = cpu, replica, list(texts), None, store
        info.update(type=kind, gpu=replica is not None)
        if replica is not None and replica.shards > 1:
            info["gpu_shards"] = replica.shards
        if kind in IVF_KINDS:
            info["nlist"] = int(cpu.nlist)
        if kind == "ivfpq":
            info.update(pq_m=int(cpu.pq.M), pq_bits=int(cpu.pq.nbits))
            self._calibrate_pq(nprobe, rerank)  # calibrates whichever of the two was not given
        elif kind == "ivf":
            if nprobe is None:
                self._calibrate()
            else:
                self.set_nprobe(nprobe)
        info["bytes_per_vector"] = bytes_per_vector(cpu)
        info["build_seconds"] = round(time.perf_counter() - started, 3)
        self.meta["count"] = len(self._texts)

    # ---------------------------------------------------------------- properties

    def __len__(self) -> int:
        return len(self._texts)

    @property
    def texts(self) -> list[str]:
        """The indexed texts; `texts[hit.id] == hit.text`."""
        return list(self._texts)

    @property
    def dim(self) -> int:
        return int(self.meta["dim"])

    @property
    def kind(self) -> str:
        """ "flat" (exact), "ivf" (approximate) or "ivfpq" (approximate, compressed, re-ranked)."""
        return str(self.meta["index"]["type"])

    @property
    def on_gpu(self) -> bool:
        return self._gpu is not None

    def set_nprobe(self, nprobe: int) -> None:
        """Override the IVF lists scanned per query (more: slower, higher recall)."""
        if self.kind not in IVF_KINDS:
            raise MirrorError(f"nprobe applies to an IVF index; this one is {self.kind}")
        nlist = int(self._cpu.nlist)
        if not 1 <= int(nprobe) <= nlist:
            raise MirrorError(f"nprobe must be between 1 and nlist ({nlist}), got {nprobe}")
        self._cpu.nprobe = int(nprobe)
        if self._gpu is not None:
            self._gpu.set_nprobe(int(nprobe))
        self.meta["index"].update(nprobe=int(nprobe), nprobe_auto=False)
        for key in ("calibrated_recall_at_10", "calibrated_count"):
            self.meta["index"].pop(key, None)

    def set_rerank(self, rerank: int) -> None:
        """Override how many PQ candidates per hit an ivfpq index re-ranks exactly (more: slower, higher recall)."""
        if self.kind != "ivfpq":
            raise MirrorError(f"rerank applies to an ivfpq index; this one is {self.kind}")
        _check_positive("rerank", rerank)
        self.meta["index"].update(rerank=int(rerank), rerank_auto=False)
        for key in ("calibrated_recall_at_10", "calibrated_count"):
            self.meta["index"].pop(key, None)

    # ---------------------------------------------------------------- searching

    def search(self, queries: str | Sequence[str], k: int = 10) -> list[list[Hit]]:
        """Ranked hits for each query string (one list per query, even for a single string)."""
        queries = [queries] if isinstance(queries, str) else list(queries)
        if not queries:
            raise MirrorError("no query given")
        for i, q in enumerate(queries):
            if not isinstance(q, str) or not q.strip():
                raise MirrorError(f"query {i + 1} is empty; type some text to search for")
        self._check_k(k)
        return self.search_vectors(self.embed(queries), k)

    def search_vectors(self, vectors: np.ndarray, k: int = 10) -> list[list[Hit]]:
        """Ranked hits for one vector (shape (dim,)) or many (shape (m, dim)); vectors are normalised here."""
        self._check_k(k)
        q = _as_matrix(vectors, self.dim, "query vector")
        scores, ids = self._search(q, min(k, len(self)))
        return [
            [Hit(self._texts[i], float(s), rank, int(i)) for rank, (s, i) in enumerate(zip(srow, irow, strict=True), 1)]
            for srow, irow in zip(scores, ids, strict=True)
        ]

    def embed(self, queries: Sequence[str]) -> np.ndarray:
        """Unit-length query embeddings from the index's encoder (one small forward pass for a few queries)."""
        enc = self.encoder
        if enc is None:
            raise MirrorError("this index has no encoder (it was built from vectors): search it with search_vectors")
        if len(queries) > 8 or enc.model.training or enc.device.type != "cpu":
            return enc.encode(queries, normalize=True)
        import torch

        # A few queries on CPU: skip encode()'s sorting, batching and mode switching (~1 ms of a ~5 ms query).
        with torch.inference_mode():
            emb = enc.embed(enc.tokenize(queries)).float()
            return torch.nn.functional.normalize(emb, dim=-1).numpy()

    def _check_k(self, k: int) -> None:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise MirrorError(f"k must be a positive integer, got {k!r}")
        if len(self) == 0:
            raise MirrorError("the index is empty: add texts before searching")

    def _search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.kind == "ivfpq":
            return self._search_pq(q, k)
        if self._gpu is not None and k <= GPU_MAX_K:
            scores, ids = self._gpu.search(q, k)
        elif self.kind == "flat" and len(q) >= NUMPY_BATCH_MIN:
            scores, ids = _flat_search_numpy(self._cpu, q, k)
        else:
            scores, ids = self._cpu.search(q, k)
        short = np.flatnonzero((ids < 0).any(axis=1)) if self.kind == "ivf" else ()
        if len(short):  # the probed IVF lists held fewer than k rows: scan all lists for those queries
            params = faiss.SearchParametersIVF(nprobe=int(self._cpu.nlist))
            scores[short], ids[short] = self._cpu.search(q[short], k, params=params)
        return scores, ids

    def _search_pq(
        self, q: np.ndarray, k: int, nprobe: int | None = None, rerank: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """IVF-PQ candidates (`rerank * k` by approximate score), re-ranked by exact cosine from the float16 rows."""
        assert self._store is not None
        rerank = int(rerank if rerank is not None else self.meta["index"]["rerank"])
        wanted = min(len(self), max(k, rerank * k))
        if nprobe is None and self._gpu is not None and wanted <= GPU_MAX_K:
            _, cand = self._gpu.search(q, wanted)
        elif nprobe is None:
            _, cand = self._cpu.search(q, wanted)
        else:
            _, cand = self._cpu.search(q, wanted, params=faiss.SearchParametersIVF(nprobe=int(nprobe)))
        short = np.flatnonzero((cand >= 0).sum(axis=1) < k)
        if len(short):  # the probed lists held fewer than k rows: scan all lists for those queries
            params = faiss.SearchParametersIVF(nprobe=int(self._cpu.nlist))
            cand[short] = self._cpu.search(q[short], wanted, params=params)[1]
        scores = np.empty((len(q), k), dtype=np.float32)
        ids = np.empty((len(q), k), dtype=np.int64)
        for i, row in enumerate(cand):
            found = np.sort(row[row >= 0])  # sorted: reads of the memory-mapped rows go forward
            vectors = self._store.take(found)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)  # float16 rounding moved them off the sphere
            sims = vectors @ q[i]
            top = np.argsort(-sims, kind="stable")[:k]
            scores[i], ids[i] = sims[top], found[top]
        return scores, ids

    # ---------------------------------------------------------------- growing

    def add(self, texts: Sequence[str], batch_size: int = 128, on_progress: ProgressFn | None = None) -> int:
        """Embed and append the texts not already indexed; returns how many were added."""
        if self.encoder is None:
            raise MirrorError("this index has no encoder (it was built from vectors): grow it with add_vectors")
        new = self._new_texts(texts)
        if not new:
            return 0
        vectors = self.encoder.encode(new, batch_size=batch_size, normalize=True, on_progress=on_progress)
        return self._append(vectors, new)

    def add_vectors(self, vectors: np.ndarray, texts: Sequence[str]) -> int:
        """Append precomputed embeddings of `texts`, skipping texts already indexed; returns how many were added."""
        new = self._new_texts(texts)
        texts = list(texts)
        x = _as_matrix(vectors, self.dim, "vectors")
        if len(texts) != len(x):
            raise MirrorError(f"got {len(x)} vectors for {len(texts)} texts; give one vector per text")
        first = {t: i for i, t in reversed(list(enumerate(texts)))}
        return self._append(x[[first[t] for t in new]], new) if new else 0

    def _new_texts(self, texts: Sequence[str]) -> list[str]:
        if self._positions is None:
            self._positions = {t: i for i, t in enumerate(self._texts)}
        return [t for t in _unique_texts(texts, allow_empty_list=True) if t not in self._positions]

    def _append(self, x: np.ndarray, new: list[str]) -> int:
        info = self.meta["index"]
        if info["auto"] and self.kind == "flat" and len(self) + len(new) > info["exact_max"]:
            # Crossed the exact-search threshold: rebuild as IVF over the old rows and the new ones.
            old = self._cpu.reconstruct_n(0, self._cpu.ntotal)
            requested = info.get("requested") or {}
            self._rebuild(
                _Rows([old, x]), self._texts + new, "ivf", gpu=self.on_gpu, nlist=requested.get("nlist"),
                nprobe=requested.get("nprobe"),
            )  # fmt: skip
        else:
            self._cpu.add(x)
            if self._store is not None:
                self._store.append(x.astype(np.float16))
            if self._gpu is not None:
                self._gpu.add(x, self._cpu)
            self._texts.extend(new)
            assert self._positions is not None
            self._positions.update((t, i) for i, t in enumerate(new, len(self._positions)))
            auto = info.get("nprobe_auto") or info.get("rerank_auto")
            if self.kind in IVF_KINDS and auto and len(self) >= 1.1 * info.get("calibrated_count", math.inf):
                # recalibrate once the index has grown by 10%, not on every small add
                if self.kind == "ivf":
                    self._calibrate()
                else:
                    self._calibrate_pq(
                        None if info.get("nprobe_auto") else info["nprobe"],
                        None if info.get("rerank_auto") else info["rerank"],
                    )
            info["bytes_per_vector"] = bytes_per_vector(self._cpu)
        self.meta.update(count=len(self), updated=_now())
        return len(new)

    # ---------------------------------------------------------------- calibration

    def _calibrate(self) -> None:
        """Smallest nprobe whose recall@10 against exact search reaches CALIBRATION_RECALL on sampled rows.

        Queries are indexed rows with themselves left out of both result lists; the exact answer comes from
        the same IVF scanning every list, so no second copy of the vectors is needed.
        """
        n, nlist = self._cpu.ntotal, int(self._cpu.nlist)
        rng = np.random.default_rng(0)
        ids = np.sort(rng.choice(n, size=min(n, CALIBRATION_QUERIES), replace=False))
        q = np.vstack([self._cpu.reconstruct(int(i)) for i in ids])
        k = min(RECALL_K + 1, n)

        def neighbours(nprobe: int) -> list[list[int]]:
            _, found = self._cpu.search(q, k, params=faiss.SearchParametersIVF(nprobe=nprobe))
            return [
                [j for j in row if j != self_id and j >= 0][: k - 1] for row, self_id in zip(found, ids, strict=True)
            ]

        exact = neighbours(nlist)

        def recall(nprobe: int) -> float:
            got = neighbours(nprobe)
            hits = sum(len(set(a) & set(b)) for a, b in zip(got, exact, strict=True))
            return hits / max(1, sum(len(b) for b in exact))

        hi = 1
        while hi < nlist and recall(hi) < CALIBRATION_RECALL:
            hi *= 2
        hi = min(hi, nlist)
        lo = hi // 2  # recall(lo) < target (or lo == 0): binary search the smallest passing value in (lo, hi]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if recall(mid) >= CALIBRATION_RECALL:
                hi = mid
            else:
                lo = mid
        self.set_nprobe(hi)
        self.meta["index"].update(nprobe_auto=True, calibrated_recall_at_10=round(recall(hi), 4), calibrated_count=n)

    def _calibrate_pq(self, nprobe: int | None, rerank: int | None) -> None:
        """Set nprobe and rerank of an ivfpq index, calibrating whichever is None for recall@10 >= CALIBRATION_RECALL.

        Queries are sampled indexed rows (their float16 copies) with themselves left out of both result lists;
        the exact answers come from a brute-force pass over the float16 rows. nprobe starts at the smallest value
        whose probed lists hold LIST_COVERAGE of those exact neighbours (read from the lists, no search needed);
        rerank is the smallest value (up to RERANK_MAX) that reaches the target there; then nprobe is lowered to
        the smallest value that still does with that rerank. A target the codes cannot reach even at RERANK_MAX
        becomes the recall reached there (recorded in meta.json).
        """
        assert self._store is not None
        info, nlist = self.meta["index"], int(self._cpu.nlist)
        if nprobe is not None and rerank is not None:
            self.set_nprobe(nprobe)
            self.set_rerank(rerank)
            return
        n = len(self._store)
        rng = np.random.default_rng(0)
        ids = np.sort(rng.choice(n, size=min(n, CALIBRATION_QUERIES), replace=False))
        q = _as_matrix(self._store.take(ids), self.dim, "rows")
        k = min(RECALL_K + 1, n)
        nearest = _exact_top_k(self._store, q, k).tolist()
        exact = [[j for j in row if j != i][: k - 1] for row, i in zip(nearest, ids.tolist(), strict=True)]
        total = max(1, sum(len(e) for e in exact))
        memo: dict[tuple[int, int], float] = {}

        def recall(p: int, r: int) -> float:
            if (p, r) not in memo:
                found = self._search_pq(q, k, nprobe=p, rerank=r)[1]
                got = [[j for j in row if j != i][: k - 1] for row, i in zip(found.tolist(), ids.tolist(), strict=True)]
                memo[p, r] = sum(len(set(a) & set(b)) for a, b in zip(got, exact, strict=True)) / total
            return memo[p, r]

        nprobe_auto, rerank_auto = nprobe is None, rerank is None
        start = nprobe
        if start is None:  # how many lists (in each query's probe order) it takes to hold the exact neighbours
            where = _list_of_rows(self._cpu)
            order = self._cpu.quantizer.search(q, nlist)[1]
            rank = np.empty_like(order)
            rank[np.arange(len(q))[:, None], order] = np.arange(nlist)
            need = np.sort(np.concatenate([rank[i, where[e]] + 1 for i, e in enumerate(exact)] + [np.ones(1, int)]))
            start = int(need[min(len(need) - 1, math.ceil(LIST_COVERAGE * len(need)) - 1)])
        if rerank is None:
            rerank = _smallest_passing(lambda r: recall(start, r) >= CALIBRATION_RECALL, RERANK_MAX)
        target = min(CALIBRATION_RECALL, recall(start, rerank))
        final = start if nprobe is not None else _smallest_passing(lambda p: recall(p, rerank) >= target, start)
        self.set_nprobe(final)
        self.set_rerank(rerank)
        info.update(
            nprobe_auto=nprobe_auto,
            rerank_auto=rerank_auto,
            calibrated_recall_at_10=round(recall(final, rerank), 4),
            calibrated_count=n,
        )

    # ---------------------------------------------------------------- persistence

    def save(self, folder: str | Path) -> Path:
        """Write index.faiss (a CPU copy), texts.json and meta.json to `folder` atomically; returns its path.

        An ivfpq index also writes its float16 rows (vectors.f16.npy) and from then on reads them memory-mapped
        from there, so they leave RAM.
        """
        from mirror.encoder import replace_dir

        out = check_target(folder)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            tmp.chmod(0o777 & ~_umask())  # mkdtemp makes it private; the saved folder should not be
            faiss.write_index(self._cpu, str(tmp / INDEX_FILE))
            if self._store is not None:
                self._store.write(tmp / VECTORS_FILE)
            (tmp / TEXTS_FILE).write_text(json.dumps(self._texts, ensure_ascii=False), encoding="utf-8")
            self.meta["count"] = len(self)
            (tmp / META_FILE).write_text(json.dumps(self.meta, indent=2), encoding="utf-8")
            replace_dir(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if self._store is not None:
            self._store = _Rows([np.load(out / VECTORS_FILE, mmap_mode="r")])
        return out

    @classmethod
    def load(
        cls, folder: str | Path, encoder: Encoder | None = None, *, device: str = "auto", gpu: bool | None = None
    ) -> VectorIndex:
        """Open a saved index; the encoder (given, or loaded from the path in its metadata) must be the one it was built with."""
        folder = Path(folder).expanduser()
        meta_path = folder / META_FILE
        if not meta_path.is_file():
            raise MirrorError(f"{folder}: not an index folder (no {META_FILE}); build one with `python -m index build`")
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            texts = json.loads((folder / TEXTS_FILE).read_text(encoding="utf-8"))
            cpu = faiss.read_index(str(folder / INDEX_FILE))
        except (OSError, ValueError, RuntimeError) as exc:
            raise MirrorError(
                f"{folder}: the index folder is damaged ({type(exc).__name__}: {exc}); rebuild it"
            ) from None
        if meta.get("format") != FORMAT:
            raise MirrorError(
                f"{folder}: index format {meta.get('format')!r} is not supported (expected {FORMAT}); rebuild it"
            )
        if not (cpu.ntotal == len(texts) == meta.get("count")) or cpu.d != meta.get("dim"):
            raise MirrorError(
                f"{folder}: the index folder is inconsistent ({cpu.ntotal} vectors of dim {cpu.d}, {len(texts)} texts, "
                f"metadata says {meta.get('count')} of dim {meta.get('dim')}); rebuild it"
            )
        store = None
        if (meta.get("index") or {}).get("type") == "ivfpq":
            try:
                rows = np.load(folder / VECTORS_FILE, mmap_mode="r")
            except (OSError, ValueError) as exc:
                raise MirrorError(
                    f"{folder}: the index folder is damaged ({VECTORS_FILE}: {type(exc).__name__}: {exc}); rebuild it"
                ) from None
            if rows.shape != (cpu.ntotal, cpu.d) or rows.dtype != np.float16:
                raise MirrorError(
                    f"{folder}: the index folder is inconsistent ({VECTORS_FILE} holds {rows.dtype} rows of shape "
                    f"{rows.shape}, the index {cpu.ntotal} of dim {cpu.d}); rebuild it"
                )
            store = _Rows([rows])
        stored = meta.get("encoder")
        if stored is not None:
            if encoder is None:
                encoder = _load_stored_encoder(stored, folder, device)
            fingerprint = encoder.fingerprint()
            if fingerprint != stored["fingerprint"] or encoder.dim != meta["dim"]:
                raise MirrorError(
                    f"{folder}: this index was built with the encoder {stored['source']!r} (fingerprint "
                    f"{stored['fingerprint']}, {meta['dim']}-d) but the encoder given is {encoder.source!r} (fingerprint "
                    f"{fingerprint}, {encoder.dim}-d). Their embeddings are not comparable: load it with the encoder it "
                    "was built with, or rebuild the index with this one."
                )
        elif encoder is not None and encoder.dim != meta["dim"]:
            raise MirrorError(
                f"{folder}: the index holds {meta['dim']}-d vectors but the encoder makes {encoder.dim}-d ones"
            )
        self = cls(cpu, texts, meta, encoder, store)
        if _want_gpu(gpu) and _gpu_can_search(cpu):
            self._gpu = _GpuReplica(cpu, self.kind)
        return self

    def __repr__(self) -> str:
        info = self.meta["index"]
        params = f", nlist={info['nlist']}, nprobe={info['nprobe']}" if self.kind in IVF_KINDS else ""
        if self.kind == "ivfpq":
            params += f", pq={info['pq_m']}x{info['pq_bits']}, rerank={info['rerank']}"
        source = (self.meta.get("encoder") or {}).get("source")
        return (
            f"VectorIndex({len(self)} texts, {self.dim}-d, {self.kind}{params}, encoder={source!r}, gpu={self.on_gpu})"
        )


def _flat_search_numpy(index: faiss.IndexFlat, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of many queries as NumPy matrix products over the flat index's own storage (no copy).

    faiss 1.15's wheel runs batches of ~20-1000 queries through its bundled BLAS 4-8x slower than NumPy's
    GEMM on our CPU (bench/RESULTS.md). Queries go in chunks of 256 and the rows in blocks of <= 16M scores
    (64 MB), so the vectors are read once per chunk; ties may come out in another order than faiss'.
    """
    n, dim = index.ntotal, index.d
    xb = faiss.rev_swig_ptr(index.get_xb(), n * dim).reshape(n, dim)
    scores = np.empty((len(q), k), dtype=np.float32)
    ids = np.empty((len(q), k), dtype=np.int64)
    for qs in range(0, len(q), 256):
        chunk = q[qs : qs + 256]
        rows = max(k, (1 << 24) // len(chunk))
        best_s, best_i = [], []
        for start in range(0, n, rows):
            sims = chunk @ xb[start : start + rows].T
            top = _top_k(sims, k)
            best_s.append(np.take_along_axis(sims, top, axis=1))
            best_i.append(top + start)
        cand_s, cand_i = np.hstack(best_s), np.hstack(best_i)
        top = _top_k(cand_s, k)
        top_s = np.take_along_axis(cand_s, top, axis=1)
        order = np.argsort(-top_s, axis=1, kind="stable")
        scores[qs : qs + 256] = np.take_along_axis(top_s, order, axis=1)
        ids[qs : qs + 256] = np.take_along_axis(np.take_along_axis(cand_i, top, axis=1), order, axis=1)
    return scores, ids


def _top_k(sims: np.ndarray, k: int) -> np.ndarray:
    """Column indices of the k largest values of each row (unordered); all columns if there are <= k."""
    if sims.shape[1] <= k:
        return np.broadcast_to(np.arange(sims.shape[1]), sims.shape)
    return np.argpartition(-sims, k - 1, axis=1)[:, :k]


def check_target(folder: str | Path) -> Path:
    """The absolute save path; an existing folder is only replaced if it is an index (or empty)."""
    return check_out_dir(folder, (META_FILE,), "an index folder").resolve()


class _GpuReplica:
    """A GPU copy of a CPU index, sharded over every GPU when faiss sees several (each holds 1/n of the rows).

    faiss GPU resources are not thread-safe, so calls take a lock. IVF-PQ lookup tables are float16 on the GPU
    (48 sub-quantizers x 256 float32 entries would fill a block's 48 KiB of shared memory).
    """

    def __init__(self, cpu_index: faiss.Index, kind: str = "flat"):
        self.kind = kind
        self.shards = faiss.get_num_gpus()
        self.lock = threading.Lock()
        self.res = None
        self.index = self._clone(cpu_index)

    def _clone(self, cpu_index: faiss.Index) -> faiss.Index:
        if self.shards > 1:
            options = faiss.GpuMultipleClonerOptions()
            options.shard = True  # split the rows (IVF: by id modulo the GPU count) instead of replicating them
            options.useFloat16 = self.kind == "ivfpq"
            return faiss.index_cpu_to_all_gpus(cpu_index, co=options, ngpu=self.shards)
        if self.res is None:
            self.res = faiss.StandardGpuResources()
        if self.kind == "ivfpq":
            options = faiss.GpuClonerOptions()
            options.useFloat16 = True
            return faiss.index_cpu_to_gpu(self.res, 0, cpu_index, options)
        return faiss.index_cpu_to_gpu(self.res, 0, cpu_index)

    def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        with self.lock:
            return self.index.search(q, k)

    def add(self, x: np.ndarray, cpu_index: faiss.Index) -> None:
        """Append rows `cpu_index` has just received (shards are re-copied from it: they split rows by id)."""
        with self.lock:
            if self.shards > 1:
                self.index = self._clone(cpu_index)
            else:
                self.index.add(x)

    def set_nprobe(self, nprobe: int) -> None:
        with self.lock:
            if self.shards > 1:  # an IndexShards has no nprobe of its own: set it on every shard
                faiss.GpuParameterSpace().set_index_parameter(self.index, "nprobe", min(nprobe, GPU_MAX_K))
            else:
                self.index.nprobe = min(nprobe, GPU_MAX_K)


def _gpu_can_search(cpu_index: faiss.Index) -> bool:
    """faiss' GPU IVF-PQ takes only some code sizes (default_pq_m picks one); other indexes always go."""
    if not isinstance(cpu_index, faiss.IndexIVFPQ):
        return True
    return int(cpu_index.pq.M) in GPU_PQ_CODE_BYTES and int(cpu_index.pq.nbits) <= 8


class _Rows:
    """The row-wise concatenation of 2-d arrays (in RAM or memory-mapped .npy shards), read without joining them.

    Holds an index's input while it is built, and an ivfpq index's float16 rows for re-ranking.
    """

    def __init__(self, chunks: Sequence[np.ndarray]):
        self.chunks = [c for c in chunks if len(c)]
        if not self.chunks:
            raise MirrorError("no vectors to index")
        self.dim = int(self.chunks[0].shape[1])
        if any(c.ndim != 2 or c.shape[1] != self.dim for c in self.chunks):
            raise MirrorError(f"vectors: every block must be 2-d with {self.dim} columns")
        self._offsets = np.cumsum([0] + [len(c) for c in self.chunks])

    def __len__(self) -> int:
        return int(self._offsets[-1])

    def append(self, x: np.ndarray) -> None:
        if len(x):
            self.chunks.append(x)
            self._offsets = np.append(self._offsets, self._offsets[-1] + len(x))

    def blocks(self, size: int = ADD_BLOCK) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, rows) in order, at most `size` rows at a time, as stored (no conversion)."""
        for chunk, offset in zip(self.chunks, self._offsets, strict=False):
            for start in range(0, len(chunk), size):
                yield int(offset) + start, chunk[start : start + size]

    def take(self, ids: np.ndarray) -> np.ndarray:
        """Rows `ids` (sorted ids read memory-mapped files forward) as a new float32 array."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(self.chunks) == 1:
            return np.asarray(self.chunks[0][ids], dtype=np.float32)
        out = np.empty((len(ids), self.dim), dtype=np.float32)
        which = np.searchsorted(self._offsets, ids, side="right") - 1
        for c in np.unique(which):
            sel = which == c
            out[sel] = self.chunks[c][ids[sel] - self._offsets[c]]
        return out

    def write(self, path: Path, dtype: type = np.float16) -> None:
        """Save as one .npy file, block by block (never the whole array in RAM)."""
        out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(len(self), self.dim))
        for start, block in self.blocks():
            out[start : start + len(block)] = block
        out.flush()
        del out


def _training_sample(rows: _Rows, index: faiss.IndexIVF) -> np.ndarray:
    """The rows k-means trains on: every row, or a fixed random sample of what faiss would keep of them anyway.

    Sampling here (seeded) instead of in faiss means a build from memory-mapped shards trains on the same rows
    as a build from one array, without reading every shard into RAM.
    """
    n, wanted = len(rows), index.nlist * TRAIN_POINTS_PER_LIST
    pq = getattr(index, "pq", None)
    if pq is not None:  # the PQ's k-means keeps 256 rows per centroid of each sub-quantizer
        wanted = max(wanted, 256 * pq.ksub)
    if n <= wanted:
        ids = np.arange(n)
    else:
        ids = np.sort(np.random.default_rng(1234).choice(n, size=wanted, replace=False))
    return _as_matrix(rows.take(ids), rows.dim, "vectors")


def _float16_copy(rows: _Rows, spill_dir: Path | None) -> _Rows:
    """An ivfpq index's rows for re-ranking: float16 in RAM, or in a memory-mapped file under `spill_dir`."""
    if spill_dir is None:
        return _Rows([_as_matrix(block, rows.dim, "vectors").astype(np.float16) for _, block in rows.blocks()])
    path = Path(spill_dir) / VECTORS_FILE
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(len(rows), rows.dim))
    for start, block in rows.blocks():
        out[start : start + len(block)] = _as_matrix(block, rows.dim, "vectors")
    out.flush()
    del out
    return _Rows([np.load(path, mmap_mode="r")])


def bytes_per_vector(index: faiss.Index) -> dict[str, int]:
    """Memory each indexed row costs: `ram` for the FAISS structure (codes or floats, plus an 8-byte id in IVF
    lists), `disk` for what is only read from the folder (an ivfpq index's float16 re-ranking rows)."""
    if not isinstance(index, faiss.IndexIVF):
        return {"ram": 4 * index.d, "disk": 0}
    return {"ram": int(index.code_size) + 8, "disk": 2 * index.d if isinstance(index, faiss.IndexIVFPQ) else 0}


def _exact_top_k(rows: _Rows, q: np.ndarray, k: int) -> np.ndarray:
    """Ids of the k rows (normalised) most similar to each query, best first: brute force, block by block."""
    best_s = np.empty((len(q), 0), dtype=np.float32)
    best_i = np.empty((len(q), 0), dtype=np.int64)
    for start, block in rows.blocks():
        sims = q @ _as_matrix(block, rows.dim, "rows").T
        top = _top_k(sims, k)
        best_s = np.hstack([best_s, np.take_along_axis(sims, top, axis=1)])
        best_i = np.hstack([best_i, top + start])
        keep = _top_k(best_s, k)
        best_s, best_i = np.take_along_axis(best_s, keep, axis=1), np.take_along_axis(best_i, keep, axis=1)
    order = np.argsort(-best_s, axis=1, kind="stable")
    return np.take_along_axis(best_i, order, axis=1)


def _list_of_rows(ivf: faiss.IndexIVF) -> np.ndarray:
    """The inverted list each row id sits in, read from the lists themselves (no direct map needed)."""
    where = np.zeros(ivf.ntotal, dtype=np.int64)
    invlists = ivf.invlists
    for lst in range(ivf.nlist):
        size = invlists.list_size(lst)
        if size:
            ptr = invlists.get_ids(lst)
            where[faiss.rev_swig_ptr(ptr, size)] = lst
            invlists.release_ids(lst, ptr)
    return where


def _smallest_passing(ok: Callable[[int], bool], hi: int) -> int:
    """Smallest v in [1, hi] with ok(v), for ok monotone in v: doubling, then bisection; hi if none below passes."""
    v = 1
    while v < hi and not ok(v):
        v *= 2
    v = min(v, hi)
    lo = v // 2  # ok(lo) is false (or lo == 0)
    while v - lo > 1:
        mid = (lo + v) // 2
        if ok(mid):
            v = mid
        else:
            lo = mid
    return v


def _check_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise MirrorError(f"{name} must be a positive integer, got {value!r}")


def _check_options(
    kind: str, nlist: int | None, nprobe: int | None, exact_max: int, pq_m: int | None = None, rerank: int | None = None
) -> None:
    if kind not in KINDS:
        raise MirrorError(f"index kind must be one of {', '.join(KINDS)}, got {kind!r}")
    for name, value in (("nlist", nlist), ("nprobe", nprobe), ("exact_max", exact_max)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0):
            raise MirrorError(f"{name} must be a non-negative integer, got {value!r}")
    if kind == "flat" and (nlist is not None or nprobe is not None):
        raise MirrorError("nlist and nprobe apply to an IVF index; drop them or use kind 'ivf' or 'auto'")
    if nprobe is not None and (nprobe < 1 or (nlist is not None and nprobe > nlist)):
        raise MirrorError(f"nprobe must be between 1 and nlist ({nlist or 'the number of lists'}), got {nprobe}")
    for name, value in (("pq_m", pq_m), ("rerank", rerank)):
        if value is not None:
            if kind != "ivfpq":
                raise MirrorError(f"{name} applies to an ivfpq index; drop it or use kind 'ivfpq'")
            _check_positive(name, value)


def _want_gpu(gpu: bool | None) -> bool:
    available = faiss.get_num_gpus() > 0
    if gpu and not available:
        raise MirrorError("a GPU index was asked for but faiss sees no GPU (install faiss-gpu on a CUDA machine)")
    return available if gpu is None else bool(gpu)


def _as_encoder(encoder: Encoder | str | Path, device: str) -> Encoder:
    if isinstance(encoder, (str, Path)):
        from mirror.encoder import load_encoder

        return load_encoder(encoder, device=device)
    if not hasattr(encoder, "encode") or not hasattr(encoder, "fingerprint"):
        raise MirrorError(f"expected an Encoder, a model folder, a hub id or 'bundled', got {type(encoder).__name__}")
    return encoder


def _encoder_meta(encoder: Encoder) -> dict[str, Any]:
    """Where to reload the encoder from (an absolute path for a local folder) and what it must hash to."""
    source = str(encoder.source)
    path = Path(source).expanduser()
    location = str(path.resolve()) if source != "bundled" and path.is_dir() else source
    return {
        "source": source,
        "path": location,
        "fingerprint": encoder.fingerprint(),
        "pooling": encoder.pooling,
        "dim": encoder.dim,
        "max_seq_length": encoder.max_seq_length,
    }


def _load_stored_encoder(stored: dict[str, Any], folder: Path, device: str) -> Encoder:
    from mirror.encoder import load_encoder

    try:
        return load_encoder(stored["path"], pooling=stored.get("pooling", "auto"), device=device)
    except MirrorError as exc:
        raise MirrorError(
            f"{folder}: could not load the encoder this index was built with ({stored['path']}): {exc}. "
            "Pass the encoder explicitly (--encoder on the command line)."
        ) from None


def _unique_texts(texts: Sequence[str], allow_empty_list: bool = False) -> list[str]:
    """The texts in order with exact duplicates dropped; a bare string, a non-string or an empty text is an error."""
    if isinstance(texts, str):
        raise MirrorError("texts must be a list of strings, not a single string")
    out = list(dict.fromkeys(texts))
    if not out and not allow_empty_list:
        raise MirrorError("no texts to index")
    for t in out:
        if not isinstance(t, str):
            raise MirrorError(f"texts must be strings; got {type(t).__name__} ({t!r})")
        if not t.strip():
            raise MirrorError("texts must not be empty or blank (clean them with mirror.clean_texts)")
    return out


def _as_matrix(vectors: np.ndarray, dim: int | None, what: str) -> np.ndarray:
    """`vectors` as a C-contiguous float32 (m, dim) array of unit-length rows (copied unless already so)."""
    x = np.asarray(vectors, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise MirrorError(f"{what}: expected a non-empty (n, dim) array, got shape {np.shape(vectors)}")
    if dim is not None and x.shape[1] != dim:
        raise MirrorError(f"{what}: expected dimension {dim}, got {x.shape[1]}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0):
        raise MirrorError(f"{what}: rows must be finite and non-zero")
    if np.all(np.abs(norms - 1) < 1e-4):  # already unit length (encoder output): no 4-bytes-per-value copy
        return np.ascontiguousarray(x)
    return np.ascontiguousarray(x / norms)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _versions(with_encoder: bool) -> dict[str, str]:
    from importlib import metadata

    import mirror

    out = {
        "python": sys.version.split()[0],
        "faiss": faiss.__version__,
        "numpy": np.__version__,
        "mirror": mirror.__version__,
    }
    for package in ("torch", "transformers") if with_encoder else ():
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:  # pragma: no cover
            pass
    return out
