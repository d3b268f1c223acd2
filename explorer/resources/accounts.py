"""Disk accounts: everything the app writes under its work folder (runs, blends, unpacked model zips, exports, other
corpora, session folders) is charged to the visitor who wrote it, to that visitor's address and to the server.

A folder's owner is recorded when it is made (`.owner`: visitor and address). Before a job writes, `make_room`
checks the three budgets with what the job will add: past the visitor's own budget, that visitor's exports and then
its own least recently used runs make room (never one being made, served by the session that writes, or used in the
last few minutes); past the address's or the server's budget the writer is refused (exports, which can be made
again, go first). Nobody's runs are removed because someone else filled the disk: only their age
(MIRROR_RUN_TTL after their last use) removes them (explorer.resources.store).
"""

from __future__ import annotations

import collections
import contextlib
import ipaddress
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirror.data import fmt_size
from mirror.errors import MirrorError
from mirror.exports import prune_exports

OWNER_FILE = ".owner"
LAST_USED = ".last_used"
RUN_FILE = "run.json"


@dataclass(frozen=True)
class Owner:
    """Who a folder is charged to: a visitor (its signed cookie's id, or "@<address>" without one) and its address.
    Empty strings: a caller the server could not tell apart (the service used without the web app)."""

    visitor: str = ""
    address: str = ""


LOCAL_IDLE_S = 3600.0  # at the loopback address, another visitor's run unused this long may make room (make_room)


def local(address: str) -> bool:
    """Whether `address` is this machine's own (loopback): the app used where it runs."""
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def write_owner(folder: Path, owner: Owner) -> None:
    with contextlib.suppress(OSError):
        (folder / OWNER_FILE).write_text(json.dumps({"visitor": owner.visitor, "address": owner.address}))


def read_owner(folder: Path) -> Owner | None:
    """The owner recorded in `folder`, or None (made by a version without accounts: the server's alone)."""
    try:
        data = json.loads((folder / OWNER_FILE).read_text(encoding="utf-8"))
        return Owner(str(data.get("visitor", "")), str(data.get("address", "")))
    except (OSError, ValueError, AttributeError):
        return None


def last_used(folder: Path) -> float:
    """When a run or session folder was last used (its marker, or the folder itself)."""
    marker = folder / LAST_USED
    try:
        return marker.stat().st_mtime if marker.exists() else folder.stat().st_mtime
    except OSError:
        return 0.0


def disk_usage(folder: Path, seen: set[tuple[int, int]] | None = None) -> int:
    """Bytes under `folder`, each file once however many hard links it has (a blend links its parent's index);
    with `seen`, files already counted there are skipped too. Files that vanish during the walk are skipped."""
    seen = set() if seen is None else seen
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.stat(os.path.join(root, name))
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_size
    return total


@dataclass
class Entry:
    """One run or session folder as the accounts see it."""

    folder: Path
    owner: Owner | None
    bytes: int
    last_used: float
    run: bool  # a run folder (runs/<id>), not a session's


@dataclass
class Usage:
    """What the work folder holds now: in all, per visitor, per address, and folder by folder."""

    total: int = 0
    by_visitor: collections.Counter[str] = field(default_factory=collections.Counter)
    by_address: collections.Counter[str] = field(default_factory=collections.Counter)
    entries: list[Entry] = field(default_factory=list)


