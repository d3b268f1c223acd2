"""CPU accounts: the compute each visitor (and each address) spent on this server in the last hour, and a refusal
past its budget, the way disk is bounded (explorer.resources.accounts).

Every costly job a visitor asks for (a training run with its checks, a blend, a model upload, a map's layout, an
export, an evaluation) runs `metered(owner, what)`: refused at its start when the visitor or its address has spent
its budget in the last hour (MIRROR_VISITOR_CPU_S, MIRROR_ADDRESS_CPU_S), and charged what it spent as it goes.

What a job spent (issue 58: a victim's run was charged 25 s instead of 9 s while a stranger's unmetered searches ran,
when the process's CPU was split equally among the metered jobs): each job's own threads' CPU time (Linux
/proc/self/task/<tid>/schedstat, in nanoseconds: the thread that runs it, and any thread it starts that works for it,
`working_for`), and of the rest of the process's CPU (the torch and OpenMP worker threads, which work for whichever
thread opened their parallel region) a share in proportion to those own times: an OpenMP master thread does its
share of each parallel region's work, so its time is the measure of the pool's work for it. Where threads cannot be
read (not Linux) the rest is split equally, as before.

The server's own work for a request (Gradio's queue and event stream, the answer's file put in its cache, a file
served; issue 58: a stranger's one-row exports pushed a victim's charge to 1.19x its run alone) is not part of that
rest: the web layer (ui.web.tabs) opens a `Tab` for each request and each event it serves, `serving(owner)`, and
charges it the CPU time of every stretch of server work done for it (`charged_call`: an event-loop callback, a call
in a worker thread), less what metered jobs on that thread were charged. The threads that serve requests are server
threads (`server_thread`): their time outside a tab is nobody's, never the running jobs' rest.

`MIRROR_LOG_CPU=1` (for benches and tests: bench/bench_cpu_server.py and tests/test_abuse_cpu_server.py read it from
a real server's log) logs each metered job as it ends: what, whose (a hash of the visitor), the CPU seconds charged,
its wall time, how long background runs paused for interactive work meanwhile, and for a run its own turns (waited,
worked: explorer.resources.turns); and each tab that was charged anything ("server work for a request"). Read only:
nothing is charged or refused differently.
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
from typing import Any, TypeVar

from explorer.resources.accounts import Owner
from explorer.resources.turns import TURNS
from mirror.errors import MirrorError

WINDOW_S = 3600.0
BUCKET_S = 10.0  # what one owner spends within this many seconds is kept as one record (a flood of requests: a few)
T = TypeVar("T")
log = logging.getLogger("mirror.cpu")


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_SCHEDSTAT = os.path.exists("/proc/self/schedstat")  # a thread's time on the CPU in nanoseconds (CONFIG_SCHED_INFO)


def thread_cpu(tid: int) -> float | None:
    """CPU seconds this process's thread `tid` has run so far, or None where it cannot be read: its schedstat (the
    nanoseconds the kernel's process clock, time.process_time, adds up too), else its stat's user + system ticks
    (10 ms each: a sum over many threads and short intervals is off by that much per thread and interval)."""
    try:
        if _SCHEDSTAT:
            with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
                return int(f.read().split()[0]) / 1e9
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

    def own(self, reading: dict[int, float | None] | None = None) -> float:
        """Its threads' CPU time since last read (a thread gone counts no more); `reading`: those times read once
        for every job (a thread's own read, else)."""
        spent = 0.0
        for tid, before in list(self.threads.items()):
            now = reading[tid] if reading is not None and tid in reading else self.reader(tid)
            if now is None:
                del self.threads[tid]
                continue
            spent += max(0.0, now - before)
            self.threads[tid] = now
        return spent


@dataclass(eq=False)
class Tab:
    """The server's own work for one request or event of `owner` (ui.web.tabs): the CPU seconds charged to it so
    far. Once closed it takes nothing more (a task the request left behind works for nobody)."""

    owner: Owner
    what: str
    accounts: CpuAccounts | None = field(default=None, repr=False)
    seconds: float = 0.0
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, seconds: float) -> None:
        with self.lock:
            if not self.closed:
                self.seconds += seconds


_CURRENT: contextvars.ContextVar[Job | None] = contextvars.ContextVar("mirror_cpu_job", default=None)
_TAB: contextvars.ContextVar[Tab | None] = contextvars.ContextVar("mirror_cpu_tab", default=None)
# per thread: the CPU time (time.thread_time) its metered jobs took (`jobs`), how deep it is in them, and when the
# stretch of server work being measured on it began (`stretch`, None outside one)
_HERE = threading.local()


