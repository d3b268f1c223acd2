"""MirrorApp: the service the web UI (and its API) calls. Plain values in, plain values or events out.

It owns no Gradio and little code: the shared state (settings, sessions, the model cache, the run store, the
training and search slots, the estimator) and one object per concern over it, which app.py and ui/ call:
`app.loader` (explorer.tune.loading: tab 1's strings), `app.planner` (explorer.tune.planning: the plan and estimate),
`app.trainer` (explorer.runs.training: runs), `app.saved` (explorer.runs.saved: kept runs, model zips, blends),
`app.searcher` (explorer.compare.searching: search and evaluate), `app.explore` (explorer.compare.explore: the Explore tab).
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import threading
from pathlib import Path

from explorer.compare.explore import RunExplorer
from explorer.compare.search import BaseIndexes
from explorer.compare.searching import Searcher
from explorer.runs.jobs import FairSlots
from explorer.runs.models import Loaded, ModelCache
from explorer.runs.saved import SavedRuns
from explorer.runs.sessions import (
    EVICT_MIN_IDLE_S,
    RUNS_DIR,
    RunHandle,
    RunInfo,
    Session,
    SessionStore,
    disk_usage,
)
from explorer.runs.store import RunStore
from explorer.runs.training import Trainer
from explorer.settings import Settings
from explorer.tune.estimate import Estimator
from explorer.tune.loading import TextLoader
from explorer.tune.planning import Planner
from mirror.config import BUNDLED_MODEL

log = logging.getLogger("mirror.app")


class MirrorApp:
    """Handlers over `mirror` and `index`, with per-session folders and per-process caches.

    Every public method takes plain values (and a Session) and returns plain values or raises MirrorError;
    long jobs yield events (explorer.events). `app.build_demo` wraps them for Gradio.
    """

    def __init__(self, settings: Settings | None = None):
        self.settings = settings or Settings.from_env()
        self.settings.work_dir.mkdir(parents=True, exist_ok=True)
        self.models = ModelCache(self.settings)
        self.explore = RunExplorer(self)  # the Explore tab: maps, what moved, health, exports, the Hub
        self.sessions = SessionStore(self.settings, self.forget)
        self.runs = RunStore(self.settings.work_dir / RUNS_DIR, self.forget)
        self.in_progress: dict[str, RunHandle] = {}  # run id -> its handle, while it runs (a reload reattaches)
        # run id -> the RunInfo of a run (or blend) served before its general checks, while they run: whoever opens
        # it meanwhile gets this one, which the checks then complete (explorer.runs.training.check_and_package)
        self.checking: dict[str, RunInfo] = {}
        # Training slots, enforced here as well as by the Gradio queue (which makes users wait for one):
        # a caller that bypasses the queue gets a clear "busy" error instead of an extra training.
        self.train_slots = threading.BoundedSemaphore(self.settings.train_concurrency)
        self.search_slots = FairSlots(self.settings.search_concurrency)
        self.base_indexes = BaseIndexes()  # the loaded strings under a base model, searched before any tuning
        # time costs calibrated on this machine: once per process and model, whichever app asks
        self.estimator = Estimator(self.settings.work_dir / ".estimate", shared=True)
        # one object per concern, each over the state above (`app.<part>.<method>`)
        self.loader = TextLoader(self)  # tab 1's strings: files, pasted text, examples, Hub datasets
        self.planner = Planner(self)  # the plan and time estimate before a run
        self.trainer = Trainer(self)  # runs: start, follow, cancel, serve
        self.saved = SavedRuns(self)  # kept runs opened by id, uploaded model zips, blends
        self.searcher = Searcher(self)  # search both encoders, another corpus, gold pair sets

    def __deepcopy__(self, memo: dict) -> MirrorApp:  # never cloned, whatever holds a reference to it
        return self

    @functools.cached_property
    def secret(self) -> str:
        """A key kept in the work folder (made once): what the browser stores about its runs stays readable
        across server restarts, and unreadable to anyone without the key."""
        path = self.settings.work_dir / ".browser-secret"
        try:
            return path.read_text(encoding="utf-8").strip()
        except OSError:
            key = secrets.token_hex(32)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:  # another process of this server made it first
                return path.read_text(encoding="utf-8").strip()
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(key)
            return key

    def forget(self, folder: Path) -> None:
        """Drop what memory holds of the runs under `folder` (removed: a session's, or one run's)."""
        self.models.forget(folder)
        self.explore.forget(folder)

    def session(self, state: Session | None = None) -> Session:
        """The caller's session, or a fresh one when it has none or it expired."""
        return self.sessions.get(state)

    def close_session(self, state: Session | None) -> None:
        """gr.State's delete callback (tab closed, or idle past the TTL); a running job's session goes when it ends."""
        self.sessions.close(state)

    def sweep(self, force: bool = False) -> list[Path]:
        """Remove idle sessions (TTL, disk budget) and old runs (MIRROR_RUN_TTL, disk budget); never one in use."""
        removed = self.sessions.sweep(force)
        if force or removed:
            keep = {h.folder for h in self.in_progress.values() if h.folder is not None}
            keep |= {Path(k) for k in self.models.runs}  # in memory: being served
            s = self.settings
            removed += self.runs.sweep(s.run_ttl, s.disk_bytes, keep, min_idle=EVICT_MIN_IDLE_S)
        return removed

    def check_disk(self, session: Session) -> None:
        """Before a job writes: the session's budget (its folder and its runs), then the global sweep."""
        held = sum(disk_usage(self.runs.root / run_id) for run_id in session.run_ids)
        self.sessions.check_disk(session, held)
        self.sweep(force=True)

    def warm_up(self) -> None:
        """Ahead of the first request (a thread at server start): the bundled model, the base side of the forgetting
        check and UMAP's compiled kernels (tens of seconds of CPU on a cold numba cache). Failures are only logged."""
        self.models.warm_up()
        if not self.settings.warm_up:
            return
        try:
            import explorer.compare.forgetting as forgetting
            import explorer.compare.maps as maps
            import index.store  # noqa: F401  faiss and its loader: 0.1-0.4 s the first run's base index paid

            checks_s = None
            if self.settings.general_checks:
                checks_s = forgetting.warm_up(self.models.base_encoder(BUNDLED_MODEL))
            self.planner.warm_up(checks_s)
            maps.warm_up()
        except Exception:
            log.exception("warm-up of the forgetting check, the estimate or the maps failed; the first request will")

    def check_model(self, model: str) -> str:
        return self.models.check_model(model)

    def base_encoder(self, model: str, pooling: str = "auto"):
        return self.models.base_encoder(model, pooling)

    def loaded(self, run: RunInfo) -> Loaded:
        return self.models.loaded(run)
