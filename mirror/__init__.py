"""Mirror fine-tuning (MirrorBERT) of BERT-family encoders on a user's own strings.

Light at import: torch and transformers load only when a training or encoding function is used.

    >>> from mirror import MirrorConfig, mirror_tune, save_result
    >>> result = mirror_tune(["cat", "dog", "car"], MirrorConfig.preset("words", max_steps=1))  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from mirror.config import BUNDLED_MODEL, MirrorConfig, detect_mode
from mirror.cores import share_cores
from mirror.data import clean_texts, read_file, read_texts
from mirror.errors import MirrorError
from mirror.names import check_model_name

share_cores()  # how this process shares the cores (mirror/cores.py): before torch, numba or faiss load (none above does)

__version__ = "0.1.0"

_LAZY = {
    "mirror_tune": "mirror.train",
    "save_result": "mirror.train",
    "MirrorResult": "mirror.train",
    "load_encoder": "mirror.encoder",
    "save_encoder": "mirror.encoder",
    "Encoder": "mirror.encoder",
    "evaluate_pairs": "mirror.evaluate",
    "read_pairs": "mirror.evaluate",
}

__all__ = [
    "BUNDLED_MODEL",
    "MirrorConfig",
    "MirrorError",
    "check_model_name",
    "clean_texts",
    "detect_mode",
    "read_file",
    "read_texts",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mirror' has no attribute {name!r}")