def current_job() -> Job | None:
    """The metered job this thread's work is charged to (None outside one): hand it to a thread the job starts."""
    return _CURRENT.get()


def current_tab() -> Tab | None:
    """The open tab the server's work in this context is charged to (None outside a request, or once it ended)."""
    tab = _TAB.get()
    return tab if tab is not None and not tab.closed else None


def tab_in(context: contextvars.Context | None) -> Tab | None:
    """The open tab of `context` (an asyncio callback's), if any."""
    tab = context.get(_TAB) if context is not None else None
    return tab if tab is not None and not tab.closed else None


def charged_call(tab: Tab, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on this thread, its CPU time charged to `tab` less what metered jobs on this thread were charged
    meanwhile (an export's own work is the export's); this thread is a server thread from now on. A call within one
    is charged once, by the outer; a tab closed during the call is charged up to its close (`serving`)."""
    if getattr(_HERE, "stretch", None) is not None or tab.closed:
        return fn(*args)
    if tab.accounts is not None:
        tab.accounts.server_thread()
    jobs = getattr(_HERE, "jobs", 0.0)
    start = _HERE.stretch = time.thread_time()
    try:
        return fn(*args)
    finally:
        _HERE.stretch = None
        tab.add(time.thread_time() - start - (getattr(_HERE, "jobs", 0.0) - jobs))


def callback_call(context: contextvars.Context | None, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)`, an event-loop callback run in `context`: charged to the context's open tab (`charged_call`), or
    if the callback opens one (a request's first step, up to the request's last when it ends in the same step), to
    that one; else to nobody."""
    tab = tab_in(context)
    if tab is not None:
        return charged_call(tab, fn, *args)
    if getattr(_HERE, "stretch", None) is not None:
        return fn(*args)
    start = _HERE.stretch = time.thread_time()
    try:
        return fn(*args)
    finally:
        _HERE.stretch = None
        tab = tab_in(context)
        if tab is not None:
            tab.add(time.thread_time() - start)


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
    spent: collections.deque[list] = field(default_factory=collections.deque)  # [when, who, seconds]
    running: list[Job] = field(default_factory=list)
    tabs: set[Tab] = field(default_factory=set)  # open: requests and events being served
    lock: threading.Lock = field(default_factory=threading.Lock)
    _last: float = 0.0  # the CPU clock when the running jobs were last charged
    _owed: float = 0.0  # the rest found below nothing at the last charge (clocks read a moment apart): taken next
    _latest: dict[Owner, list] = field(default_factory=dict)  # each owner's newest record in `spent`
    _server: dict[int, float] = field(default_factory=dict)  # server threads: their CPU time when last charged
    log_jobs: bool = field(default_factory=lambda: os.environ.get("MIRROR_LOG_CPU", "").strip() == "1")

    def used(self, owner: Owner) -> tuple[float, float]:
        """(the visitor's, its address's) CPU seconds in the last hour, the jobs running now included."""
        with self.lock:
            self._settle()
            return self._used(owner)

    def spending(self, job: Job, owner: Owner) -> tuple[float, float]:
        """(CPU seconds `job` was charged so far, `left(owner)`)."""
        with self.lock:
            self._settle()
            return job.seconds, self._left(owner)

    def left(self, owner: Owner) -> float:
        """What `owner` and its address have left of their hour's budget (the less of the two; inf without one)."""
        with self.lock:
            self._settle()
            return self._left(owner)

    def _left(self, owner: Owner) -> float:
        visitor, address = self._used(owner)
        return min(
            self.visitor_s - visitor if self.visitor_s else float("inf"),
            self.address_s - address if self.address_s and owner.address else float("inf"),
        )

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
        depth = getattr(_HERE, "depth", 0)
        _HERE.depth, here = depth + 1, time.thread_time()
        try:
            with TURNS.interactive() if interactive else contextlib.nullcontext(), working_for(job):
                yield job
        finally:
            with self.lock:
                self._settle()
                self.running.remove(job)
                self._spend(owner, job.seconds)
            _HERE.depth = depth
            if depth == 0:  # this thread's time in it is the job's, not the tab's of a request it serves
                _HERE.jobs = getattr(_HERE, "jobs", 0.0) + time.thread_time() - here
            if self.log_jobs:
                turns = TURNS.record()
                log.info(
                    "cpu job: %s | visitor %s | charged %.3f s | wall %.3f s | runs paused %.3f s%s",
                    what,
                    _hashed(owner),
                    job.seconds,
                    time.monotonic() - started,
                    TURNS.paused_s - paused,
                    f" | its turns: waited {turns[0]:.3f} s, worked {turns[1]:.3f} s" if turns else "",
                )

    @contextlib.contextmanager
    def serving(self, owner: Owner, what: str = "a request") -> Iterator[Tab]:
        """Around the server's own work for one request or event of `owner` (ui.web.tabs opens one for each): what
        the server's threads spend for it (`charged_call`) is charged to `owner` as it goes; never refused (the page
        must load to say why a job is). The calling thread is a server thread."""
        tab = Tab(owner, what, accounts=self)
        self.server_thread()
        with self.lock:
            self.tabs.add(tab)
        token, started = _TAB.set(tab), time.monotonic()
        try:
            yield tab
        finally:
            _TAB.reset(token)
            stretch = getattr(_HERE, "stretch", None)
            if stretch is not None:  # closed within a measured stretch (the request's last step): that much of it
                tab.add(time.thread_time() - stretch)
            with tab.lock:
                tab.closed = True
            with self.lock:
                self.tabs.discard(tab)
                self._spend(owner, tab.seconds)
            if self.log_jobs and tab.seconds > 0:
                log.info(
                    "cpu job: server work for %s | visitor %s | charged %.3f s | wall %.3f s | runs paused 0 s",
                    what,
                    _hashed(owner),
                    tab.seconds,
                    time.monotonic() - started,
                )

    def server_thread(self) -> None:
        """The calling thread serves requests (the event loop, a worker thread): its time is a tab's or nobody's,
        never part of the rest the running jobs share."""
        tid = threading.get_native_id()
        if tid not in self._server:
            with self.lock:
                self._server.setdefault(tid, time.thread_time())

    # ---------------------------------------------------------------- under self.lock

    def _settle(self) -> None:
        """Charge the running jobs what the process spent since the last call: each its own threads' time and its
        share of the rest, in proportion to those (equal shares where no thread's time is known); the server
        threads' time is not in that rest (a tab's, or nobody's). Forget what is older than the window."""
        now = self.clock()
        server = self._server
        if server:  # a server thread that ended is forgotten (its number may come back as another thread's)
            alive = {t.native_id for t in threading.enumerate()}
            for tid in [tid for tid in server if tid not in alive]:
                del server[tid]
        ours = {tid for job in self.running for tid in job.threads}
        reading = {tid: self.threads(tid) for tid in ours | server.keys()}
        if self.running:
            own = {id(job): job.own(reading) for job in self.running}
            mine = sum(own.values())
            served = sum(
                reading[tid] - before  # type: ignore[operator]
                for tid, before in server.items()
                if tid not in ours and reading[tid] is not None
            )
            rest = now - self._last - mine - served + self._owed
            self._owed = max(-1.0, min(0.0, rest))
            rest = max(0.0, rest)
            for job in self.running:
                share = rest * own[id(job)] / mine if mine > 0 else rest / len(self.running)
                job.seconds += own[id(job)] + share
        else:
            self._owed = 0.0
        for tid in server:
            if reading[tid] is not None:
                server[tid] = reading[tid]  # type: ignore[assignment]
        self._last = now
        cutoff = time.monotonic() - WINDOW_S
        while self.spent and self.spent[0][0] < cutoff:
            record = self.spent.popleft()
            if self._latest.get(record[1]) is record:
                del self._latest[record[1]]

    def _spend(self, owner: Owner, seconds: float) -> None:
        """`owner` spent `seconds` now: added to its newest record when that is under BUCKET_S old."""
        if seconds <= 0:
            return
        now = time.monotonic()
        record = self._latest.get(owner)
        if record is not None and now - record[0] < BUCKET_S:
            record[2] += seconds
            return
        record = [now, owner, seconds]
        self.spent.append(record)
        self._latest[owner] = record

    def _used(self, owner: Owner) -> tuple[float, float]:
        rows = [(o, s) for _, o, s in self.spent]
        rows += [(j.owner, j.seconds) for j in self.running] + [(t.owner, t.seconds) for t in self.tabs]
        visitor = sum(s for o, s in rows if o.visitor == owner.visitor)
        address = sum(s for o, s in rows if o.address == owner.address) if owner.address else 0.0
        return visitor, address

    def _wait(self, owner: Owner, by_visitor: bool) -> float:
        """Seconds until the oldest spending that counts against `owner` leaves the window."""
        mine = [
            t for t, o, _ in self.spent if (o.visitor == owner.visitor if by_visitor else o.address == owner.address)
        ]
        return (min(mine) + WINDOW_S - time.monotonic()) if mine else WINDOW_S


def _hashed(owner: Owner) -> str:
    return hashlib.sha256(owner.visitor.encode()).hexdigest()[:12]
