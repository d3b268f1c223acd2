"""CPU accounts: the compute each visitor (and each address) spent on this server in the last hour, and a refusal
past its budget, the way disk is bounded (explorer.resources.accounts).

Every costly job a visitor asks for (a training run with its checks, a blend, a model upload, a map's layout, an
export, an evaluation) runs `metered(owner, what)`: refused at its start when the visitor or its address has spent
its budget in the last hour (MIRROR_VISITOR_CPU_S, MIRROR_ADDRESS_CPU_S), and charged what it spent as it goes.

What a job spent (issue 58: a victim's run was charged 25 s instead of 9 s while a stranger's unmetered searches ran,
when the process's CPU was split equally among the metered jobs): each job's own threads' CPU time (Linux
/proc/self/task/<tid>/stat: the thread that runs it, and the training thread it starts, `working_for`), and of the
rest of the process's CPU (the torch and OpenMP worker threads, which work for whichever thread opened their parallel
region, and the server's own threads) a share in proportion to those own times: an OpenMP master thread does its
share of each parallel region's work, so its time is the measure of the pool's work for it. Where threads cannot be
read (not Linux) the rest is split equally, as before.

`MIRROR_LOG_CPU=1` (for benches: bench/bench_cpu_server.py reads it from a real server's log) logs each metered job
as it ends: what, whose (a hash of the visitor), the CPU seconds charged, its wall time and how long background runs
paused for interactive work meanwhile. Read only: nothing is charged or refused differently.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from explorer.resources.accounts import Owner
from explorer.resources.turns import TURNS
from mirror.errors import MirrorError

WINDOW_S = 3600.0
log = logging.getLogger("mirror.cpu")


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def thread_cpu(tid: int) -> float | None:
    """CPU seconds (user + system) of this process's thread `tid` so far, or None where it cannot be read."""
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return None


@dataclass(eq=False)
class Job:
    """One metered job: whose, the CPU seconds charged to it so far, and its threads (native ids) with their CPU
    time when last read."""

    owner: Owner
    what: str
    seconds: float = 0.0
    threads: dict[int, float] = field(default_factory=dict)
    reader: Callable[[int], float | None] = thread_cpu

    def join(self, tid: int) -> None:
        """Count thread `tid`'s CPU time from now as this job's own."""
        if tid not in self.threads:
            now = self.reader(tid)
            if now is not None:
                self.threads[tid] = now

    def own(self) -> float:
        """Its threads' CPU time since last read (a thread gone counts no more)."""
        spent = 0.0
        for tid, before in list(self.threads.items()):
            now = self.reader(tid)
            if now is None:
                del self.threads[tid]
                continue
            spent += max(0.0, now - before)
            self.threads[tid] = now
        return spent


_CURRENT: contextvars.ContextVar[Job | None] = contextvars.ContextVar("mirror_cpu_job", default=None)


def current_job() -> Job | None:
    """The metered job this thread's work is charged to (None outside one): hand it to a thread the job starts."""
    return _CURRENT.get()


@contextlib.contextmanager
def working_for(job: Job | None) -> Iterator[None]:
    """This thread works for `job` until the block ends (its CPU time is the job's own)."""
    if job is None:
        yield
        return
    tid = threading.get_native_id()
    job.join(tid)
    token = _CURRENT.set(job)
    try:
        yield
    finally:
        _CURRENT.reset(token)


@dataclass
class CpuAccounts:
    """Per-visitor and per-address CPU seconds over the last hour, within `visitor_s` and `address_s` (0: no limit).
    `clock` is the process's CPU seconds (time.process_time: every thread of the server), `threads` one thread's
    (None: unknown, and the jobs share the process's time equally)."""

    visitor_s: float
    address_s: float
    clock: Callable[[], float] = time.process_time
    threads: Callable[[int], float | None] = thread_cpu
    spent: collections.deque[tuple[float, Owner, float]] = field(default_factory=collections.deque)  # when, who, s
    running: list[Job] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _last: float = 0.0  # the CPU clock when the running jobs were last charged
    log_jobs: bool = field(default_factory=lambda: os.environ.get("MIRROR_LOG_CPU", "").strip() == "1")

    def used(self, owner: Owner) -> tuple[float, float]:
        """(the visitor's, its address's) CPU seconds in the last hour, the jobs running now included."""
        with self.lock:
            self._settle()
            return self._used(owner)

    def over(self, owner: Owner) -> bool:
        """Whether `owner` (or its address) has spent its hour's budget: a run past it is stopped where it stands
        (explorer.runs.execute.Runner.watch), not only refused at its start."""
        with self.lock:
            self._settle()
            visitor, address = self._used(owner)
        return bool((self.visitor_s and visitor >= self.visitor_s) or (self.address_s and address >= self.address_s))

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
    def metered(
        self, owner: Owner, what: str = "this", interactive: bool = False, refuse: bool = True
    ) -> Iterator[Job]:
        """Around one costly job of `owner`: refused at its start past the budget, charged its share as it goes.
        `interactive`: someone waits for it (a map, an export): a training run yields to it (explorer.resources.turns).
        `refuse` False: charged, never refused (a search: what a visitor does most, bounded by its slots; charged so
        that what it spends is its visitor's, not the share of whoever's run is going)."""
        if refuse:
            self.check(owner, what)
        job = Job(owner, what, reader=self.threads)
        with self.lock:
            self._settle()
            self.running.append(job)
            job.join(threading.get_native_id())
        started, paused = time.monotonic(), TURNS.paused_s
        try:
            with TURNS.interactive() if interactive else contextlib.nullcontext(), working_for(job):
                yield job
        finally:
            with self.lock:
                self._settle()
                self.running.remove(job)
                self.spent.append((time.monotonic(), owner, job.seconds))
            if self.log_jobs:
                log.info(
                    "cpu job: %s | visitor %s | charged %.3f s | wall %.3f s | runs paused %.3f s",
                    what,
                    hashlib.sha256(owner.visitor.encode()).hexdigest()[:12],
                    job.seconds,
                    time.monotonic() - started,
                    TURNS.paused_s - paused,
                )

    # ---------------------------------------------------------------- under self.lock

    def _settle(self) -> None:
        """Charge the running jobs what the process spent since the last call: each its own threads' time and its
        share of the rest, in proportion to those (equal shares where no thread's time is known); forget what is
        older than the window."""
        now = self.clock()
        if self.running:
            own = {id(job): job.own() for job in self.running}
            mine = sum(own.values())
            rest = max(0.0, now - self._last - mine)
            for job in self.running:
                share = rest * own[id(job)] / mine if mine > 0 else rest / len(self.running)
                job.seconds += own[id(job)] + share
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
