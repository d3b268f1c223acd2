"""Sessions: one folder per browser tab or API client, its strings and the run it serves (the run it is making is
its live run: explorer.runs.live).

A Session lives in Gradio's gr.State (or any caller's hands); its folder is the only place its own files go (another
corpus indexed against the run it serves, exports of a run it opened by link). `SessionStore` makes and removes those
folders: closed sessions and idle ones past the TTL. Each folder is charged to the visitor who made it
(explorer.resources.accounts); none is removed because the disk is full.
"""

from __future__ import annotations

import hashlib
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from explorer.resources.accounts import Owner, write_owner
from explorer.resources.record import RunInfo
from explorer.settings import Settings
from mirror.data import CleanStats
from mirror.pairs import PairStats

RUNS_DIR = "runs"  # <work dir>/runs/<run id>: durable runs (explorer.resources.store), not a session
SWEEP_EVERY_S = 60.0
# A page's events sent before its session reached it share the one made for the first (SessionStore.get): for this
# long (its uploads and plans take seconds; a page that never got its session back makes a new one after), and for at
# most this many pages at once
PENDING_S = 600.0
PENDING_MOST = 4096
EVICT_MIN_IDLE_S = 300.0  # a run used this recently never makes room for its visitor's next one


@dataclass(eq=False)
class Session:
    """One browser (or API client) session: its folder, loaded strings and served run. Lives in gr.State."""

    id: str
    folder: Path
    texts: list[str] = field(default_factory=list)
    # each string's partner text (pairs: mirror.pairs), row for row with `texts`, or None when the strings have none
    partners: list[str | None] | None = None
    pairing: Pairing | None = None  # where the partners came from and what cleaning kept of them
    source: str = ""
    upload: str = ""  # the uploaded file the strings came from, as named on the page ("": pasted, an example, …)
    stats: CleanStats | None = None
    detected_mode: str = "words"
    mode_reason: str = ""
    run: RunInfo | None = None  # the run it serves (its live run, if any: explorer.runs.live.RunRegistry.of)
    run_ids: list[str] = field(default_factory=list)  # the runs this session made
    tuning: Tuning | None = None  # the settings its Launch runs (explorer.tune.planning.Planner.hold); None: not set
    owner: Owner = field(default_factory=Owner)  # the visitor (and address) its folders and runs are charged to
    extra: ExtraCorpus | None = None  # another corpus indexed with the served run's encoders, in this session's folder
    eval_stop: threading.Event = field(default_factory=threading.Event, repr=False)  # Evaluate's Cancel
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __deepcopy__(self, memo: dict) -> Session:  # gradio deep-copies state values; share, don't clone
        return self

    def touch(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / ".last_used").touch()


@dataclass(frozen=True)
class Tuning:
    """The settings a Launch of a session's strings runs, as the server holds them (issue 59): the preset (`mode`:
    "auto", "words" or "sentences"), the base model and every Advanced setting's value as the page shows it
    (`overrides`: plain values by MirrorConfig field name). Held when strings are loaded or a setting changes and at
    Launch; a page reloaded (during or after a run) shows these again, never a preset's defaults."""

    mode: str
    model: str
    overrides: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Pairing:
    """The partners of a session's strings: the columns they pair, why (a detected pairing's note), and the counts."""

    column: str  # the strings' column
    partner_column: str
    stats: PairStats
    note: str | None = None

    def columns(self) -> tuple[str, str]:
        return self.column, self.partner_column


@dataclass(frozen=True)
class ExtraCorpus:
    """Another corpus a session indexed with the encoders of the run it serves: in the session's folder, never the
    run's (whoever opened the run by its link writes nothing into it)."""

    run: Path  # the run folder whose encoders built it: searched only while that run is served
    name: str  # the file's name as the user gave it
    folder: Path  # <session folder>/extra: extra_base/ and extra_tuned/


