"""Live runs: one `Run` per run, from the moment it is asked for to its end, whoever asked (the page's Launch, an API
call, a blend, a model zip), and the one registry of them (`RunRegistry`).

A run's status is one field of its Run: queued (asked for, or waiting for a training slot), running (it holds one),
checking (served: its general checks and downloads follow), then done, failed or cancelled. It changes in this
module only (the queue admits a run, the run is served, its last event ends it); the page, the API and a reattached
tab read it here, and nothing keeps a copy. A run is stopped by one call, `Run.stop(reason)`: the first reason is
kept on the run and, on ZeroGPU, where its job runs in a worker process (explorer.runs.jobs.train_job), carried to
that job as a STOP file in its folder. Every kind of run honours it between
its phases (`Run.checkpoint`, `Run.emit`) and at the latest just before it is served (`Run.commit`): it then ends
Cancelled, nothing of it served. Its events are kept for whoever follows it later (a reattached tab); heartbeats
(Tick) are not: they only wake its followers.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.events import Cancelled, Done, Failed, Served, Tick

if TYPE_CHECKING:
    from explorer.resources.record import RunInfo
    from explorer.resources.sessions import Session

log = logging.getLogger("mirror.app")
STOP_FILE = "STOP"
FIRST_FILE = "FIRST"  # a second training is asked to stop and serve the first (explorer.runs.training)


END_KINDS = frozenset({"done", "cancelled", "error"})  # a run's last event: Done, Cancelled or Failed


class Status(str, enum.Enum):
    """Where a run is in its life; the first three are live."""

    QUEUED = "queued"
    RUNNING = "running"
    CHECKING = "checking"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def live(self) -> bool:
        return self in (Status.QUEUED, Status.RUNNING, Status.CHECKING)


ENDS = {Done: Status.DONE, Failed: Status.FAILED, Cancelled: Status.CANCELLED}  # a run's last event, its status


class StopAsked(Exception):
    """Raised in a run's thread where it honours a stop asked meanwhile (`Run.checkpoint`, `Run.emit`, `Run.commit`):
    its runner ends it Cancelled, nothing of it served (explorer.runs.execute)."""


def write_stop(folder: Path, why: str) -> None:
    """The STOP file a job in `folder` reads between two steps (`Run.stop` writes it; the first reason is kept)."""
    with contextlib.suppress(OSError):  # the run just ended and removed its folder
        with open(folder / STOP_FILE, "x", encoding="utf-8") as f:
            f.write(why)


def queue_key(session: Session | None) -> str:
    """Who holds a place in the training queue: the session's visitor, or the session itself when nobody said."""
    if session is None:
        return "nobody"
    return session.owner.visitor or f"session:{session.id}"


