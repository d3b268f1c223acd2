"""IndexOptions: which index to build (kind, IVF lists, probes, PQ code size, re-ranking), and the defaults for
what it leaves unset. Light: no faiss, numpy or torch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral
from typing import Any

from mirror.errors import MirrorError

KINDS = ("auto", "flat", "ivf", "ivfpq")
IVF_KINDS = ("ivf", "ivfpq")
# Exact search up to this many vectors: a flat single query scans every row (~0.06 us per 384-d row on
# one core here, 1.7 ms at 30k, 3 ms at 50k, 6 ms at 100k); past it IVF answers in ~0.2 ms. See bench/RESULTS.md.
EXACT_MAX = 30_000
# Strings per encoding batch at most. On a CPU Encoder.encode's budget of 4,096 padded tokens binds first for all
# but the shortest strings; for those (words) fewer, larger batches halve the time on a busy 2-thread CPU.
BATCH_SIZE = 512
MIN_POINTS_PER_LIST = 39  # faiss' k-means wants at least 39 training points per centroid
# IVF-PQ: one byte (8 bits) per sub-quantizer of ~8 dimensions, so 48 bytes for 384-d vectors instead of 1,536.
PQ_DIMS_PER_CODE = 8
PQ_BITS = 8
GPU_PQ_CODE_BYTES = (1, 2, 3, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64, 96)  # what faiss' GpuIndexIVFPQ takes


@dataclass(frozen=True)
class IndexOptions:
    """Which index to build; checked when made, so a bad value fails before a long encoding, not after.

    `kind="auto"` is exact (flat) up to `exact_max` texts and IVF above, with `nprobe` calibrated for
    recall@10 >= 0.95; `kind`, `nlist` and `nprobe` override that. `kind="ivfpq"` keeps PQ codes of `pq_m`
    bytes per row in memory (default dim/8) and re-ranks `rerank * k` candidates (default: calibrated) from
    float16 copies of the rows. None means "choose for me" (see default_nlist, default_pq_m).

        >>> IndexOptions(kind="ivf", nlist=64).kind_for(1_000)
        'ivf'
    """

    kind: str = "auto"
    nlist: int | None = None
    nprobe: int | None = None
    exact_max: int = EXACT_MAX
    pq_m: int | None = None
    rerank: int | None = None

    def __post_init__(self) -> None:
        self.validated()

    def validated(self) -> IndexOptions:
        """Return self, or raise MirrorError naming the first bad option and what it may be."""
        if self.kind not in KINDS:
            raise MirrorError(f"index kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        for name, value in (("nlist", self.nlist), ("nprobe", self.nprobe), ("exact_max", self.exact_max)):
            if value is not None and (not _is_int(value) or value < 0):
                raise MirrorError(f"{name} must be a non-negative integer, got {value!r}")
        if self.kind == "flat" and (self.nlist is not None or self.nprobe is not None):
            raise MirrorError("nlist and nprobe apply to an IVF index; drop them or use kind 'ivf' or 'auto'")
        if self.nprobe is not None and (self.nprobe < 1 or (self.nlist is not None and self.nprobe > self.nlist)):
            lists = self.nlist or "the number of lists"
            raise MirrorError(f"nprobe must be between 1 and nlist ({lists}), got {self.nprobe}")
        for name, value in (("pq_m", self.pq_m), ("rerank", self.rerank)):
            if value is not None:
                if self.kind != "ivfpq":
                    raise MirrorError(f"{name} applies to an ivfpq index; drop it or use kind 'ivfpq'")
                check_positive(name, value)
        return self

    def kind_for(self, count: int) -> str:
        """The kind an index of `count` rows gets: `kind`, or with "auto" flat up to `exact_max` and IVF past it."""
        if self.kind != "auto":
            return self.kind
        return "flat" if count <= self.exact_max else "ivf"

    def requested(self) -> dict[str, Any]:
        """The caller's IVF (and PQ) settings as meta.json records them, None where they are to be chosen."""
        out: dict[str, Any] = {"nlist": self.nlist, "nprobe": self.nprobe}
        if self.kind == "ivfpq":
            out.update(pq_m=self.pq_m, rerank=self.rerank)
        return out


def check_positive(name: str, value: Any) -> None:
    """Raise MirrorError unless `value` is an integer >= 1 (a bool is not)."""
    if not _is_int(value) or value < 1:
        raise MirrorError(f"{name} must be a positive integer, got {value!r}")


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


def _is_int(value: Any) -> bool:
    """An int or a NumPy integer, not a bool."""
    return isinstance(value, Integral) and not isinstance(value, bool)


DEFAULT_OPTIONS = IndexOptions()
"""Exact up to EXACT_MAX texts, then IVF with nlist and nprobe chosen (the default of every build)."""
