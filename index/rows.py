"""Rows: embeddings held as 2-d arrays in RAM or memory-mapped .npy shards, read block by block without joining
them; and the float16 copy an ivfpq index re-ranks from."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from index.inputs import as_matrix
from mirror.errors import MirrorError

ADD_BLOCK = 65_536  # rows handed to faiss (and converted to float32) at a time


class Rows:
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

    def unit_blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, rows) in order as float32 unit-length rows."""
        for start, block in self.blocks():
            yield start, as_matrix(block, self.dim, "vectors")

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

    def write(self, path: Path) -> None:
        """Save as one float16 .npy file, block by block (never the whole array in RAM)."""
        _write_npy(path, self.blocks(), (len(self), self.dim))


def float16_copy(rows: Rows, path: Path | None = None) -> Rows:
    """`rows` as float16 unit vectors (an ivfpq index's rows for re-ranking): in RAM, or memory-mapped from a
    .npy file written at `path`."""
    if path is None:
        return Rows([block.astype(np.float16) for _, block in rows.unit_blocks()])
    _write_npy(path, rows.unit_blocks(), (len(rows), rows.dim))
    return Rows([np.load(path, mmap_mode="r")])


def _write_npy(path: Path, blocks: Iterable[tuple[int, np.ndarray]], shape: tuple[int, int]) -> None:
    """Write (first row, rows) blocks into a new float16 .npy file of `shape`."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=shape)
    for start, block in blocks:
        out[start : start + len(block)] = block
    out.flush()
    del out
