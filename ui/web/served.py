"""What Gradio serves of ours: the files the API hands out (/train's zips, /export's file), in Gradio's cache for as
long as the run's own file is there, and nothing of the work folder (`blocked_paths`). `ServedFiles.serve` makes a
file's cached name; `forget` (the app's, before a run or session folder is removed) and every later `serve` drop the
names whose file the run no longer has.

Why in Gradio's cache: an answer's `path` and URL (`/gradio_api/file=<Gradio's cache>/<64 hex>/<name>`, Gradio's own
form for a cached file) then name no folder of ours (issue 58: they were served in place, `<work>/runs/<id>/…`).
Why removed with the run rather than charged to its visitor (issue 58): the cached name is a hard link, the same
bytes as the run's file, which the disk accounts already charge to the run's visitor while the run is kept. Left to
Gradio's delete_cache (app.py: every hour, files older than MIRROR_SESSION_TTL), a link outlived its run by up to
three hours, its bytes on disk and in no budget: a visitor whose runs were removed to make room for its next ones
kept every removed run's zips on the server's disk. Charging the links instead would count the same bytes twice
while the run lives, and still hold them after it. A file the run replaces (a zip written again, an export made
anew) or removes (an export dropped to make room) is another name's end: its link goes at the next `serve`.

`blocked_paths`: what Gradio must never serve nor take as an input. Its file route serves any file under its upload
folder, and the work folder is inside it by default (`$GRADIO_TEMP_DIR/mirror-explorer`, named by the docs; Gradio's
own upload answer names the folder): the key the visitor cookies are signed with, other visitors' sessions and runs
were a GET away, and a file input naming one of them was read as an upload. The work folder is blocked; a Gradio
upload folder inside it (or the same folder) is refused at start, since blocking it would refuse every upload.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import shutil
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from mirror.errors import MirrorError


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class ServedFiles:
    """The cached names of files the API handed out, under `root()` (Gradio's upload folder), each with the file it
    names; one per app. A hard link where the file system allows (no second copy on disk), a copy otherwise."""

    def __init__(self, root: Callable[[], str | Path]):
        self.root = root
        self.key = secrets.token_bytes(32)  # names the folders: stable in this process, guessed by nobody
        self.lock = threading.Lock()
        self.names: dict[Path, tuple[Path, tuple[int, int, int, int]]] = {}  # cached name: (its file, identity)

    def serve(self, path: Path | str) -> str:
        """The cached name of `path`: `<root>/<keyed hash of the file's identity>/<its name>`. The same file asked
        again is the same name (its times set to themselves, which moves its ctime: Gradio's delete_cache ages by
        it), a file written anew a new one. Names whose file is gone or replaced go first."""
        source = Path(path).resolve()
        st = source.stat()
        identity = _identity(st)
        digest = hmac.new(self.key, f"{source}:{':'.join(map(str, identity))}".encode(), hashlib.sha256)
        target = Path(self.root()) / digest.hexdigest() / source.name
        with self.lock:
            self._prune(lambda _: False)
            with contextlib.suppress(FileNotFoundError):
                now = target.stat()  # handed out before: its times set to themselves (a link's are the run's file's)
                os.utime(target, ns=(now.st_atime_ns, now.st_mtime_ns))
                self.names[target] = (source, identity)
                return str(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = target.parent / f".{source.name}.{secrets.token_hex(4)}"
            try:
                try:
                    os.link(source, staging)
                except OSError:  # another file system, or links refused there: a copy
                    shutil.copyfile(source, staging)
                os.replace(staging, target)  # whole or absent, for a download of it that starts now
            finally:
                staging.unlink(missing_ok=True)
            self.names[target] = (source, identity)
        return str(target)

    def forget(self, folder: Path) -> None:
        """`folder` (a run's or a session's) is about to be removed: the names of its files go now, with the names
        of any file already gone or replaced."""
        folder = Path(folder).resolve()
        with self.lock:
            self._prune(lambda source: source.is_relative_to(folder))

    def _prune(self, going: Callable[[Path], bool]) -> None:
        """Remove the names whose file is `going`, gone or replaced (another file under its path), and forget those
        Gradio's delete_cache removed."""
        for target, (source, identity) in list(self.names.items()):
            try:
                alive = not going(source) and _identity(source.stat()) == identity
            except OSError:
                alive = False
            if alive and target.exists():
                continue
            del self.names[target]
            target.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                target.parent.rmdir()  # its own folder, empty now


def blocked_paths(work_dir: Path, upload_folder: str | Path, env: Mapping[str, str]) -> list[str]:
    """Gradio's `blocked_paths` for launch(): the work folder, and the operator's own (GRADIO_BLOCKED_PATHS, which
    an explicit list would otherwise replace); MirrorError when Gradio's upload folder is the work folder or inside it
    (blocked, no upload could be used; served, the work folder is)."""
    work, uploads = Path(work_dir).resolve(), Path(upload_folder).resolve()
    if uploads.is_relative_to(work):
        raise MirrorError(
            f"Gradio's upload folder ({uploads}, GRADIO_TEMP_DIR) is inside the work folder ({work}, MIRROR_WORK_DIR), "
            "whose files Gradio must not serve: give them folders apart (MIRROR_WORK_DIR=/data/mirror-explorer with "
            "GRADIO_TEMP_DIR=/data/gradio), or leave MIRROR_WORK_DIR unset (inside GRADIO_TEMP_DIR)"
        )
    own = [item.strip() for item in env.get("GRADIO_BLOCKED_PATHS", "").split(",") if item.strip()]
    return [str(work), *own]
