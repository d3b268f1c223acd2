"""Output folders: refused before the work when they hold something this tool did not write (`check_out_dir`), and
replaced atomically, so a reader never sees half of one (`replace_dir`). The engine's save paths and the command
lines (which name the flag: mirror.cli) share them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from mirror.errors import MirrorError


def check_out_dir(path: str | Path, markers: Sequence[str], what: str, flag: str | None = None) -> Path:
    """Fail before the work, not after it: `path` must be a missing path, an empty folder or a folder holding one
    of `markers` (a folder this tool wrote, which a save replaces), in a writable place.

    Anything else (notes, the input file, another tool's folder) is refused and left untouched; `what` names
    the folders we do replace, e.g. "a model folder written by mirror"; messages name `flag` (a command line's
    "--out") before the path. Returns the path, user-expanded.
    """
    out = Path(path).expanduser()
    named = f"{flag} {path}" if flag else str(path)
    refuse = f"{named}: exists and is not"
    try:
        if out.exists() or out.is_symlink():
            if not out.is_dir():
                raise MirrorError(f"{refuse} a folder; choose a new or empty folder")
            if any(out.iterdir()) and not any((out / marker).is_file() for marker in markers):
                raise MirrorError(f"{refuse} {what}; choose a new or empty folder")
    except OSError as exc:
        raise MirrorError(f"{named}: cannot read it ({exc.strerror or exc})") from None
    parent = out if out.exists() else out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    try:  # really try: permission bits do not tell (root, read-only mounts, /proc)
        if not parent.is_dir():
            raise OSError(f"{parent} is not a folder")
        os.rmdir(tempfile.mkdtemp(prefix=".write-check-", dir=parent))
    except OSError:
        raise MirrorError(f"{named}: cannot create or write there ({parent} is not a writable folder)") from None
    return out


def replace_dir(new: Path, target: Path) -> None:
    """Swap `new` into `target` with renames so readers never see a partial folder."""
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(new, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(new, target)
