"""MirrorApp: the service the web UI (and its API) calls. Plain values in, plain values or events out.

It owns no Gradio and little code: the shared state (settings, sessions, the model cache, the run store, the
training and search slots, the disk and CPU accounts, the estimator) and one object per concern over it, which app.py and ui/ call:
`app.loader` (explorer.tune.loading: tab 1's strings), `app.planner` (explorer.tune.planning: the plan and estimate),
`app.registry` (explorer.runs.live: the live runs, each with its one status), `app.runner` (explorer.runs.execute:
every kind of run, one path), `app.trainer` (explorer.runs.training: training runs), `app.saved`
(explorer.runs.saved: kept runs, model zips, blends),
`app.searcher` (explorer.compare.searching: search and evaluate), `app.explore` (explorer.compare.explore: the Explore tab).
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from explorer.compare.explore import RunExplorer
from explorer.compare.search import BaseIndexes
from explorer.compare.searching import Searcher
from explorer.resources.accounts import DiskAccounts, Owner
from explorer.resources.cpu import CpuAccounts
from explorer.resources.disk import Disk
from explorer.resources.models import Loaded, ModelCache
from explorer.resources.sessions import RUNS_DIR, RunInfo, Session, SessionStore
from explorer.resources.store import RunStore
from explorer.resources.turns import FairSlots
from explorer.runs.execute import Runner
from explorer.runs.jobs import TrainQueue
from explorer.runs.live import RunRegistry
from explorer.runs.saved import SavedRuns
from explorer.runs.training import Trainer
from explorer.settings import Settings
from explorer.share.downloads import Downloads
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
        s = self._settings = settings or Settings.from_env()
        s.work_dir.mkdir(parents=True, exist_ok=True)
        # the shared state: the model cache, the live runs, sessions, kept runs, disk accounts, slots, the estimator
        self.models = models = ModelCache(s)
        self.registry = registry = RunRegistry()  # the live runs, each with its one status (explorer.runs.live)
        self.sessions = SessionStore(s, self.forget, registry)
        self.runs = RunStore(s.work_dir / RUNS_DIR, self.forget)
        self.accounts = DiskAccounts(lambda: self.settings, s.work_dir, self.runs.root, self.forget)
        models.hub.server_room = self.accounts.server_room  # a hub download counts on the server's disk
        self.disk = Disk(s, self.sessions, self.runs, self.accounts, registry)  # sweeps, then room, before a write
        # the compute each visitor and address spent in the last hour (runs of every kind, maps, exports, evaluations)
        self.cpu = cpu = CpuAccounts(s.visitor_cpu_s, s.address_cpu_s)
        # who is asking, as the web layer knows it (ui.handlers.current_visitor: the signed cookie and the address);
        # None where nobody tells (the service used directly): such sessions share one account
        self.identify: Callable[[], Owner | None] = lambda: None
        self.page: Callable[[], str | None] = lambda: None  # which page asks (app.py: Gradio's session hash)
        # what the web layer keeps of a folder's files outside it (ui.web.served: the API's cached names of a run's
        # files), told before the folder is removed, as the caches below are (`forget`)
        self.on_forget: list[Callable[[Path], None]] = []
        # Training slots and the runs waiting for one (runs, blends, model uploads): one place per visitor, in
        # arrival order; Gradio's own queue does not hold these events (they wait here, cancellable, holding no worker)
        self.train_queue = TrainQueue(s.train_concurrency, s.train_queue)
        self.search_slots = slots = FairSlots(s.search_concurrency)
        self.base_indexes = BaseIndexes()  # the loaded strings under a base model, searched before any tuning
        self.downloads = Downloads()  # the files offered for download, by unguessable link (explorer.share.downloads)
        # time costs calibrated on this machine: once per process and model, whichever app asks
        self._estimator = Estimator(s.work_dir / ".estimate", shared=True, probe_fresh_s=s.speed_probe_s)
        # one object per concern, each given what it touches (`app.<part>.<method>`); MirrorApp only wires them
        self.loader = TextLoader(s, models)  # tab 1's strings: files, pasted text, examples, Hub datasets
        # the plan and time estimate before a run (and what a Launch would wait for in the training queue)
        self.planner = Planner(s, models, self.estimator, registry, self.train_queue, cpu)
        # every kind of run, one path: the slot, the disk, the folder, serving, the checks, packaging, failure
        self.runner = Runner(registry, self.train_queue, models, self.runs, self.disk.check, s, slots, cpu)
        # kept runs opened by id, uploaded model zips, blends
        self.saved = SavedRuns(registry, self.runner, self.runs, models, lambda folder: self.explore.forget(folder), s)
        # training runs: start, follow, cancel
        self.trainer = Trainer(
            registry, self.runner, self.train_queue, self.loader, self.saved, models, self.planner, self.estimator, s
        )
        # search both encoders, another corpus, gold pair sets
        self.searcher = Searcher(s, models, self.saved.kept, self.disk, slots, self.base_indexes, cpu)
        # the Explore tab: maps, what moved, health, exports, the Hub
        self.explore = RunExplorer(s, models, self.searcher.search, self.disk, self.accounts, slots, cpu)

    def __deepcopy__(self, memo: dict) -> MirrorApp:  # never cloned, whatever holds a reference to it
        return self

    @property
    def settings(self) -> Settings:
        return self._settings

    @settings.setter
    def settings(self, value: Settings) -> None:
        """Settings changed while it runs (tests do; the disk accounts read them per call) reach the parts that read
        them per call, and the CPU accounts their budgets; the model cache and the session store keep the ones they
        were made with."""
        self._settings = value
        if hasattr(self, "cpu"):
            self.cpu.visitor_s, self.cpu.address_s = value.visitor_cpu_s, value.address_cpu_s
        for part in ("disk", "loader", "planner", "runner", "saved", "trainer", "searcher", "explore"):
            if hasattr(self, part):
                getattr(self, part).settings = value

    @property
    def estimator(self) -> Estimator:
        return self._estimator

    @estimator.setter
    def estimator(self, value: Estimator) -> None:
        """Another estimator (a test's, with no calibrations) reaches the parts that price and learn."""
        self._estimator = value
        for part in ("planner", "trainer"):
            if hasattr(self, part):
                getattr(self, part).estimator = value

    @functools.cached_property
    def secret(self) -> str:
        """The key gr.BrowserState stores the browser's run list with, kept in the work folder (made once) so the
        list stays readable across server restarts. Not a secret: Gradio sends it to every page in /config (the run
        list it protects is the browser's own, and a run id alone opens a run). Never used for anything else."""
        return self._key_file(".browser-secret")

    @functools.cached_property
    def visitor_key(self) -> bytes:
        """The key the visitor cookie is signed with (ui.web.quota.sign_visitor): made once, kept in the
        work folder, never sent anywhere, so a client cannot invent a visitor (a fresh quota) for itself."""
        return bytes.fromhex(self._key_file(".visitor-key"))

    def _key_file(self, name: str) -> str:
        path = self.settings.work_dir / name
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
        """Drop what memory (and the web layer) holds of the runs under `folder` (removed: a session's, or one run's)."""
        self.models.forget(folder)
        self.explore.forget(folder)
        for forget in self.on_forget:
            forget(folder)

    def session(self, state: Session | None = None, shared: bool = True) -> Session:
        """The caller's session, or a fresh one when it has none or it expired (charged to whoever asks). `shared`:
        one for all of a page's events sent before it had one (SessionStore.get); an API call's is its own (a
        client's failed first call removes the one it made)."""
        return self.sessions.get(state, self.identify(), self.page() if shared else None)

    def close_session(self, state: Session | None) -> None:
        """gr.State's delete callback (tab closed, or idle past the TTL); a running job's session goes when it ends."""
        self.sessions.close(state)

    def sweep(self, force: bool = False) -> list[Path]:
        """Remove sessions idle past MIRROR_SESSION_TTL and runs unused for MIRROR_RUN_TTL (explorer.resources.disk)."""
        return self.disk.sweep(force)

    def check_disk(self, session: Session, incoming: int = 0) -> list[str]:
        """Room for a job that writes about `incoming` bytes for `session`, or MirrorError (explorer.resources.disk)."""
        return self.disk.check(session, incoming)

    def warm_up(self) -> None:
        """Ahead of the first request (a thread at server start): the bundled model, the base side of the forgetting
        check and UMAP's compiled kernels (tens of seconds of CPU on a cold numba cache). Failures are only logged."""
        self.models.warm_up()
        if not self.settings.warm_up:
            return
        self.planner.warming.begin()  # plans meanwhile are not probed against this work (planning.Warming)
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
        finally:
            self.planner.warming.end()

    def check_model(self, model: str) -> str:
        return self.models.check_model(model)

    def base_encoder(self, model: str, pooling: str = "auto"):
        return self.models.base_encoder(model, pooling)

    def loaded(self, run: RunInfo) -> Loaded:
        return self.models.loaded(run)