@dataclass(eq=False)
class Run:
    """One run: its id (128 random bits: holding it gives access), its status, its events so far, why it was asked
    to stop, and once it is served its RunInfo. It goes on in a thread of its own (explorer.runs.execute); any number
    of consumers `follow` it (the page that launched it, the same page after a reload, an API client)."""

    session: Session | None = None  # the session that asked for it (it serves the run, and pays for its disk)
    kind: str = "run"  # "run", "blend", "upload": the kind of run (explorer.runs.execute.Producer)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    status: Status = Status.QUEUED
    folder: Path | None = None  # its run folder, once it has one
    info: RunInfo | None = None  # once served
    events: list[Any] = field(default_factory=list)
    stop_reason: str = ""  # why it was asked to stop ("cancel", "time", "abandoned"); "" when it was not
    strings: tuple[int, str] = (0, "")  # how many strings it tunes, and where they came from
    texts: tuple[str, ...] = ()  # the strings themselves: a page reattached to the run gets them back at its end
    partners: tuple[str | None, ...] | None = None  # a pairs run's partners (and their columns), back with them
    pair_columns: tuple[str, str] | None = None
    # (Estimate, MirrorConfig, notes) of a training run once it has its slot: the plan it runs, which a page
    # reattached to it shows again (a reload mid-run lost the plan the page had shown: steps, time, held-out rows)
    planned: tuple[Any, Any, tuple[str, ...]] | None = None
    sessions: set[str] = field(default_factory=set)  # the sessions showing it (each can cancel it)
    last_seen: float = field(default_factory=time.monotonic)  # when a consumer last asked for events
    asked_at: float = field(default_factory=time.monotonic)  # when it was asked for (a Launch click, an API call)
    slot_at: float | None = None  # when it got its slot (explorer.runs.execute): the wait between, said when long
    job_since: float | None = None  # when its folder was made: MIRROR_MAX_RUN_SECONDS counts from there (every kind)
    ended: bool = False  # its last event is out and its thread is done
    watcher: Callable[[Run], None] | None = field(default=None, repr=False)  # its runner's watch (abandoned, overdue)
    # while it holds its slot, its runner's answer to "may it go on this many seconds more?": None, or why not (its
    # time cap, its visitor's CPU budget: explorer.runs.execute.Runner.room); a pairs run's second training asks
    room: Callable[[float], str | None] | None = field(default=None, repr=False)
    _committed: bool = field(default=False, repr=False)  # about to be served: past stopping
    _beats: int = field(default=0, repr=False)  # heartbeats so far (not kept: they wake its followers)
    _stop_file: Path | None = field(default=None, repr=False)
    _ending: bool = field(default=False, repr=False)
    _on_end: list[Callable[[], None]] = field(default_factory=list, repr=False)
    _cond: threading.Condition = field(default_factory=threading.Condition, repr=False)

    def __post_init__(self) -> None:
        if self.session is not None:
            self.sessions.add(self.session.id)

    @property
    def who(self) -> str:
        return queue_key(self.session)

    @property
    def address(self) -> str:
        return self.session.owner.address if self.session is not None else ""

    @property
    def checking(self) -> bool:
        """Served, its general checks and downloads still to come: a stop comes too late."""
        return self.status is Status.CHECKING

    @property
    def stopping(self) -> bool:
        return bool(self.stop_reason)

    # ---------------------------------------------------------------- its status: the only writers

    def stop(self, reason: str = "cancel") -> bool:
        """Ask the run to stop, before it starts, between two training steps or two of its phases: the one way a run
        is stopped. The first reason is kept, and carried to its job's STOP file when it has one. False when it is
        past stopping: being served (`commit`), served already (its checks run), or ended."""
        with self._cond:
            if self._committed or self.status not in (Status.QUEUED, Status.RUNNING):
                return False
            if not self.stop_reason:
                self.stop_reason = reason
                if self._stop_file is not None:
                    write_stop(self._stop_file.parent, reason)
            self._cond.notify_all()
            return True

    def begins(self, folder: Path) -> None:
        """Its folder is made (explorer.runs.execute, for every kind: a training, a model upload, a blend): what it
        makes goes there, and the wall-clock cap (MIRROR_MAX_RUN_SECONDS, `overdue`) counts from now."""
        with self._cond:
            self.folder, self.job_since = folder, time.monotonic()

    def job_starts(self, folder: Path) -> None:
        """Its job starts in another process (ZeroGPU: explorer.runs.jobs.train_job), reading its stop from a STOP
        file in `folder`: a stop asked before is written there now, a later one when it is asked."""
        with self._cond:
            self._stop_file = folder / STOP_FILE
            if self.stop_reason:
                write_stop(folder, self.stop_reason)

    def admit(self) -> None:
        """It holds a training slot now (explorer.runs.jobs.TrainQueue)."""
        with self._cond:
            if self.status is Status.QUEUED:
                self.status = Status.RUNNING
                self._cond.notify_all()

    def commit(self) -> None:
        """It is about to be served: past stopping from now on (a later `stop` answers False). Raises StopAsked when
        a stop was asked before: then nothing of it is served."""
        with self._cond:
            if self.stop_reason:
                raise StopAsked(self.stop_reason)
            self._committed = True

    def serving(self, info: RunInfo) -> None:
        """Its model is served from now on, before its general checks: whoever opens the run meanwhile gets `info`,
        which the checks then complete."""
        with self._cond:
            self.info, self.status = info, Status.CHECKING
            info.live = self
            self._cond.notify_all()

    def publish(self, event: Any) -> None:
        """One more event for its consumers; its last (Done, Failed, Cancelled) ends its status. A heartbeat (Tick)
        is not kept: it wakes its followers, who send one on."""
        with self._cond:
            if isinstance(event, Tick):
                self._beats += 1
                self._cond.notify_all()
                return
            if type(event) in ENDS:
                self.status = ENDS[type(event)]
            if isinstance(event, Served | Done):
                self.info = event.run
            self.events.append(event)
            self._cond.notify_all()

    def emit(self, event: Any, stops: bool = True) -> None:
        """An event from within one of its phases (an index being built), out to its followers as it comes; then
        the run is watched (abandoned, over its time) and a stop asked meanwhile is honoured here (StopAsked).
        `stops` False: from a job that honours a stop itself (a training reads `stopping` between its steps, and
        ends with what it did so far), or from the runner's own phases: watched, never raised."""
        self.publish(event)
        if stops:
            self.checkpoint()
        elif self.watcher is not None:
            self.watcher(self)

    def checkpoint(self) -> None:
        """Between two of its phases: its runner watches it (`watcher`), then StopAsked when a stop was asked."""
        if self.watcher is not None:
            self.watcher(self)
        if self.stopping:
            raise StopAsked(self.stop_reason)

    def end(self) -> None:
        """Its thread is done: what waited for its end runs (a closed tab's session folder goes), then its
        consumers see the end."""
        with self._cond:
            if self.status.live:  # a thread that ended without its last event: a bug, said as a failure
                self.events.append(Failed("the run ended without a result; the previous model stays served"))
                self.status = Status.FAILED
            self._ending = True
            waiting, self._on_end = self._on_end, []
            if self.info is not None and self.info.live is self:
                self.info.live = None  # a served run outlives its Run (and the session and strings it holds)
        for fn in waiting:
            try:
                fn()
            except Exception:
                log.exception("cleaning up after a run failed")
        with self._cond:
            self.ended = True
            self._cond.notify_all()

    def on_end(self, fn: Callable[[], None]) -> None:
        """Call `fn` once the run has ended (now, when it has)."""
        with self._cond:
            if not self._ending:
                self._on_end.append(fn)
                return
        fn()

    # ---------------------------------------------------------------- its consumers

    def follow(self, since: int = 0) -> Iterator[Any]:
        """The run's events from number `since` on, as they come, until its last; a Tick when nothing new came for
        half a second once it has begun, or when the run sent a heartbeat (a consumer can redraw, or stop), and one
        right after its first events (those kept so far: a reattached consumer draws once it has caught up). Asking
        keeps the run alive: nobody asking for ABANDONED_S stops it (explorer.runs.execute)."""
        i, beats, caught_up, over = since, self._beats, False, False
        while True:
            with self._cond:
                self.last_seen = time.monotonic()
                if i >= len(self.events) and not self.ended and self._beats == beats:
                    self._cond.wait(0.5)
                batch, done, beat = self.events[i:], self.ended, self._beats != beats
                i, beats = i + len(batch), self._beats
            yield from batch
            if done and not batch:
                return
            # an end event (Done, Cancelled, Failed) is the last a consumer sees, even before the run calls end():
            # a caught-up Tick after it raced the end (a refused setting's [Failed, Tick], seen in a suite)
            over = over or any(e.kind in END_KINDS for e in batch)
            if over:
                continue
            if (not batch and (i > 0 or beat)) or (batch and not caught_up and not done):
                caught_up = caught_up or bool(batch)
                yield Tick()  # nothing new; or, after its first events, caught up with what the run kept

    def unwatched_for(self) -> float:
        """Seconds since a consumer last asked for its events."""
        return time.monotonic() - self.last_seen

    def overdue(self, limit: float | None) -> bool:
        """It has run for more than `limit` seconds since its folder was made (`begins`; None or 0: no limit)."""
        return bool(limit) and self.job_since is not None and time.monotonic() - self.job_since > limit

    @staticmethod
    def refused(text: str) -> Run:
        """A run that ended before it began, with `text` as its Failed event (registered nowhere)."""
        run = Run()
        run.publish(Failed(text))
        run.end()
        return run


