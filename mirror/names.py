"""Which model names are accepted: the bundled model, a Hugging Face id, a local folder (the one policy).

The CLIs run on the user's own machine and take local folders anywhere (`roots=None`); a server passes the
folders it allows (`roots=()`: none) and whether it downloads from the Hub.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from mirror.config import BUNDLED_MODEL
from mirror.errors import MirrorError

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?$")
"""A Hugging Face model id: `name` or `org/name` (`..` is refused apart)."""
SHOWN_CHARS = 80  # a name longer than this is cut in messages


def check_model_name(
    name: str, *, allow_hub: bool = True, roots: Sequence[Path] | None = None, shown: str | None = None
) -> str:
    """The model name, stripped, if the policy accepts it; else a MirrorError saying what to use instead.

    Accepted: the bundled model; a local folder (anywhere when `roots` is None, only under one of `roots`
    otherwise, none when it is empty); a Hugging Face id when `allow_hub`. Nothing is loaded or downloaded
    here. `shown` is how messages name it (default: the name, cut to 80 characters).
    """
    model = str(name or "").strip()
    if not model:
        raise MirrorError("choose a base model (or type a Hugging Face model id)")
    if model == BUNDLED_MODEL:
        return model
    shown = shown or short_name(model)
    if len(model) > 1000 or "://" in model or any(ord(c) < 32 or ord(c) == 127 for c in model):
        raise MirrorError(
            f"`{shown}` is not a model name: use '{BUNDLED_MODEL}' or a Hugging Face id such as "
            "`bert-base-uncased` or `org/name`"
        )
    if looks_local(model, here=roots is None):  # a server never asks its disk what exists: no oracle
        if roots is None:
            return model
        if not roots:
            raise MirrorError(
                f"`{shown}`: this server does not load models from local folders; use '{BUNDLED_MODEL}' "
                "or a Hugging Face model id"
            )
        if not any(is_under(Path(model).expanduser(), root) for root in roots):
            raise MirrorError(
                f"`{shown}`: local model folders are only accepted under the allowed directories (MIRROR_MODEL_ROOTS)"
            )
        return model
    if not HUB_ID.match(model) or ".." in model:
        raise MirrorError(
            f"`{shown}` is not a valid Hugging Face model id (letters, digits, `-`, `_`, `.`, as `name` or `org/name`)"
        )
    if not allow_hub:
        raise MirrorError(f"{model!r}: this server only offers the bundled model (MIRROR_ALLOW_HUB=0)")
    return model


def looks_local(name: str, here: bool = True) -> bool:
    """Whether `name` means a folder rather than a hub id: a path-like name, or (`here`: on the user's own machine,
    the CLIs) one that exists here. A server passes here=False: `tests` and `app.py` beside it are hub ids like any
    other name, so what it answers never says which names exist on its disk."""
    if name.startswith(("/", ".", "~", "\\")) or "\\" in name or name.count("/") > 1:
        return True
    if not here:
        return False
    try:
        return Path(name).expanduser().exists()
    except (OSError, ValueError):  # too long for a file name, a NUL: not an id either
        return True


def is_under(path: str | Path, root: str | Path) -> bool:
    """Whether `path`, symlinks and `..` resolved, lies inside `root` (or is it)."""
    try:
        Path(path).resolve().relative_to(Path(root).resolve())
    except (ValueError, OSError, RuntimeError):  # elsewhere; unresolvable; a symlink loop
        return False
    return True


def short_name(name: str) -> str:
    """`name` cut to 80 characters for a message."""
    return name if len(name) <= SHOWN_CHARS else name[:SHOWN_CHARS] + "…"


def shown_model(name: str) -> str:
    """How load errors name a model: as given (cut), but an absolute or home path by its last part only, so a
    message never shows where a server keeps its files."""
    if name.startswith(("/", "~", "\\")) or re.match(r"^[A-Za-z]:[\\/]", name):
        return short_name(re.split(r"[\\/]", name.rstrip("/\\"))[-1] or "model")
    return short_name(name)
