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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import faiss
import numpy as np

from mirror.errors import MirrorError

if TYPE_CHECKING:
    from mirror.encoder import Encoder

FORMAT = 1
INDEX_FILE, TEXTS_FILE, META_FILE = "index.faiss", "texts.json", "meta.json"
KINDS = ("auto", "flat", "ivf")
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


class VectorIndex:
    """L2-normalised embeddings in a FAISS inner-product index (scores are cosines), with their texts.

    Build with `VectorIndex.build(encoder, texts)` (or `from_vectors`), query with `search`, grow with
    `add`, persist with `save` / `VectorIndex.load`. Ids are row numbers in `texts`, stable across `add`.
    Searches may run from several threads at once; `add` must not run while another thread searches.

        >>> index = VectorIndex.build("bundled", ["cat", "dog", "car"])  # doctest: +SKIP
        >>> index.search("kitten", k=2)[0][0].text  # doctest: +SKIP
        'cat'
    """

    def __init__(self, cpu_index: faiss.Index, texts: list[str], meta: dict[str, Any], encoder: Encoder | None = None):
        self._cpu = cpu_index
        self._texts = texts
        self._positions: dict[str, int] | None = None  # text -> id, built on the first add
        self.meta = meta
        self.encoder = encoder
        self._gpu: _GpuReplica | None = None

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
    ) -> VectorIndex:
        """Embed `texts` (duplicates dropped) with `encoder` (an Encoder, a model folder, a hub id or "bundled").

        `kind="auto"` is exact (flat) up to `exact_max` texts and IVF above, with `nprobe` calibrated for
        recall@10 >= 0.95; `kind`, `nlist` and `nprobe` override that. `on_progress(done, total)` follows the
        encoding. `gpu=None` uses a GPU when faiss sees one.
        """
        _check_options(kind, nlist, nprobe, exact_max)  # before a long encoding, not after
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise MirrorError(f"batch size must be a positive integer, got {batch_size!r}")
        texts = _unique_texts(texts)
        enc = _as_encoder(encoder, device)
        vectors = enc.encode(texts, batch_size=batch_size, normalize=True, on_progress=on_progress)
        return cls.from_vectors(
            vectors, texts, encoder=enc, kind=kind, nlist=nlist, nprobe=nprobe, exact_max=exact_max, gpu=gpu
        )

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
    ) -> VectorIndex:
        """Index precomputed embeddings (one row per text; normalised here). Without an encoder, search by vector."""
        _check_options(kind, nlist, nprobe, exact_max)
        unique = _unique_texts(texts)
        texts = list(texts)
        x = _as_matrix(vectors, None, "vectors")
        if len(texts) != len(x):
            raise MirrorError(f"got {len(x)} vectors for {len(texts)} texts; give one vector per text")
        if len(unique) != len(texts):  # keep the first row of each text
            first = {t: i for i, t in reversed(list(enumerate(texts)))}
            x = x[[first[t] for t in unique]]
        if encoder is not None and encoder.dim != x.shape[1]:
            raise MirrorError(f"the encoder makes {encoder.dim}-d vectors but the vectors given are {x.shape[1]}-d")
        now = _now()
        meta: dict[str, Any] = {
            "format": FORMAT,
            "created": now,
            "updated": now,
            "count": 0,
            "dim": int(x.shape[1]),
            "metric": "inner product of L2-normalised vectors (cosine similarity)",
            "encoder": _encoder_meta(encoder) if encoder is not None else None,
            # "requested": the caller's nlist/nprobe, reused if an auto index later grows from flat to IVF
            "index": {
                "auto": kind == "auto",
                "exact_max": int(exact_max),
                "target_recall": TARGET_RECALL,
                "requested": {"nlist": nlist, "nprobe": nprobe},
            },
            "versions": _versions(encoder is not None),
        }
        self = cls(faiss.IndexFlatIP(x.shape[1]), [], meta, encoder)
        chosen = ("flat" if len(x) <= exact_max else "ivf") if kind == "auto" else kind
        self._rebuild(x, unique, chosen, nlist=nlist, nprobe=nprobe, gpu=_want_gpu(gpu))
        return self

    def _rebuild(
        self, x: np.ndarray, texts: list[str], kind: str, *, nlist: int | None, nprobe: int | None, gpu: bool
    ) -> None:
        """(Re)create the FAISS index of kind `kind` over rows `x`, training and calibrating an IVF."""
        n, dim = x.shape
        info = self.meta["index"]
        for key in ("nlist", "nprobe", "nprobe_auto", "calibrated_recall_at_10", "calibrated_count"):
            info.pop(key, None)
        started = time.perf_counter()
        if kind == "flat":
            cpu = faiss.IndexFlatIP(dim)
        else:
            nlist = int(nlist) if nlist is not None else default_nlist(n)
            if not 1 <= nlist <= n:
                raise MirrorError(f"an IVF index needs 1 <= nlist <= number of texts ({n}), got nlist={nlist}")
            cpu = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
            cpu.cp.niter = TRAIN_ITERATIONS
            cpu.cp.max_points_per_centroid = TRAIN_POINTS_PER_LIST
            cpu.cp.seed = 1234
        if gpu:  # train and add on the GPU, keep a CPU copy for saving
            replica = _GpuReplica(cpu)
            if kind == "ivf":
                replica.index.train(x)
            replica.index.add(x)
            cpu = faiss.index_gpu_to_cpu(replica.index)
        else:
            replica = None
            if kind == "ivf":
                cpu.train(x)
            cpu.add(x)
        if kind == "ivf":
            cpu.make_direct_map()  # lets calibration and rebuilds read rows back
        self._cpu, self._gpu, self._texts, self._positions = cpu, replica, list(texts), None
        info.update(type=kind, gpu=bool(gpu))
        if kind == "ivf":
            info["nlist"] = int(cpu.nlist)
            if nprobe is None:
                self._calibrate()
            else:
                self.set_nprobe(nprobe)
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
        """ "flat" (exact) or "ivf" (approximate)."""
        return str(self.meta["index"]["type"])

    @property
    def on_gpu(self) -> bool:
        return self._gpu is not None

    def set_nprobe(self, nprobe: int) -> None:
        """Override the IVF lists scanned per query (more: slower, higher recall)."""
        if self.kind != "ivf":
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
                np.vstack([old, x]), self._texts + new, "ivf", gpu=self.on_gpu, nlist=requested.get("nlist"),
                nprobe=requested.get("nprobe"),
            )  # fmt: skip
        else:
            self._cpu.add(x)
            if self._gpu is not None:
                self._gpu.add(x)
            self._texts.extend(new)
            assert self._positions is not None
            self._positions.update((t, i) for i, t in enumerate(new, len(self._positions)))
            if self.kind == "ivf" and info.get("nprobe_auto") and len(self) >= 1.1 * info["calibrated_count"]:
                self._calibrate()  # recalibrate once the index has grown by 10%, not on every small add
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

    # ---------------------------------------------------------------- persistence

    def save(self, folder: str | Path) -> Path:
        """Write index.faiss (a CPU copy), texts.json and meta.json to `folder` atomically; returns its path."""
        from mirror.encoder import replace_dir

        out = check_target(folder)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            tmp.chmod(0o777 & ~_umask())  # mkdtemp makes it private; the saved folder should not be
            faiss.write_index(self._cpu, str(tmp / INDEX_FILE))
            (tmp / TEXTS_FILE).write_text(json.dumps(self._texts, ensure_ascii=False), encoding="utf-8")
            self.meta["count"] = len(self)
            (tmp / META_FILE).write_text(json.dumps(self.meta, indent=2), encoding="utf-8")
            replace_dir(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
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
        self = cls(cpu, texts, meta, encoder)
        if _want_gpu(gpu):
            self._gpu = _GpuReplica(cpu)
        return self

    def __repr__(self) -> str:
        info = self.meta["index"]
        params = f", nlist={info['nlist']}, nprobe={info['nprobe']}" if self.kind == "ivf" else ""
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
    out = Path(folder).expanduser().resolve()
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / META_FILE).is_file())):
        raise MirrorError(f"{out}: exists and is not an index folder; refusing to replace it (pick a new --out)")
    return out


