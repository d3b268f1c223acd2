"""CPU accounts: the compute each visitor (and each address) spent on this server in the last hour, and a refusal
past its budget, the way disk is bounded (explorer.runs.accounts).

Every costly job a visitor asks for (a training run with its checks, a blend, a model upload, a map's layout, an
export, an evaluation) runs `metered(owner, what)`: refused at its start when the visitor or its address has spent
its budget in the last hour (MIRROR_VISITOR_CPU_S, MIRROR_ADDRESS_CPU_S), charged at its end with the CPU seconds
the server's process spent meanwhile, shared equally with the other metered jobs that ran at the same time (two jobs
at once each pay half of what the process spent while both ran). Searches are not metered: they are small, bounded
by their own slots, and what a visitor does most.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from explorer.runs.accounts import Owner
from explorer.runs.turns import TURNS
from mirror.errors import MirrorError

WINDOW_S = 3600.0


@dataclass(eq=False)
class Job:
    """One metered job: whose, and the CPU seconds charged to it so far."""

    owner: Owner
    what: str
    seconds: float = 0.0


@dataclass
class CpuAccounts:
    """Per-visitor and per-address CPU seconds over the last hour, within `visitor_s` and `address_s` (0: no limit).
    `clock` is the process's CPU seconds (time.process_time: every thread of the server)."""

    visitor_s: float
    address_s: float
    clock: Callable[[], float] = time.process_time
    spent: collections.deque[tuple[float, Owner, float]] = field(default_factory=collections.deque)  # when, who, s
    running: list[Job] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _last: float = 0.0  # the CPU clock when the running jobs were last charged

    def used(self, owner: Owner) -> tuple[float, float]:
        """(the visitor's, its address's) CPU seconds in the last hour, the jobs running now included."""
        with self.lock:
            self._settle()
            return self._used(owner)

    def check(self, owner: Owner, what: str = "this") -> None:
        """MirrorError when `owner` (or its address) has spent its hour's budget: nothing more starts until its
        oldest spending is an hour old."""
        with self.lock:
            self._settle()
            visitor, address = self._used(owner)
            over = (self.visitor_s and visitor >= self.visitor_s, self.address_s and address >= self.address_s)
            if not any(over):
                return
            limit, name = (
                (self.visitor_s, "MIRROR_VISITOR_CPU_S") if over[0] else (self.address_s, "MIRROR_ADDRESS_CPU_S")
            )
            who = "you have" if over[0] else "the visitors at your address have"
            wait = self._wait(owner, over[0])
        raise MirrorError(
            f"{who} used {visitor if over[0] else address:,.0f} CPU seconds of this server in the last hour, and "
            f"{'one visitor' if over[0] else 'one address'} may use {limit:,.0f} ({name}), so {what} cannot start "
            f"now: try again in {max(1, round(wait / 60))} min"
        )

    @contextlib.contextmanager
    def metered(self, owner: Owner, what: str = "this", interactive: bool = False) -> Iterator[Job]:
        """Around one costly job of `owner`: refused at its start past the budget, charged its share at its end.
        `interactive`: someone waits for it (a map, an export): a training run yields to it (explorer.runs.turns)."""
        self.check(owner, what)
        job = Job(owner, what)
        with self.lock:
            self._settle()
            self.running.append(job)
        try:
            with TURNS.interactive() if interactive else contextlib.nullcontext():
                yield job
        finally:
            with self.lock:
                self._settle()
                self.running.remove(job)
                self.spent.append((time.monotonic(), owner, job.seconds))

    # ---------------------------------------------------------------- under self.lock

    def _settle(self) -> None:
        """Charge the running jobs what the process spent since the last call, in equal shares; forget what is
        older than the window."""
        now = self.clock()
        if self.running:
            share = max(0.0, now - self._last) / len(self.running)
            for job in self.running:
                job.seconds += share
        self._last = now
        cutoff = time.monotonic() - WINDOW_S
        while self.spent and self.spent[0][0] < cutoff:
            self.spent.popleft()

    def _used(self, owner: Owner) -> tuple[float, float]:
        rows = [(o, s) for _, o, s in self.spent] + [(j.owner, j.seconds) for j in self.running]
        visitor = sum(s for o, s in rows if o.visitor == owner.visitor)
        address = sum(s for o, s in rows if o.address == owner.address) if owner.address else 0.0
        return visitor, address

    def _wait(self, owner: Owner, by_visitor: bool) -> float:
        """Seconds until the oldest spending that counts against `owner` leaves the window."""
        mine = [
            t for t, o, _ in self.spent if (o.visitor == owner.visitor if by_visitor else o.address == owner.address)
        ]
        return (min(mine) + WINDOW_S - time.monotonic()) if mine else WINDOW_S
