"""Files in and out: model zips handed out and taken back, and a per-client quota on Gradio's upload route.

Reading text uploads is mirror.data's job (`read_file`); this module never parses their content.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from explorer.card import hub_base_model
from mirror.data import fmt_size
from mirror.errors import MirrorError

log = logging.getLogger("mirror.app")
MAX_ZIP_RATIO = 20  # weights barely compress (~1.1x); a zip that inflates more holds padding, not a model
MAX_ZIP_ENTRIES = 500


def display_name(path: str | Path) -> str:
    """The name a user gave a file (its last part): shown in messages, never used in a path."""
    return Path(str(path)).name or "upload"


def download_name(base_model: str, run_id: str, what: str) -> str:
    """A download's file name: `mirror-<base model's short name>-<run id's first 12>-<what>.zip` (what: model or
    index), so a user's downloads of several runs never collide; never a server path."""
    base = hub_base_model(base_model) or str(base_model or "model")
    short = re.sub(r"[^A-Za-z0-9._-]+", "-", re.split(r"[\\/]", base.rstrip("/\\"))[-1]).strip("-._")[:40]
    run = re.sub(r"[^A-Za-z0-9._-]+", "-", str(run_id))[:12].strip("-._")
    return f"mirror-{short or 'model'}-{run or 'run'}-{what}.zip"


def zip_folder(folder: Path, out: Path, arcroot: str, extra_files: dict[str, str] | None = None) -> Path:
    """Zip `folder` under `arcroot/`; weights are stored, not deflated (they barely compress). `extra_files`
    (name: text) are added, in place of the folder's file of that name if it has one."""
    tmp = out.with_name(out.name + ".tmp")
    with zipfile.ZipFile(tmp, "w") as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file() and p.relative_to(folder).as_posix() not in (extra_files or {}):
                stored = p.suffix in (".safetensors", ".bin", ".faiss", ".pt")
                zf.write(
                    p,
                    f"{arcroot}/{p.relative_to(folder).as_posix()}",
                    zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED,
                )
        for name, text in (extra_files or {}).items():
            zf.writestr(f"{arcroot}/{name}", text)
    os.replace(tmp, out)
    return out


def model_folder_in_zip(zip_path: Path) -> str:
    """The folder a model zip unpacks its model to, relative to where it is unpacked ("." for a zip of the
    model's files themselves): where its config.json or modules.json lies."""
    with zipfile.ZipFile(zip_path) as zf:
        tops = [Path(n).parent for n in zf.namelist() if Path(n).name in ("config.json", "modules.json")]
    return min(tops, key=lambda p: len(p.parts)).as_posix() if tops else "."


def extract_model_zip(zip_path: Path, dest: Path, max_bytes: int) -> Path:
    """Safely unpack an uploaded model zip (no absolute paths, '..', links or zip bombs); returns the model folder."""
    name = display_name(zip_path)
    if zip_path.suffix.lower() != ".zip":
        raise MirrorError(f"`{name}`: upload the .zip this app gave you (a zipped sentence-transformers folder)")
    if zip_path.stat().st_size > max_bytes:
        raise MirrorError(
            f"`{name}` is {fmt_size(zip_path.stat().st_size)}; models up to {fmt_size(max_bytes)} are accepted"
        )
    try:
        zf = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError):
        raise MirrorError(f"`{name}` is not a valid zip file") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_ZIP_ENTRIES:
            raise MirrorError(f"`{name}` holds {len(infos)} files; a model folder has a handful")
        unpacked = sum(i.file_size for i in infos)
        if unpacked > max_bytes:
            raise MirrorError(
                f"`{name}` unpacks to {fmt_size(unpacked)}; models up to {fmt_size(max_bytes)} are accepted"
            )
        packed = sum(i.compress_size for i in infos)
        if unpacked > MAX_ZIP_RATIO * max(packed, 1) and unpacked > 2**20:
            raise MirrorError(f"`{name}` inflates {unpacked / max(packed, 1):.0f}x; a model zip does not: refusing it")
        for info in infos:
            parts = Path(info.filename).parts
            is_link = (info.external_attr >> 16) & 0o170000 == 0o120000
            if info.filename.startswith(("/", "\\")) or ".." in parts or ":" in info.filename or is_link:
                raise MirrorError(f"`{name}` contains an unsafe path ({info.filename!r}); refusing to unpack it")
        dest.mkdir(parents=True, exist_ok=True)
        try:
            zf.extractall(dest)
        except (zipfile.BadZipFile, OSError, RuntimeError) as exc:
            log.warning("model zip %s could not be unpacked: %s", name, exc)  # the server's paths stay in the log
            raise MirrorError(f"`{name}` could not be unpacked (a damaged zip, or the server's disk is full)") from None
    for candidate in [dest, *sorted(p for p in dest.iterdir() if p.is_dir())]:
        if (candidate / "config.json").is_file() or (candidate / "modules.json").is_file():
            return candidate
    raise MirrorError(f"`{name}` does not contain a model folder (no config.json or modules.json at its top)")


class UploadQuota:
    """ASGI middleware: each client (first X-Forwarded-For address, else the peer) may send at most `quota` bytes
    per `window` seconds to Gradio's upload route. Gradio has one global upload size limit, which must admit a
    model zip; this bounds what one anonymous visitor can park on the server's disk with it."""

    def __init__(self, app: Callable, quota: int, window: float = 3600.0):
        self.app, self.quota, self.window = app, quota, window
        self.sent: dict[str, collections.deque[tuple[float, int]]] = {}
        self.lock = threading.Lock()

    def used(self, client: str, now: float) -> int:
        log_ = self.sent.setdefault(client, collections.deque())
        while log_ and now - log_[0][0] > self.window:
            log_.popleft()
        if not log_:
            del self.sent[client]
            return 0
        return sum(n for _, n in log_)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST" or not scope["path"].endswith("/upload"):
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        forwarded = headers.get(b"x-forwarded-for", b"").decode("latin-1").split(",")[0].strip()
        client = forwarded or (scope.get("client") or ("?",))[0]
        length = int(headers.get(b"content-length", b"0") or 0) if headers.get(b"content-length", b"").isdigit() else 0
        now = time.monotonic()
        with self.lock:
            over = self.used(client, now) + length > self.quota
            if not over:
                self.sent.setdefault(client, collections.deque()).append((now, length))
        if over:
            body = f"upload quota reached: at most {fmt_size(self.quota)} per hour (MIRROR_UPLOAD_QUOTA_MB)".encode()
            await send({"type": "http.response.start", "status": 429, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": body})
            return None
        return await self.app(scope, receive, send)