class DiskAccounts:
    """The disk accounts of one work folder (`work_dir`, its runs under `runs_root`), within the budgets of the
    settings `settings_of()` gives now: `visitor_disk_bytes`, `address_disk_bytes` and `disk_bytes`."""

    def __init__(self, settings_of: Callable[[], Any], work_dir: Path, runs_root: Path, forget: Callable[[Path], None]):
        self.settings_of = settings_of
        self.work_dir, self.runs_root = work_dir, runs_root
        self.forget = forget  # called before a run folder is removed (drop it from memory)
        # the server listens on loopback only and believes no proxy (app.main): a visitor at the loopback address is
        # this machine's own user, whose oldest runs make room at that address (`make_room`); behind a reverse proxy
        # every visitor may read as loopback, so never there
        self.local_room = False

    @property
    def settings(self) -> Any:
        return self.settings_of()

    def folders(self) -> Iterable[tuple[Path, bool]]:
        """(folder, is a run) for every session and run folder."""
        for parent, runs in ((self.work_dir, False), (self.runs_root, True)):
            with contextlib.suppress(OSError):
                for folder in parent.iterdir():
                    if folder.is_dir() and folder != self.runs_root and not folder.name.startswith("."):
                        yield folder, runs

    def usage(self) -> Usage:
        """Walk the work folder once: the real bytes on disk in all (hard links once), and each folder charged to
        its owner (its own files, links included: a blend's share of its parent is the blend's too)."""
        out, seen = Usage(), set()
        out.total = disk_usage(self.work_dir, seen) if self.work_dir.is_dir() else 0
        for folder, run in self.folders():
            owner = read_owner(folder)
            size = disk_usage(folder)
            out.entries.append(Entry(folder, owner, size, last_used(folder), run))
            if owner is not None:
                out.by_visitor[owner.visitor] += size
                out.by_address[owner.address] += size
        return out

    def make_room(self, owner: Owner, incoming: int, may_go: Callable[[Path], bool]) -> list[Path]:
        """Before `owner` writes about `incoming` bytes: room in its visitor's, its address's and the server's
        budgets, or MirrorError saying which one is full. The visitor's own exports, then its own least recently
        used runs that `may_go`, are removed to make room in its own budget (returned); the exports of any run go
        before the server's budget refuses (they can be made again). On this machine's own address (loopback: the
        app used where it runs, every browser profile a visitor of one user) the address's least recently used runs
        make room in its budget the same way: a fresh clone's first run was refused for the runs of earlier browser
        profiles and checkouts, which no page lists ("try again later": 7 days). Nothing else of anyone is
        removed."""
        s, u = self.settings, self.usage()
        removed: list[Path] = []
        mine = [e for e in u.entries if e.owner is not None and e.owner.visitor == owner.visitor]
        over = u.by_visitor[owner.visitor] + incoming - s.visitor_disk_bytes
        if over > 0:
            freed = self._evict(mine, over, lambda e: may_go(e.folder), removed)
            if freed < over:
                raise MirrorError(self._why_visitor(u.by_visitor[owner.visitor] - freed, incoming))
            u = self.usage()
        over = u.by_address[owner.address] + incoming - s.address_disk_bytes
        if over > 0 and self.local_room and local(owner.address):  # (this machine's own browsers: one user)
            here = [e for e in u.entries if e.owner is not None and e.owner.address == owner.address]
            # another profile's runs: only those unused for LOCAL_IDLE_S (a tab of it may still show one)
            idle = time.time() - LOCAL_IDLE_S
            self._evict(here, over, lambda e: may_go(e.folder) and (e.owner == owner or e.last_used < idle), removed)
            u = self.usage()
        if u.by_address[owner.address] + incoming > s.address_disk_bytes:
            raise MirrorError(
                f"the visitors at your address keep {fmt_size(u.by_address[owner.address])} on this server, and one "
                f"address may keep {fmt_size(s.address_disk_bytes)} (MIRROR_ADDRESS_DISK_MB); {self._ttl()}"
            )
        self.server_room(incoming, u)
        return removed

    def _evict(self, entries: list[Entry], over: int, may_go: Callable[[Entry], bool], removed: list[Path]) -> int:
        """Up to `over` bytes freed from `entries`: their exports (they can be made again), then their least recently
        used runs that `may_go` (appended to `removed`). The bytes freed."""
        freed = prune_exports([e.folder for e in entries], over, 0)
        for e in sorted((e for e in entries if e.run and may_go(e)), key=lambda e: e.last_used):
            if freed >= over:
                break
            freed += e.bytes
            self.remove(e.folder)
            removed.append(e.folder)
        return freed

    def server_room(self, incoming: int, u: Usage | None = None) -> None:
        """Room for `incoming` more bytes in the server's budget (MIRROR_DISK_MB), exports (which can be made again)
        going first, or MirrorError: nobody's runs are removed for it."""
        s, u = self.settings, u or self.usage()
        if u.total + incoming > s.disk_bytes:
            prune_exports([e.folder for e in u.entries], u.total + incoming, s.disk_bytes)
            total = self.usage().total
            if total + incoming > s.disk_bytes:
                raise MirrorError(
                    f"this server's disk for runs is full ({fmt_size(total)} of {fmt_size(s.disk_bytes)}, "
                    f"MIRROR_DISK_MB); {self._ttl()}"
                )

    def fit(self, owner: Owner, out: Path) -> None:
        """After `owner` wrote an export `out`: its visitor back within budget, its older exports going first; when
        `out` alone does not fit, it is removed and MirrorError says so."""
        budget = self.settings.visitor_disk_bytes
        held = self.usage().by_visitor[owner.visitor]
        if held <= budget:
            return
        mine = [e.folder for e in self.usage().entries if e.owner is not None and e.owner.visitor == owner.visitor]
        held -= prune_exports(mine, held, budget, keep=out)
        if held > budget:
            shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink(missing_ok=True)
            raise MirrorError(
                f"this export would take your disk on this server past {fmt_size(budget)} (MIRROR_VISITOR_DISK_MB); "
                "export a selection instead"
            )

    def remove(self, folder: Path) -> None:
        self.forget(folder)
        shutil.rmtree(folder, ignore_errors=True)

    def _why_visitor(self, held: int, incoming: int) -> str:
        budget = self.settings.visitor_disk_bytes
        if incoming > budget:
            return (
                f"this needs {fmt_size(incoming)} of disk; one visitor may keep {fmt_size(budget)} on this server "
                "(MIRROR_VISITOR_DISK_MB)"
            )
        return (
            f"your runs keep {fmt_size(held)} on this server, and one visitor may keep {fmt_size(budget)} "
            "(MIRROR_VISITOR_DISK_MB); none of them can make room now (being made, served here, or used in the last "
            "5 minutes): try again in a few minutes"
        )

    def _ttl(self) -> str:
        days = self.settings.run_ttl / 86400
        age = f"{days:g} days" if days >= 1 else f"{self.settings.run_ttl / 3600:g} hours"
        return f"runs are removed {age} after their last use: try again later"


def stale_unfinished(folder: Path, now: float, max_age: float) -> bool:
    """A run folder without run.json (a run being made, or one a restart cut short) untouched for `max_age`."""
    if (folder / RUN_FILE).is_file():
        return False
    try:
        newest = max([folder.stat().st_mtime, *(p.stat().st_mtime for p in folder.iterdir())])
    except (OSError, ValueError):
        return False
    return now - newest > max_age