class RunRegistry:
    """The live runs of this process, by id, and the run each session has asked for (Launch clicked, not started
    yet). A run is live from `begin` to `end`; a session has at most one going (it shows it, it may cancel it)."""

    def __init__(self) -> None:
        self._live: dict[str, Run] = {}
        self._asked: dict[str, Run] = {}  # session id -> the run its Launch click made, until it starts
        self._lock = threading.Lock()

    def ask(self, session: Session) -> Run:
        """Launch was clicked: the session's run exists (an id the browser keeps, cancellable) before it starts; the
        run it has going when it has one."""
        with self._lock:
            going = self._going(session)
            if going is not None:
                return going
            run = self._asked[session.id] = Run(session)
            return run

    def asked(self, session: Session) -> Run | None:
        """The run the session's Launch click made, taken to be started (None when there is none)."""
        with self._lock:
            return self._asked.pop(session.id, None)

    def begin(self, run: Run) -> bool:
        """`run` starts: live from now until `end`. False (and nothing registered) when its session has a run going."""
        with self._lock:
            if run.session is not None:
                if self._going(run.session) is not None:
                    return False
                if self._asked.get(run.session.id) is run:
                    del self._asked[run.session.id]
            self._live[run.id] = run
            return True

    def end(self, run: Run) -> None:
        with self._lock:
            self._live.pop(run.id, None)

    def attach(self, run: Run, session: Session) -> None:
        """`session` shows `run` too (a reloaded page reattached to it): it can cancel it, and is busy meanwhile."""
        with run._cond:
            run.sessions.add(session.id)

    def get(self, run_id: str | None) -> Run | None:
        """The live run with this id, or None."""
        with self._lock:
            return self._live.get(run_id) if isinstance(run_id, str) else None

    def of(self, session: Session) -> Run | None:
        """The run the session shows: its live run, else the one its Launch click asked for; None when idle."""
        with self._lock:
            going = self._going(session)
            asked = self._asked.get(session.id)
            return going or (asked if asked is not None and asked.status.live else None)

    def going(self, session: Session) -> Run | None:
        """The live run the session shows (it has one going: a second is refused)."""
        with self._lock:
            return self._going(session)

    def _going(self, session: Session) -> Run | None:
        return next((r for r in self._live.values() if session.id in r.sessions and r.status.live), None)

    def served(self, run_id: str) -> RunInfo | None:
        """The RunInfo of a live run served before its checks: whoever opens it meanwhile gets that one."""
        run = self.get(run_id)
        return run.info if run is not None and run.checking else None

    def runs(self) -> list[Run]:
        """The live runs, in the order they began."""
        with self._lock:
            return list(self._live.values())

    def folders(self) -> set[Path]:
        """The run folders live runs write (never swept, never removed to make room)."""
        return {r.folder for r in self.runs() if r.folder is not None}

    def session_folders(self) -> set[Path]:
        """The folders of the sessions that asked for a live run (kept until it ends, even when closed or idle)."""
        return {r.session.folder for r in self.runs() if r.session is not None}

    def when_idle(self, session: Session, fn: Callable[[], None]) -> None:
        """Call `fn` once no run the session asked for is live: now, or when its run ends."""
        run = next((r for r in self.runs() if r.session is session), None)
        if run is None:
            fn()
        else:
            run.on_end(fn)