class _GpuReplica:
    """A GPU copy of a CPU index; faiss GPU resources are not thread-safe, so calls take a lock."""

    def __init__(self, cpu_index: faiss.Index):
        self.res = faiss.StandardGpuResources()
        self.index = faiss.index_cpu_to_gpu(self.res, 0, cpu_index)
        self.lock = threading.Lock()

    def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        with self.lock:
            return self.index.search(q, k)

    def add(self, x: np.ndarray) -> None:
        with self.lock:
            self.index.add(x)

    def set_nprobe(self, nprobe: int) -> None:
        with self.lock:
            self.index.nprobe = min(nprobe, GPU_MAX_K)


def _check_options(kind: str, nlist: int | None, nprobe: int | None, exact_max: int) -> None:
    if kind not in KINDS:
        raise MirrorError(f"index kind must be one of {', '.join(KINDS)}, got {kind!r}")
    for name, value in (("nlist", nlist), ("nprobe", nprobe), ("exact_max", exact_max)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0):
            raise MirrorError(f"{name} must be a non-negative integer, got {value!r}")
    if kind == "flat" and (nlist is not None or nprobe is not None):
        raise MirrorError("nlist and nprobe apply to an IVF index; drop them or use kind 'ivf' or 'auto'")
    if nprobe is not None and (nprobe < 1 or (nlist is not None and nprobe > nlist)):
        raise MirrorError(f"nprobe must be between 1 and nlist ({nlist or 'the number of lists'}), got {nprobe}")


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
