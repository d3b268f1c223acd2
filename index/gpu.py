"""FAISS on GPUs: whether to use them, and GpuReplica, a searchable GPU copy of a CPU index (sharded when
faiss sees several GPUs)."""

from __future__ import annotations

import threading

import faiss
import numpy as np

from index.options import GPU_PQ_CODE_BYTES
from mirror.errors import MirrorError

GPU_MAX_K = 2048  # faiss GPU search limits k and nprobe to 2048


def want_gpu(gpu: bool | None) -> bool:
    """Whether to put an index on the GPU: `gpu=None` when faiss sees one; True without one is an error."""
    available = faiss.get_num_gpus() > 0
    if gpu and not available:
        raise MirrorError("a GPU index was asked for but faiss sees no GPU (install faiss-gpu on a CUDA machine)")
    return available if gpu is None else bool(gpu)


def gpu_can_search(cpu_index: faiss.Index) -> bool:
    """faiss' GPU IVF-PQ takes only some code sizes (default_pq_m picks one); other indexes always go."""
    if not isinstance(cpu_index, faiss.IndexIVFPQ):
        return True
    return int(cpu_index.pq.M) in GPU_PQ_CODE_BYTES and int(cpu_index.pq.nbits) <= 8


class GpuReplica:
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
