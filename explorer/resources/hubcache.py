"""Hub models on this server's disk: downloaded into the work folder (`<work>/.hub`, Hugging Face's cache layout), so
the server's disk account counts them; priced and made room for before each download, least recently used first,
within MIRROR_HUB_DISK_MB and the server's MIRROR_DISK_MB.

Before: every hub model a visitor named went to the Hugging Face cache outside the work folder, before the disk
check; with the disk full, 5 refused requests for 5 hub ids grew it 0 -> 352 MiB, charged to nobody, never removed.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from explorer.resources.accounts import disk_usage
from mirror.data import fmt_size
from mirror.errors import MirrorError

log = logging.getLogger("mirror.app")

HUB_DIR = ".hub"  # under the work folder: a dot-folder, so no visitor's, but in the server's total
USED = ".mirror_used"  # touched at each use of a model: the least recently used goes first


class HubCache:
    """The hub models this server downloaded, under `root`: at most `budget` bytes of them (the least recently used
    not in use removed to make room), each download priced first (`size(model)`: asked of the hub once) and refused
    when the server's disk cannot take it (`server_room(bytes)` raises MirrorError)."""

    def __init__(self, root: Path, budget: int, server_room: Callable[[int], None], max_download: int | None = None):
        self.root, self.budget, self.server_room, self.max_download = root, budget, server_room, max_download
        self.sizes: dict[str, int] = {}  # hub id -> its download's bytes, asked once
        self.pending: dict[str, int] = {}  # downloads under way: their bytes are spoken for
        self.users: collections.Counter[str] = collections.Counter()  # loads and runs reading a model's files now
        self.lock = threading.Lock()

    def folder(self, model: str) -> Path:
        return self.root / ("models--" + model.replace("/", "--"))

    def has(self, model: str) -> bool:
        """Whether `model` was downloaded here (a snapshot with its config)."""
        snapshots = self.folder(model) / "snapshots"
        return any(snapshots.glob("*/config.json")) or any(snapshots.glob("*/modules.json"))

    def size(self, model: str) -> int | None:
        """The bytes loading `model` downloads, asked of the hub once (None: it cannot say, e.g. offline:
        ModelCache.check_download refuses it); MirrorError for an id the hub does not have, or past `max_download`
        (MIRROR_MAX_HUB_MB)."""
        size = self.sizes.get(model)
        if size is None:
            from mirror.hub import hub_download_bytes

            size = hub_download_bytes(model)
            if size is not None:
                self.sizes[model] = size
        if size is not None and self.max_download is not None and size > self.max_download:
            raise MirrorError(
                f"`{model}` is a {fmt_size(size)} download; this server loads hub models up to "
                f"{fmt_size(self.max_download)} (MIRROR_MAX_HUB_MB)"
            )
        return size

    @contextlib.contextmanager
    def use(self, model: str) -> Iterator[None]:
        """Around what reads `model`'s files (a load, a training job that loads it): it is downloaded here, priced
        and made room for first when it is not (MirrorError: nothing downloaded), and not removed while in use; a
        partial download is removed when the load fails."""
        size = None if self.has(model) else (self.size(model) or 0)  # asked of the hub outside the lock
        with self.lock:
            if size is not None and model not in self.pending and not self.has(model):
                self._make_room(model, size)  # MirrorError: refused, nothing held
                self.pending[model] = size
            else:
                size = None  # here already, or coming for another load
            self.users[model] += 1
        ok = False
        try:
            yield
            ok = True
        finally:
            with self.lock:
                self.pending.pop(model, None)
                self.users[model] -= 1
                if self.users[model] <= 0:
                    del self.users[model]
            if ok:
                self.touch(model)
                if size is not None:
                    self._settle(model, size)
            elif size is not None and not self.has(model):
                shutil.rmtree(self.folder(model), ignore_errors=True)

    def touch(self, model: str) -> None:
        with contextlib.suppress(OSError):
            self.folder(model).mkdir(parents=True, exist_ok=True)
            (self.folder(model) / USED).touch()

    def usage(self) -> int:
        return disk_usage(self.root) if self.root.is_dir() else 0

    def _make_room(self, model: str, size: int) -> None:
        """Room for `size` more bytes: within the hub budget (least recently used models not in use to go), and
        within the server's disk (server_room, counting what those free). MirrorError when either cannot be had;
        then nothing was removed."""
        if size > self.budget:
            raise MirrorError(
                f"`{model}` is a {fmt_size(size)} download; this server keeps {fmt_size(self.budget)} of hub models "
                "(MIRROR_HUB_DISK_MB)"
            )
        spoken, held = sum(self.pending.values()), self.usage()
        victims: list[tuple[str, int]] = []
        for old, _ in sorted(self._models(), key=lambda m: m[1]):
            if held + spoken + size <= self.budget:
                break
            if old not in self.users:
                victims.append((old, disk_usage(self.folder(old))))
                held -= victims[-1][1]
        if held + spoken + size > self.budget:
            raise MirrorError(
                f"this server's hub models take {fmt_size(held + sum(v for _, v in victims) + spoken)} of "
                f"{fmt_size(self.budget)} (MIRROR_HUB_DISK_MB) and are all in use; try again in a few minutes"
            )
        self.server_room(max(0, size + spoken - sum(v for _, v in victims)))
        for old, _ in victims:
            shutil.rmtree(self.folder(old), ignore_errors=True)

    def _settle(self, model: str, priced: int) -> None:
        """After a download: what it really takes on disk, not what the hub said (issue 58: a hub that under-reported
        left 174 MiB against a 150 MiB cap). Past the budget, the least recently used models not in use go; if the
        new one alone is past it, it goes too (it is loaded already; the next load is refused by its true size)."""
        with self.lock:
            real = disk_usage(self.folder(model))
            if real <= priced + max(2**20, priced // 20):  # a download's own small files and blocks: as priced
                return
            log.warning("hub model %s took %s on disk, the hub said %s", model, fmt_size(real), fmt_size(priced))
            self.sizes[model] = real
            held = self.usage()
            for old, _ in sorted(self._models(), key=lambda m: m[1]):
                if held <= self.budget:
                    return
                if old not in self.users and old != model:
                    held -= disk_usage(self.folder(old))
                    shutil.rmtree(self.folder(old), ignore_errors=True)
            if held > self.budget and model not in self.users:
                shutil.rmtree(self.folder(model), ignore_errors=True)

    def _models(self) -> list[tuple[str, float]]:
        """(hub id, last use) of every model here."""
        out = []
        with contextlib.suppress(OSError):
            for folder in self.root.glob("models--*"):
                marker = folder / USED
                try:
                    used = (marker if marker.exists() else folder).stat().st_mtime
                except OSError:
                    used = time.time()
                out.append((folder.name[len("models--") :].replace("--", "/"), used))
        return out
