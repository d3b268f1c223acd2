"""Similarity search over a list of texts: FAISS inner-product indexes of encoder embeddings.

Light at import: faiss, numpy and torch load only when `VectorIndex` or `Hit` is first used.

    >>> from index import VectorIndex
    >>> idx = VectorIndex.build("bundled", ["cat", "dog", "car"])  # doctest: +SKIP
    >>> [h.text for h in idx.search("kitten", k=2)[0]]  # doctest: +SKIP
    ['cat', 'dog']
"""

from __future__ import annotations

from typing import Any

_LAZY = {"VectorIndex": "index.store", "Hit": "index.store", "EXACT_MAX": "index.store", "default_nlist": "index.store"}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'index' has no attribute {name!r}")
