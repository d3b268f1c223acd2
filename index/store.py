"""VectorIndex: texts embedded by an encoder, searched by cosine similarity with FAISS, saved as a folder."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import faiss
import numpy as np

from index.calibrate import calibrate_ivf, calibrate_ivfpq
from index.exact import NUMPY_BATCH_MIN, flat_search_numpy
from index.folder import (
    VECTORS_FILE,
    anchored,
    new_meta,
    now,
    read_float16_rows,
    read_folder,
    stored_encoder,
    write_folder,
)
from index.gpu import GPU_MAX_K, GpuReplica, gpu_can_search, want_gpu
from index.inputs import as_encoder, as_matrix, unique_texts
from index.options import (
    BATCH_SIZE,
    DEFAULT_OPTIONS,
    IVF_KINDS,
    IndexOptions,
    check_positive,
    default_nlist,
    default_pq_m,
    pq_bits,
)
from index.rows import Rows, float16_copy
from mirror.errors import MirrorError

if TYPE_CHECKING:
    from mirror.encoder import Encoder

TRAIN_POINTS_PER_LIST = 64  # k-means sample size per centroid (faiss' default of 256 is 4x slower, same recall)
TRAIN_ITERATIONS = 10
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


class VectorIndex:
    """L2-normalised embeddings in a FAISS inner-product index (scores are cosines), with their texts.

    Build with `VectorIndex.build(encoder, texts)` (or `from_vectors`), query with `search`, grow with
    `add`, persist with `save` / `VectorIndex.load`. Ids are row numbers in `texts`, stable across `add`.
    Searches may run from several threads at once; `add` must not run while another thread searches.
    `IndexOptions` chooses the index; `gpu` where it is searched (None: on the GPU(s) when faiss sees any).

        >>> index = VectorIndex.build("bundled", ["cat", "dog", "car"], gpu=False)  # doctest: +SKIP
        >>> index.search("kitten", k=2)[0][0].text  # doctest: +SKIP
        'cat'
        >>> big = VectorIndex.build("bundled", texts, IndexOptions(kind="ivfpq"))  # doctest: +SKIP
    """

    def __init__(
        self,
        cpu_index: faiss.Index,
        texts: list[str],
        meta: dict[str, Any],
        encoder: Encoder | None = None,
        store: Rows | None = None,
    ):
        self._cpu = cpu_index
        self._texts = texts
        self._positions: dict[str, int] | None = None  # text -> id, built on the first add
        self.meta = meta
        self.encoder = encoder
        self._gpu: GpuReplica | None = None
        self._store = store  # ivfpq: float16 copies of the rows, for exact re-ranking

    # ---------------------------------------------------------------- building

    @classmethod
    def build(
        cls,
        encoder: Encoder | str | Path,
        texts: Sequence[str],
        options: IndexOptions = DEFAULT_OPTIONS,
        *,
        batch_size: int = BATCH_SIZE,
        on_progress: ProgressFn | None = None,
        device: str = "auto",
        gpu: bool | None = None,
    ) -> VectorIndex:
        """Embed `texts` (duplicates dropped) with `encoder` (an Encoder, a model folder, a hub id or "bundled").

        `options` picks the index (default: exact up to 30,000 texts, calibrated IVF above). `on_progress(done,
        total)` follows the encoding; `device` is the encoder's. `gpu=None` uses a GPU when faiss sees one (and
        shards over all of them when it sees several); an ivfpq index keeps its float16 rows memory-mapped from
        the folder once saved.
        """
        check_positive("batch size", batch_size)  # before a long encoding, not after
        texts = unique_texts(texts)
        enc = as_encoder(encoder, device)
        vectors = enc.encode(texts, batch_size=batch_size, normalize=True, on_progress=on_progress)
        return cls.from_vectors(vectors, texts, options, encoder=enc, gpu=gpu)

    @classmethod
    def from_vectors(
        cls,
        vectors: np.ndarray,
        texts: Sequence[str],
        options: IndexOptions = DEFAULT_OPTIONS,
        *,
        encoder: Encoder | None = None,
        gpu: bool | None = None,
    ) -> VectorIndex:
        """Index precomputed embeddings (one row per text; normalised here). Without an encoder, search by vector."""
        unique = unique_texts(texts)
        texts = list(texts)
        x = as_matrix(vectors, None, "vectors")
        if len(texts) != len(x):
            raise MirrorError(f"got {len(x)} vectors for {len(texts)} texts; give one vector per text")
        if len(unique) != len(texts):  # keep the first row of each text
            first = {t: i for i, t in reversed(list(enumerate(texts)))}
            x = x[[first[t] for t in unique]]
        return cls.from_rows(Rows([x]), unique, options, encoder=encoder, gpu=gpu)

    @classmethod
    def from_rows(
        cls,
        rows: Rows,
        texts: list[str],
        options: IndexOptions = DEFAULT_OPTIONS,
        *,
        encoder: Encoder | None = None,
        gpu: bool | None = None,
        spill_dir: Path | None = None,
    ) -> VectorIndex:
        """Index `rows` (one per text of `texts`, which are unique; arrays in RAM or memory-mapped shards, read in
        blocks). `spill_dir`: where an ivfpq index writes its float16 rows while building (else they stay in RAM).
        """
        if len(rows) != len(texts):
            raise MirrorError(f"got {len(rows)} vectors for {len(texts)} texts; give one vector per text")
        if encoder is not None and encoder.dim != rows.dim:
            raise MirrorError(f"the encoder makes {encoder.dim}-d vectors but the vectors given are {rows.dim}-d")
        self = cls(faiss.IndexFlatIP(rows.dim), [], new_meta(rows.dim, encoder, options), encoder)
        self._rebuild(rows, texts, options, gpu=want_gpu(gpu), spill_dir=spill_dir)
        return self

    def _rebuild(
        self, rows: Rows, texts: list[str], options: IndexOptions, *, gpu: bool, spill_dir: Path | None = None
    ) -> None:
        """(Re)create the FAISS index `options` choose for `rows`, training and calibrating an IVF / IVF-PQ."""
        kind = options.kind_for(len(rows))
        info = self.meta["index"]
        for key in _PARAM_KEYS:
            info.pop(key, None)
        started = time.perf_counter()
        cpu = _untrained(kind, len(rows), rows.dim, options)
        # One GPU: train and add there (flat, IVF), keeping a CPU copy for saving. Several GPUs, or IVF-PQ:
        # train and add on the CPU, then copy (shard) the finished index to the GPU(s) for searching.
        on_gpu_build = gpu and kind != "ivfpq" and faiss.get_num_gpus() == 1
        replica = GpuReplica(cpu, kind) if on_gpu_build else None
        target = replica.index if replica is not None else cpu
        if kind != "flat":
            target.train(_training_sample(rows, cpu))
        for _, block in rows.unit_blocks():
            target.add(block)
        if replica is not None:
            cpu = faiss.index_gpu_to_cpu(replica.index)
        if kind == "ivf":
            cpu.make_direct_map()  # lets calibration and rebuilds read rows back
        store = None
        if kind == "ivfpq":
            store = float16_copy(rows, None if spill_dir is None else Path(spill_dir) / VECTORS_FILE)
        if gpu and replica is None and gpu_can_search(cpu):
            replica = GpuReplica(cpu, kind)
        self._cpu, self._gpu, self._texts, self._positions, self._store = cpu, replica, list(texts), None, store
        info.update(type=kind, gpu=replica is not None)
        if replica is not None and replica.shards > 1:
            info["gpu_shards"] = replica.shards
        if kind in IVF_KINDS:
            info["nlist"] = int(cpu.nlist)
        if kind == "ivfpq":
            info.update(pq_m=int(cpu.pq.M), pq_bits=int(cpu.pq.nbits))
        if kind in IVF_KINDS:
            self._calibrate(options.nprobe, options.rerank)  # calibrates whichever was not given
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
        check_positive("rerank", rerank)
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
        q = as_matrix(vectors, self.dim, "query vector")
        scores, ids = self._search(q, min(k, len(self)))
        return [
            [Hit(self._texts[i], float(s), rank, int(i)) for rank, (s, i) in enumerate(zip(srow, irow, strict=True), 1)]
            for srow, irow in zip(scores, ids, strict=True)
        ]

    def embed(self, queries: Sequence[str]) -> np.ndarray:
        """Unit-length query embeddings from the index's encoder (Encoder.encode: one small batch for a few)."""
        if self.encoder is None:
            raise MirrorError("this index has no encoder (it was built from vectors): search it with search_vectors")
        return self.encoder.encode(queries, normalize=True)

    def stored(self, ids: Sequence[int]) -> np.ndarray | None:
        """The unit rows `ids` as the index holds them (float32; an ivfpq index's float16 copies), or None when the
        index keeps no exact copy of its rows."""
        ids = np.asarray(ids, dtype=np.int64)
        if self._store is not None:
            return self._store.take(ids)
        try:
            return np.vstack([self._cpu.reconstruct(int(i)) for i in ids]).astype(np.float32)
        except RuntimeError:  # an IVF index without a direct map
            return None

    def drift(self, sample: int = 16) -> float | None:
        """The largest |stored - encoded now| component over `sample` rows spread evenly over the index: what its
        encoder computes for its texts today against what was indexed. ~0.005 is bf16 noise; an index built by
        other weights than its encoder's (the base model's, say) is far off. None without an encoder or rows."""
        if self.encoder is None or not len(self):
            return None
        ids = np.unique(np.linspace(0, len(self) - 1, min(sample, len(self))).round().astype(np.int64))
        held = self.stored(ids)
        if held is None:
            return None
        now = self.embed([self._texts[i] for i in ids])
        return float(np.abs(held - now).max())

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
            scores, ids = flat_search_numpy(self._cpu, q, k)
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

    def add(self, texts: Sequence[str], batch_size: int = BATCH_SIZE, on_progress: ProgressFn | None = None) -> int:
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
        x = as_matrix(vectors, self.dim, "vectors")
        if len(texts) != len(x):
            raise MirrorError(f"got {len(x)} vectors for {len(texts)} texts; give one vector per text")
        first = {t: i for i, t in reversed(list(enumerate(texts)))}
        return self._append(x[[first[t] for t in new]], new) if new else 0

    def _new_texts(self, texts: Sequence[str]) -> list[str]:
        if self._positions is None:
            self._positions = {t: i for i, t in enumerate(self._texts)}
        return [t for t in unique_texts(texts, allow_empty_list=True) if t not in self._positions]

    def _append(self, x: np.ndarray, new: list[str]) -> int:
        info = self.meta["index"]
        if info["auto"] and self.kind == "flat" and len(self) + len(new) > info["exact_max"]:
            # Crossed the exact-search threshold: rebuild as IVF over the old rows and the new ones, with the
            # nlist / nprobe asked for at build time.
            old = self._cpu.reconstruct_n(0, self._cpu.ntotal)
            requested = info.get("requested") or {}
            options = IndexOptions(exact_max=info["exact_max"], nlist=requested.get("nlist"),
                                   nprobe=requested.get("nprobe"))  # fmt: skip
            self._rebuild(Rows([old, x]), self._texts + new, options, gpu=self.on_gpu)
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
                self._calibrate(
                    None if info.get("nprobe_auto") else info["nprobe"],
                    None if info.get("rerank_auto") else info.get("rerank"),
                )
            info["bytes_per_vector"] = bytes_per_vector(self._cpu)
        self.meta.update(count=len(self), updated=now())
        return len(new)

    def _calibrate(self, nprobe: int | None, rerank: int | None) -> None:
        """Set nprobe (and an ivfpq index's rerank), calibrating those that are None (index/calibrate.py)."""
        pq = self.kind == "ivfpq"
        if nprobe is not None and (rerank is not None or not pq):
            self.set_nprobe(nprobe)
            if pq:
                self.set_rerank(rerank)
            return
        if pq:
            assert self._store is not None
            search = lambda q, k, p, r: self._search_pq(q, k, nprobe=p, rerank=r)[1]  # noqa: E731
            found = calibrate_ivfpq(self._cpu, self._store, search, nprobe, rerank)
        else:
            found = calibrate_ivf(self._cpu)
        self.set_nprobe(found.nprobe)
        auto: dict[str, bool] = {"nprobe_auto": nprobe is None}
        if found.rerank is not None:
            self.set_rerank(found.rerank)
            auto["rerank_auto"] = rerank is None
        self.meta["index"].update(auto, calibrated_recall_at_10=found.recall_at_10, calibrated_count=found.count)

    # ---------------------------------------------------------------- persistence

    def save(self, folder: str | Path) -> Path:
        """Write index.faiss (a CPU copy), texts.json and meta.json to `folder` atomically; returns its path.

        An ivfpq index also writes its float16 rows (vectors.f16.npy) and from then on reads them memory-mapped
        from there, so they leave RAM.
        """
        self.meta["count"] = len(self)
        out = write_folder(folder, self._cpu, self._texts, self.meta, self._store)
        if self._store is not None:
            self._store = read_float16_rows(out, self._cpu)
        return out

    @classmethod
    def load(
        cls, folder: str | Path, encoder: Encoder | None = None, *, device: str = "auto", gpu: bool | None = None
    ) -> VectorIndex:
        """Open a saved index; the encoder (given, or the one its metadata names: a folder relative to the index
        folder such as `../model`, a hub id or "bundled") must be the one it was built with (same fingerprint).
        `gpu=None` searches on the GPU(s) when faiss sees any."""
        folder = Path(folder).expanduser()
        cpu, texts, meta, store = read_folder(folder)
        meta = anchored(meta, folder)
        self = cls(cpu, texts, meta, stored_encoder(meta, folder, encoder, device), store)
        if want_gpu(gpu) and gpu_can_search(cpu):
            self._gpu = GpuReplica(cpu, self.kind)
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


