"""The disk a job may write: before it writes, sessions idle past their TTL and runs unused past theirs are swept
(never a live run's folder, nor a live run's session), then its visitor's, its address's and the server's accounts
(explorer.resources.accounts) are asked for room; the visitor's own least recently used runs may make it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from explorer.resources.accounts import DiskAccounts, last_used
from explorer.resources.sessions import EVICT_MIN_IDLE_S, Session, SessionStore
from explorer.resources.store import RunStore
from explorer.settings import Settings


class Disk:
    """Sweeps and room before a write. One per MirrorApp (`app.disk`; `app.check_disk`, `app.sweep`)."""

    def __init__(
        self,
        settings: Settings,
        sessions: SessionStore,
        store: RunStore,
        accounts: DiskAccounts,
        registry: Any,
    ):
        self.settings, self.sessions, self.store = settings, sessions, store
        self.accounts, self.registry = accounts, registry

    def sweep(self, force: bool = False) -> list[Path]:
        """Remove sessions idle past MIRROR_SESSION_TTL and runs unused for MIRROR_RUN_TTL (never one being made),
        and run folders a restart cut short; never anything for disk space (`check` refuses the writer)."""
        removed = self.sessions.sweep(force)
        if force or removed:
            s = self.settings
            unfinished = max(s.max_run_seconds or 0.0, 3600.0) + 600.0  # longer than any run takes to be made
            removed += self.store.sweep(s.run_ttl, self.registry.folders(), unfinished)
        return removed

    def check(self, session: Session, incoming: int = 0) -> list[str]:
        """Before a job writes about `incoming` bytes for `session`: old sessions and runs swept, then room in the
        disk accounts of its visitor, its address and the server, or MirrorError. The visitor's own least recently
        used runs may make room in its own budget: the notes say which went."""
        self.sweep(force=True)
        busy = self.registry.folders()  # live runs, those served before their checks included
        if session.run is not None:
            busy.add(session.run.folder)
        removed = self.accounts.make_room(session.owner, incoming, self.may_go(busy))
        if not removed:
            return []
        names = ", ".join(f.name[:8] for f in removed)
        return [
            # (of this browser or of its address: another browser behind the same address shares the address's
            # budget, and read "your … run" of a run it never made: a tester's pass)
            f"To make room within the disk this server gives a browser and an address (MIRROR_VISITOR_DISK_MB, "
            f"MIRROR_ADDRESS_DISK_MB), the least recently used run{'s' if len(removed) > 1 else ''} {names} of this "
            f"browser or its address {'were' if len(removed) > 1 else 'was'} removed."
        ]

    @staticmethod
    def may_go(busy: set[Path]) -> Callable[[Path], bool]:
        """Whether a run folder may make room for its visitor's next run: finished, not in use (`busy`), not used in
        the last EVICT_MIN_IDLE_S."""

        def may_go(folder: Path) -> bool:
            idle = time.time() - last_used(folder) > EVICT_MIN_IDLE_S
            return folder not in busy and idle and (folder / "run.json").is_file()

        return may_go