def texts_key(texts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8", "surrogatepass") + b"\n")
    return h.hexdigest()[:16]


class LiveRuns(Protocol):
    """What the session store asks of the live runs (explorer.runs.live.RunRegistry)."""

    def session_folders(self) -> set[Path]: ...

    def when_idle(self, session: Session, fn: Callable[[], None]) -> None: ...

    def asked(self, session: Session) -> object | None: ...


class SessionStore:
    """Session folders under `settings.work_dir`: made on first use (charged to their owner), removed when closed or
    idle past the TTL.

    `forget(folder)` is called before a folder is removed (the model cache drops that session's loaded runs); the
    folder of a session whose run is live (`registry`) is removed only once that run has ended.
    """

    def __init__(self, settings: Settings, forget: Callable[[Path], None], registry: LiveRuns):
        self.settings = settings
        self.forget = forget
        self.registry = registry
        self._last_sweep = 0.0
        # page -> (when made, the session made for it): see `get`
        self._pending: OrderedDict[str, tuple[float, Session]] = OrderedDict()
        self._pending_lock = threading.Lock()

    def get(self, state: Session | None = None, owner: Owner | None = None, page: str | None = None) -> Session:
        """The caller's session, or a fresh one (with its own folder) when it has none or it expired; `owner`: who
        is asking (a session keeps the first one it learns).

        `page`: which page asks (Gradio's session hash). A page's events sent before any of them returned its session
        (gr.State still None) get the one session made for the first of them (for PENDING_S), not one each: events
        of one page run side by side, and one ending after another sent back a fresh empty session over the session
        an upload had just filled (the page showed the strings loaded; its plan said "Planning the run…" for good
        and Launch found no strings: a model typed, then a file uploaded at once). Only to its own owner."""
        if isinstance(state, Session) and state.folder.is_dir():
            state.touch()
            if owner is not None and state.owner == Owner():
                state.owner = owner
                write_owner(state.folder, owner)
            return state
        self.sweep()
        if not page:
            return self._fresh(owner)
        with self._pending_lock:  # two events of one page at once: one session between them
            now = time.monotonic()
            while self._pending and (
                len(self._pending) > PENDING_MOST or now - next(iter(self._pending.values()))[0] > PENDING_S
            ):
                self._pending.popitem(last=False)
            _, pending = self._pending.get(page, (0.0, None))
            live = pending is not None and pending.folder.is_dir()
            if live and pending.owner == (owner or Owner()):
                pending.touch()
                return pending
            s = self._fresh(owner)
            if not live:  # (another owner's hash: its own session, the page's kept)
                self._pending[page] = (now, s)
            return s

    def _fresh(self, owner: Owner | None) -> Session:
        sid = uuid.uuid4().hex
        s = Session(id=sid, folder=self.settings.work_dir / sid, owner=owner or Owner())
        s.touch()
        write_owner(s.folder, s.owner)
        return s

    def close(self, state: Session | None) -> None:
        """The tab went away (or its state expired): drop the folder now, or when the run it asked for ends."""
        if isinstance(state, Session):
            with self._pending_lock:  # not handed to the page's later events either
                for page in [p for p, (_, pending) in self._pending.items() if pending is state]:
                    del self._pending[page]
            self.registry.when_idle(state, lambda: self.discard(state))

    def discard(self, session: Session) -> None:
        from explorer.resources.models import release_memory

        self.forget(session.folder)
        self.registry.asked(session)  # a Launch click whose run never started: it never will now
        shutil.rmtree(session.folder, ignore_errors=True)
        release_memory(collect=False)  # no gc pass: Gradio calls this on its event loop, once per expired session

    def sweep(self, force: bool = False) -> list[Path]:
        """Delete session folders idle past the TTL (never one with a job running). Runs at most once a minute
        unless forced."""
        from explorer.resources.accounts import last_used

        now = time.time()
        if not force and now - self._last_sweep < SWEEP_EVERY_S:
            return []
        self._last_sweep = now
        removed, busy = [], self.registry.session_folders()
        for folder in self.settings.work_dir.iterdir() if self.settings.work_dir.is_dir() else []:
            if not folder.is_dir() or folder.name == RUNS_DIR or folder.name.startswith(".") or folder in busy:
                continue
            if now - last_used(folder) > self.settings.session_ttl:
                self.forget(folder)
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
        return removed
