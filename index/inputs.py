"""What an index is built and queried from, checked: texts (unique, non-blank), vectors (unit-length float32
rows), and the encoder (given, or where to load it from)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mirror.errors import MirrorError

if TYPE_CHECKING:
    from mirror.encoder import Encoder


def unique_texts(texts: Sequence[str], allow_empty_list: bool = False) -> list[str]:
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


def as_matrix(vectors: np.ndarray, dim: int | None, what: str) -> np.ndarray:
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


def as_encoder(encoder: Encoder | str | Path, device: str) -> Encoder:
    """`encoder` itself, or the encoder loaded from a model folder, a hub id or "bundled"."""
    if isinstance(encoder, (str, Path)):
        from mirror.encoder import load_encoder

        return load_encoder(encoder, device=device)
    if not hasattr(encoder, "encode") or not hasattr(encoder, "fingerprint"):
        raise MirrorError(f"expected an Encoder, a model folder, a hub id or 'bundled', got {type(encoder).__name__}")
    return encoder
