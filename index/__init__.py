"""Similarity search over a list of texts: FAISS inner-product indexes of encoder embeddings.

Light at import: faiss, numpy and torch load only when `VectorIndex` or `Hit` is first used.

    >>> from index import IndexOptions, VectorIndex
    >>> idx = VectorIndex.build("bundled", ["cat", "dog", "car"], gpu=False)  # doctest: +SKIP
    >>> [h.text for h in idx.search("kitten", k=2)[0]]  # doctest: +SKIP
    ['cat', 'dog']
    >>> big = VectorIndex.build("bundled", texts, IndexOptions(kind="ivfpq"))  # doctest: +SKIP

Modules: options.py (IndexOptions and the defaults it leaves to), store.py (VectorIndex, Hit), folder.py (the
saved folder), calibrate.py (IVF nprobe / ivfpq rerank), gpu.py (GPU replicas), rows.py (row storage), exact.py
(NumPy exact search), inputs.py (checked texts, vectors, encoders), distributed.py (encoding over processes).
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "VectorIndex": "index.store",
    "Hit": "index.store",
    "ProgressFn": "index.store",
    "IndexOptions": "index.options",
    "EXACT_MAX": "index.options",
    "KINDS": "index.options",
    "default_nlist": "index.options",
    "check_target": "index.folder",
    "build_index": "index.distributed",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'index' has no attribute {name!r}")