def bytes_per_vector(index: faiss.Index) -> dict[str, int]:
    """Memory each indexed row costs: `ram` for the FAISS structure (codes or floats, plus an 8-byte id in IVF
    lists), `disk` for what is only read from the folder (an ivfpq index's float16 re-ranking rows)."""
    if not isinstance(index, faiss.IndexIVF):
        return {"ram": 4 * index.d, "disk": 0}
    return {"ram": int(index.code_size) + 8, "disk": 2 * index.d if isinstance(index, faiss.IndexIVFPQ) else 0}


def _untrained(kind: str, n: int, dim: int, options: IndexOptions) -> faiss.Index:
    """The empty FAISS index of `kind` for `n` rows of `dim`: IVF list count and PQ code size from `options` or
    their defaults, k-means settings for training."""
    if kind == "flat":
        return faiss.IndexFlatIP(dim)
    nlist = int(options.nlist) if options.nlist is not None else default_nlist(n)
    if not 1 <= nlist <= n:
        raise MirrorError(f"an IVF index needs 1 <= nlist <= number of texts ({n}), got nlist={nlist}")
    quantizer = faiss.IndexFlatIP(dim)
    if kind == "ivf":
        cpu = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    else:
        m = int(options.pq_m) if options.pq_m is not None else default_pq_m(dim)
        if dim % m:
            raise MirrorError(f"pq_m must divide the dimension ({dim}), got {m}")
        cpu = faiss.IndexIVFPQ(quantizer, dim, nlist, m, pq_bits(n), faiss.METRIC_INNER_PRODUCT)
    cpu.cp.niter = TRAIN_ITERATIONS
    cpu.cp.max_points_per_centroid = TRAIN_POINTS_PER_LIST
    cpu.cp.seed = 1234
    return cpu


def _training_sample(rows: Rows, index: faiss.IndexIVF) -> np.ndarray:
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
    return as_matrix(rows.take(ids), rows.dim, "vectors")


class FolderIndexes:
    """A training job's indexes (mirror.job.Indexes) as VectorIndex folders: exact, on the CPU."""

    def build(self, encoder: Encoder, texts: list[str], folder: Path, on_progress: ProgressFn) -> None:
        VectorIndex.build(encoder, texts, gpu=False, on_progress=on_progress).save(folder)

    def vectors(self, folder: Path, encoder: Encoder) -> np.ndarray | None:
        index = VectorIndex.load(folder, encoder, gpu=False)
        return index.stored(range(len(index)))
