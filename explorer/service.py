"""MirrorApp: the service the web UI (and its API) calls. Plain values in, plain values or events out.

It owns no Gradio: app.py wires components to these methods. Who does what underneath:
sessions.SessionStore (folders, disk budgets), models.ModelCache (encoders in memory, model-name policy),
jobs.train_job (the training thread and its stop conditions), pipeline.tune_and_index (tune, then index),
uploads (model zips), inputs (settings and queries checked), render (what the user reads).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import posixpath
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from explorer.card import write_card
from explorer.estimate import Estimator, device_and_threads, estimate_md, rough_estimate
from explorer.evaluation import EvalReport, evaluate_sets, load_sets
from explorer.events import TERMINAL, Cancelled, Done, Event, Failed, Finished, Note, Phase, Step, Stopped
from explorer.explore import RunExplorer
from explorer.inputs import EXAMPLES, EXAMPLES_DIR, build_config, clamp_k, split_queries
from explorer.jobs import FairSlots, train_job
from explorer.models import REBUILT_NOTE, IndexPair, Loaded, ModelCache, release_memory
from explorer.render import fmt_seconds, message, run_caption, user_error
from explorer.runs import RunStore
from explorer.search import BaseIndexes, search_both
from explorer.sessions import (
    EVICT_MIN_IDLE_S,
    RUNS_DIR,
    RunHandle,
    RunInfo,
    Session,
    SessionStore,
    disk_usage,
    read_stop,
    texts_key,
    write_stop,
)
from explorer.settings import Settings, inference_device
from explorer.uploads import display_name, extract_model_zip, model_folder_in_zip, zip_folder
from mirror.config import BUNDLED_MODEL, detect_mode
from mirror.data import clean_texts, fmt_size, read_file
from mirror.errors import MirrorError
from mirror.exports import download_name

log = logging.getLogger("mirror.app")
SLOT_WAIT_S = 30.0  # longer than explorer.jobs.ABANDONED_S: an abandoned run stops, and its slot frees, within it
INDEX_README = (
    "A Mirror Explorer search index (FAISS) of your strings, built with the tuned model.\n"
    "Unzip the model zip beside it, then search it with: python -m index query mirror-index 'your query'\n"
)


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
        # Training slots, enforced here as well as by the Gradio queue (which makes users wait for one):
        # a caller that bypasses the queue gets a clear "busy" error instead of an extra training.
        self.train_slots = threading.BoundedSemaphore(self.settings.train_concurrency)
        self.search_slots = FairSlots(self.settings.search_concurrency)
        self.base_indexes = BaseIndexes()  # the loaded strings under a base model, searched before any tuning
        # time costs calibrated on this machine: once per process and model, whichever app asks
        self.estimator = Estimator(self.settings.work_dir / ".estimate", shared=True)

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

    # ---------------------------------------------------------------- sessions and models

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
            import explorer.forgetting as forgetting
            import explorer.maps as maps

            if self.settings.general_checks:
                forgetting.warm_up(self.models.base_encoder(BUNDLED_MODEL))
            self._warm_estimate()
            maps.warm_up()
        except Exception:
            log.exception("warm-up of the forgetting check, the estimate or the maps failed; the first request will")

    def _warm_estimate(self) -> None:
        """At server start: calibrate the estimate of the bundled model on the small example (the run a newcomer
        tries first) in the background, so the first plan shown costs its visitor nothing and is not timed while
        their own requests compete with it. (What scoring the base's side of the checks took is not a price for
        the run's checks: it pays oneDNN's kernels for every new shape once, 15-30 s against a run's 4 s here.)"""
        texts = clean_texts((EXAMPLES_DIR / EXAMPLES["small"][1]).read_text(encoding="utf-8").splitlines())[0]
        config, _ = build_config(texts, BUNDLED_MODEL, "auto", {}, self.settings.max_steps)
        device, threads = device_and_threads(config.device)
        base = self.models.base_encoder(BUNDLED_MODEL, config.pooling)
        self.estimator.estimate(
            texts, texts_key(texts), config, device, threads, base, self._memory_budget(config),
            may_calibrate=not self.in_progress, check_encoders=self._check_encoders(base),
        )  # fmt: skip

    def check_model(self, model: str) -> str:
        return self.models.check_model(model)

    def base_encoder(self, model: str, pooling: str = "auto"):
        return self.models.base_encoder(model, pooling)

    def loaded(self, run: RunInfo) -> Loaded:
        return self.models.loaded(run)

    # ---------------------------------------------------------------- tab 1: input

    def set_texts(self, session: Session, raw: Sequence[str], source: str, notes: Sequence[str] = ()) -> dict[str, Any]:
        """Clean, cap and keep the strings; returns what the UI and the API report about them (with `notes`
        from reading them: an encoding guessed, a header row)."""
        texts, stats = clean_texts(raw)
        notes = list(notes)
        if len(texts) > self.settings.max_strings:
            notes.append(
                f"kept the first {self.settings.max_strings:,} of {len(texts):,} strings (this server's limit, MIRROR_MAX_STRINGS)"
            )
            texts = texts[: self.settings.max_strings]
        if len(texts) < 2:
            raise MirrorError(
                f"`{source}`: found {len(texts)} usable string{'s' if len(texts) != 1 else ''} "
                f"({stats.lines} lines, {stats.empty} empty, {stats.duplicates + stats.case_duplicates} duplicates); mirror tuning needs at least 2 distinct strings"
            )
        mode, reason = detect_mode(texts)
        session.texts, session.source, session.stats = texts, source, stats
        session.detected_mode, session.mode_reason = mode, reason
        return {"strings": len(texts), "stats": stats, "mode": mode, "reason": reason, "notes": notes, "source": source}

    @contextlib.contextmanager
    def _replacing_texts(self, session: Session) -> Iterator[None]:
        """A load replaces the session's strings or, when it fails, keeps the ones loaded before (issue 28: a bad
        file after a good one must not cost the good one); the page says which strings are still loaded."""
        yield

    def load_file(self, session: Session, path: str | None, column: str | None = None) -> dict[str, Any]:
        with self._replacing_texts(session):
            if not path:
                raise MirrorError("no file uploaded")
            notes: list[str] = []
            name = display_name(path)
            raw, columns = read_file(path, column, self.settings.max_upload_bytes, name=name, notes=notes)
            return {**self.set_texts(session, raw, name, notes), "columns": columns}

    def load_pasted(self, session: Session, text: str) -> dict[str, Any]:
        with self._replacing_texts(session):
            return self._load_pasted(session, text)

    def _load_pasted(self, session: Session, text: str) -> dict[str, Any]:
        text = str(text or "")
        if not text.strip():
            raise MirrorError("paste some strings first, one per line")
        if len(text.encode("utf-8", "surrogatepass")) > self.settings.max_upload_bytes:
            raise MirrorError(
                f"the pasted text is over {fmt_size(self.settings.max_upload_bytes, limit=True)}; upload a file instead"
            )
        return self.set_texts(session, text.splitlines(), "pasted text")

    def load_example(self, session: Session, key: str) -> dict[str, Any]:
        with self._replacing_texts(session):
            if key not in EXAMPLES:
                raise MirrorError(f"unknown example {key!r}")
            path = EXAMPLES_DIR / EXAMPLES[key][1]
            if not path.is_file():
                raise MirrorError(f"the example file {path.name} is missing from this installation")
            return self.set_texts(session, path.read_text(encoding="utf-8").splitlines(), path.name)

    def load_hub_dataset(self, session: Session, dataset: str, column: str, split: str | None = None) -> dict[str, Any]:
        """The strings of one column of a Hugging Face dataset (explorer.hub), within this server's limits."""
        import explorer.hub as hub

        with self._replacing_texts(session):
            if not self.settings.allow_hub:
                raise MirrorError("this server does not load from the Hugging Face Hub (MIRROR_ALLOW_HUB is off)")
            dataset, column = str(dataset or "").strip(), str(column or "").strip()
            raw, notes = hub.load_hub_dataset(
                dataset,
                column,
                split=str(split or "").strip() or None,
                max_rows=self.settings.max_strings,
                max_bytes=self.settings.max_upload_bytes,
            )
            return self.set_texts(session, raw, f"{dataset} · {column}", notes)

    CALIBRATION_WAIT_S = 90.0  # an estimate waits this long for another request's calibration of the same key

    def estimate(self, session: Session, model: str, mode: str, overrides: dict[str, Any]) -> str:
        """Markdown: the planned steps and the whole job's time on this machine, phase by phase.

        The first estimate for a model (and pooling, device, precision, threads) calibrates: a few real training
        steps and encodes of that model, timed here (explorer.estimate; a few seconds). Until then, and where it
        cannot calibrate now (a hub model not loaded yet, a run training on this server, ZeroGPU, another request
        calibrating the same key), it shows the rough guess from string lengths, saying why.
        """
        if not session.texts:
            return "Load some strings to see the plan and a time estimate."
        try:
            config, notes = build_config(
                session.texts,
                str(model or BUNDLED_MODEL).strip() or BUNDLED_MODEL,
                mode,
                overrides,
                self.settings.max_steps,
            )
            est, why = self._estimate(session, config)
        except MirrorError as exc:
            return message(str(exc), "warning")
        return estimate_md(est, config, notes, why)

    def _estimate(self, session: Session, config) -> tuple[Any, str]:
        """The calibrated Estimate of a run of `config` on the session's strings, or the rough one and why."""
        from explorer.settings import zero_gpu
        from mirror.names import looks_local

        texts = list(session.texts)
        device, threads = device_and_threads(config.device)
        rough = rough_estimate(texts, config, device, threads)
        model = self.models.check_model(config.model)
        if zero_gpu():
            return rough, "the GPU is lent to a run only while it trains, so it is not timed ahead"
        base = self.models.cached_base(model, config.pooling)
        if base is None and model != BUNDLED_MODEL and not looks_local(model):  # never a download for an estimate
            return rough, "calibrates on this machine once this model is loaded (by a run)"
        base = base or self.models.base_encoder(model, config.pooling)
        key, prev = texts_key(texts), session.run
        build_base = True
        if prev and (prev.base_model, prev.pooling, prev.texts_key) == (model, base.pooling, key):
            build_base = not (prev.folder / "base_index").is_dir()  # _train copies it
        est = self.estimator.estimate(
            texts,
            key,
            config,
            device,
            threads,
            base,
            memory_budget=self._memory_budget(config),
            build_base=build_base,
            # a second request while the first calibrates (the page asks again as a file lands) waits for it:
            # its answer is the one the page keeps
            wait=self.CALIBRATION_WAIT_S,
            may_calibrate=not self.in_progress,  # a calibration would slow a training run, and be slowed by it
            check_encoders=self._check_encoders(base),
        )
        if est is None and self.in_progress:
            return rough, "calibrates on this machine when no run is training"
        if est is None:
            return rough, "calibrating on this machine (another request started it)…"
        return est, ""

    def _memory_budget(self, config) -> int | None:
        """The memory a run of `config` will plan its steps with (index.pipeline.run_memory)."""
        from index.pipeline import run_memory

        return run_memory(config, self.settings.train_memory_bytes)

    def _check_encoders(self, base) -> int:
        """Encoders the general checks after a run encode: none when they are off, 1 when the base's scores are
        kept (explorer.forgetting), else 2."""
        from explorer.forgetting import base_scored

        if not self.settings.general_checks:
            return 0
        return 1 if base_scored(base) else 2

    def _planned(self, texts: list[str], key: str, config, base, build_base: bool) -> Any:
        """The calibrated estimate of the run about to start, if its key is calibrated (never calibrates: the run
        is about to use the machine); None otherwise. Only for `Estimator.observe` after the run."""
        try:
            device, threads = device_and_threads(config.device)
            return self.estimator.estimate(
                texts, key, config, device, threads, base, self._memory_budget(config), build_base,
                wait=False, may_calibrate=False,
            )  # fmt: skip
        except Exception:  # an estimate must never stop a run
            log.exception("could not price the run for the estimator")
            return None

    # ---------------------------------------------------------------- tab 1: training

    def request_run(self, session: Session) -> RunHandle:
        """Launch was clicked: the run exists (and can be cancelled) while it still waits in the queue."""
        if session.active is None or not session.active.started or session.active.finished:
            session.active = RunHandle()
        return session.active

    def cancel(self, session: Session) -> str:
        """Stop the session's run between two steps, or before it starts (while it waits in the queue)."""
        handle = session.active  # read once: the run may end (and reset it) at any moment
        if handle is None or handle.finished:
            return "Nothing is running. Your model and index (if any) stay served."
        handle.request_stop("cancel")
        if handle.started:
            return "Stopping after the current step… the previous model and index stay served."
        return "Cancelled before it started. The previous model and index stay served."

    def train(self, session: Session, model: str, mode: str, overrides: dict[str, Any]) -> Iterator[Event]:
        """Tune on the session's strings in a fresh run folder; serve it only on success. Yields its events.

        Events (explorer.events): Phase, Step, Note and Tick, then one of Done, Cancelled or Failed. Never raises
        for bad input: it yields Failed. The run goes on in its own thread (`start`); this follows it, and so can
        another consumer (`follow`, e.g. the page reloaded). It is cancellable from before its first event
        (`cancel`), and stops when nobody has followed it for ABANDONED_S. It holds one of the server's
        training slots; the last event comes after the slot is released.
        """
        yield from self.start(session, model, mode, overrides).follow()

    def start(self, session: Session, model: str, mode: str, overrides: dict[str, Any]) -> RunHandle:
        """Start the session's run in its own thread; returns its handle (id, stop flag, events)."""
        handle = session.active
        if handle is not None and handle.finished:  # a run this session followed (a reattached page) ended
            handle = None
        if handle is not None and handle.started:
            busy = RunHandle(started=True)
            busy.publish(Failed("A run is already in progress in this session; wait for it or cancel it."))
            busy.finish()
            return busy
        handle = handle or RunHandle()  # an API call: no Launch click made one
        session.active, handle.started = handle, True
        self.in_progress[handle.id] = handle
        args = (session, handle, model, mode, overrides)
        threading.Thread(target=self._run, args=args, name=f"mirror-run-{handle.id[:8]}", daemon=True).start()
        return handle

    def train_stream(
        self, session: Session, texts: str, file: str | None, column: str, model: str, mode: str, settings: Any
    ) -> Iterator[tuple[dict[str, Any], RunInfo | None]]:
        """The /train API: load `file` (or the pasted `texts`), tune, and yield (progress, None) as the run goes
        (the run id with the first, so the client's /cancel can reach it; then at most once a second), then
        (summary, run). Errors raise MirrorError with the message the page would show."""
        try:
            info = (
                self.load_file(session, file, (column or "").strip() or None)
                if file
                else self.load_pasted(session, texts)
            )
            if settings is not None and not isinstance(settings, dict):
                raise MirrorError('settings must be a JSON object such as {"max_steps": 20}')
        except Exception as exc:  # MirrorError, or a bug: a message either way
            raise MirrorError(user_error(exc)) from None
        notes, progress, last = list(info.get("notes", [])), {"status": "queued"}, 0.0
        for ev in self.train(session, model or BUNDLED_MODEL, mode or "auto", dict(settings or {})):
            if isinstance(ev, Failed | Cancelled):
                raise MirrorError(ev.text)
            if isinstance(ev, Done):
                run = ev.run
                summary = {**run.stats, "base_model": run.base_model, "strings": run.n_texts, "losses": run.losses}
                summary.update(notes=notes + list(run.stats.get("notes") or []), run_id=run.folder.name)
                yield summary, run
                return
            if isinstance(ev, Note):
                notes.append(ev.text)
            if isinstance(ev, Step):
                progress.update(step=ev.step, total_steps=ev.total, loss=ev.loss)
            if "run_id" not in progress and session.active is not None:
                progress.update(status="running", run_id=session.active.id)
                last = 0.0
            if time.monotonic() - last >= 1.0:
                last = time.monotonic()
                yield dict(progress), None
        raise MirrorError("the run ended without a result")

    def follow(self, run_id: str, since: int = 0, session: Session | None = None) -> Iterator[Event]:
        """The events of a run in progress (from number `since`), e.g. for a page reloaded during its run; with
        `session`, that session can cancel it, and is served the run when it is done."""
        handle = self.in_progress.get(run_id)
        if handle is None:
            raise MirrorError("that run is not in progress on this server (finished, or the server restarted)")
        if session is not None:
            session.active = handle
        for ev in handle.follow(since):
            if session is not None and isinstance(ev, TERMINAL) and session.active is handle:
                session.active = None  # before the consumer sees the end (it may stop pulling there)
            if session is not None and isinstance(ev, Done) and session.run is not ev.run:
                self.open_run(session, run_id)
            yield ev

    def _run(self, session: Session, handle: RunHandle, model: str, mode: str, overrides: dict[str, Any]) -> None:
        """The run's thread: its events into the handle; a stop when nobody follows it any more."""
        import explorer.jobs as jobs

        try:
            for ev in self._run_events(session, handle, model, mode, overrides):
                handle.publish(ev)
                if handle.folder is not None and time.monotonic() - handle.last_seen > jobs.ABANDONED_S:
                    write_stop(handle.folder, "abandoned")
        except Exception as exc:  # a bug: the followers get a message, the server goes on
            log.exception("run thread failed")
            handle.publish(Failed(user_error(exc)))
        finally:
            if session.active is handle:
                session.active = None
            self.in_progress.pop(handle.id, None)
            handle.finish()

    def _run_events(
        self, session: Session, handle: RunHandle, model: str, mode: str, overrides: dict[str, Any]
    ) -> Iterator[Event]:
        if handle.stop.is_set():
            yield Cancelled("Cancelled before it started.")
            return
        if len(session.texts) < 2:
            yield Failed("Load at least 2 strings first (step 1 above).")
            return
        yield from self._exclusive(session, self._train(session, handle, model, mode, overrides))

    def _exclusive(self, session: Session, events: Iterator[Event]) -> Iterator[Event]:
        """Run a job's events holding a training slot; its final event is yielded after the job cleaned up.

        Gradio's queue hands out its training turns as runs end, but a run whose page or client went away goes
        on until it notices (ABANDONED_S) while the queue has already moved on: so wait up to SLOT_WAIT_S for the
        slot, saying so, before refusing (a caller that bypasses the queue is refused then, never run extra)."""
        deadline = time.monotonic() + SLOT_WAIT_S
        while not self.train_slots.acquire(timeout=0.5):
            if time.monotonic() >= deadline:
                break
            yield Phase("Waiting for a free training slot (a run that lost its page is stopping)")
        else:
            yield from self._holding_slot(session, events)
            return
        n = self.settings.train_concurrency
        yield Failed(
            f"this server runs at most {n} training{'s' if n != 1 else ''} at a time "
            "(MIRROR_TRAIN_CONCURRENCY) and all slots are busy; try again when a run finishes"
        )

    def _holding_slot(self, session: Session, events: Iterator[Event]) -> Iterator[Event]:
        terminal = None
        self.sessions.running.add(session.folder)
        try:
            with contextlib.closing(events) as job:
                for ev in job:
                    if isinstance(ev, TERMINAL):
                        terminal = ev
                        break
                    yield ev
        finally:
            self.sessions.running.discard(session.folder)
            self.train_slots.release()
            release_memory()
            if session.closed:  # the tab went away during the run: nobody will use its folder again
                self.sessions.discard(session)
        if terminal is not None:
            yield terminal

    def _train(
        self, session: Session, handle: RunHandle, model: str, mode: str, overrides: dict[str, Any]
    ) -> Iterator[Event]:
        texts, source = list(session.texts), session.source
        try:
            self.check_disk(session)
            config, notes = build_config(
                texts, self.models.check_download(model), mode, overrides, self.settings.max_steps
            )
            yield Phase(f"Checking the base model {config.model}")
            base = self.models.base_encoder(config.model, config.pooling)
        except Exception as exc:  # MirrorError, or a bug: a message either way
            yield Failed(user_error(exc))
            return
        yield from (Note(n) for n in notes)
        run = self._new_run_folder(session, handle)
        key, prev = texts_key(texts), session.run
        build_base = True
        if prev and (prev.base_model, prev.pooling, prev.texts_key) == (config.model, base.pooling, key):
            if (prev.folder / "base_index").is_dir():  # same strings, same base: reuse its index
                shutil.copytree(prev.folder / "base_index", run / "base_index")
                build_base = False
        planned = self._planned(texts, key, config, base, build_base)  # to learn from, once the run has run
        started, started_at = time.perf_counter(), time.time()
        limits = {"max_seconds": self.settings.max_run_seconds, "memory": self.settings.train_memory_bytes}
        roots = [str(run)] + [str(r) for r in self.settings.model_roots]
        try:
            with self._discarded_unless_served(run) as served:
                for ev in train_job(texts, config.to_dict(), str(run), roots, build_base, limits):
                    if isinstance(ev, Step):
                        session.touch()  # a long run keeps its session from being swept as idle
                    if isinstance(ev, Stopped) or (isinstance(ev, Finished) and read_stop(run)):
                        text = stopped_text(ev.stats, read_stop(run), self.settings)
                        yield Cancelled(text, tuple(ev.stats.get("losses", [])), ev.stats)
                        return
                    if isinstance(ev, Finished):
                        info = new_run_info(run, config.model, texts, source, ev.stats, package=False)
                        check_s = None
                        if self.settings.general_checks:
                            from explorer.forgetting import base_scored

                            yield Phase("Checking general similarity (the forgetting check)")
                            loaded = self.models.loaded(info)  # what _serve loads next: a broken model fails here
                            encoders = 1 if base_scored(loaded.base) else 2
                            info.stats["forgetting"] = self.forgetting(loaded.base, loaded.tuned, texts)
                            check_s = (info.stats["forgetting"] or {}).get("seconds")
                            check_s = check_s / encoders if check_s is not None else None
                        if planned is not None:
                            self.estimator.observe(
                                planned.key, planned.phase("training"), ev.stats.get("seconds"), check_s
                            )
                        yield Phase("Preparing downloads")
                        info = self._serve(session, package_run(info))  # its card has the checks' results
                        info.stats.update(
                            wall_seconds=round(time.perf_counter() - started, 1),
                            started_at=round(started_at, 3),
                            finished_at=round(time.time(), 3),
                        )
                        served.append(info)
                        yield Done(info)
                        return
                    yield ev
                    if isinstance(ev, Failed):
                        return
                yield Failed("the run ended without a result; the previous model stays served")
        except MirrorError as exc:
            yield Failed(str(exc))
        except Exception as exc:
            log.exception("run failed")
            yield Failed(f"the run failed unexpectedly ({type(exc).__name__}: {exc}); the previous model stays served")

    def _new_run_folder(self, session: Session, handle: RunHandle) -> Path:
        run = self.runs.folder(handle.id)
        run.mkdir(parents=True)
        handle.folder = run
        if handle.stop.is_set():  # cancelled while the base model loaded
            write_stop(run, "cancel")
        return run

    @contextlib.contextmanager
    def _discarded_unless_served(self, run: Path) -> Iterator[list[RunInfo]]:
        """Remove `run` unless the body put the RunInfo it now serves into the list; bugs become a Failed event
        upstream (the caller's generator yields it)."""
        served: list[RunInfo] = []
        try:
            yield served
        finally:
            if not served:
                shutil.rmtree(run, ignore_errors=True)

    def _serve(self, session: Session, info: RunInfo) -> RunInfo:
        """Check the new run loads, keep it (run.json: from now on its id reaches it), then serve it. The run it
        replaces stays in the store (the session's history, others' links) until the run budget removes it."""
        self.models.loaded(info)  # load now: a broken artifact fails here, before the swap
        self.runs.save(info)
        with session.lock:
            session.run = info
            session.run_ids.append(info.folder.name)
        return info

    def open_run(self, session: Session, run_id: str) -> RunInfo:
        """Serve a kept run (by its id: a link, the browser's run list, an API call) to this session."""
        info = self.runs.load(run_id)
        loaded = self.models.loaded(info)  # a run whose files went bad fails here, and the session keeps what it had
        if loaded.rebuilt and REBUILT_NOTE not in info.stats.get("notes", []):
            self._after_rebuild(info)
        with session.lock:
            session.run = info
        return info

    def _after_rebuild(self, info: RunInfo) -> None:
        """A kept run whose tuned index was rebuilt on load (made by a version with the stale bf16 copy): its index
        download made again, its old exports dropped (they hold the old vectors), and a note on its page."""
        info.stats["notes"] = [*info.stats.get("notes", []), REBUILT_NOTE]
        shutil.rmtree(info.folder / "exports", ignore_errors=True)
        self.explore.forget(info.folder)  # figures computed from the old index
        package_run(info, zip_model=False)
        self.runs.save(info)

    def restore_texts(self, session: Session) -> dict[str, Any] | None:
        """A session with no strings loaded (a reloaded page, a link opened elsewhere) gets the served run's own
        strings back, so tuning them again is one click; what `set_texts` reports, or None when it had some."""
        run = session.run
        if run is None or session.texts:
            return None
        texts = list(self.models.loaded(run).main.tuned.texts)
        info = self.set_texts(session, texts, f"run {run.folder.name[:8]} ({run.corpus or 'its strings'})")
        info["notes"] = ["the strings of the run you opened, loaded again: Launch tunes them again"] + info["notes"]
        return info

    def list_runs(self, run_ids: Sequence[str]) -> list[dict[str, Any]]:
        """id, label, created of the runs among `run_ids` still kept here, newest first."""
        return self.runs.describe(r for r in run_ids if isinstance(r, str))

    def use_saved_model(self, session: Session, zip_path: str | None) -> Iterator[Event]:
        """Serve a model zip saved from this app: index the loaded strings with it and its base. Yields events."""
        if not zip_path:
            yield Failed("no model zip uploaded")
            return
        if len(session.texts) < 2:
            yield Failed("Load the strings to search first (step 1), then upload the model zip.")
            return
        if session.active is not None and session.active.started:
            yield Failed("A run is in progress in this session; wait for it or cancel it.")
            return
        yield from self._exclusive(session, self._use_saved(session, zip_path))

    def _use_saved(self, session: Session, zip_path: str) -> Iterator[Event]:
        from mirror.encoder import load_encoder

        handle = session.active = RunHandle(started=True)
        run = self._new_run_folder(session, handle)
        texts, source = list(session.texts), session.source
        try:
            with self._discarded_unless_served(run) as served:
                self.check_disk(session)
                yield Phase("Unpacking the model")
                folder = extract_model_zip(Path(zip_path), run / "unpacked", self.settings.max_model_bytes)
                os.replace(folder, run / "model")
                shutil.rmtree(run / "unpacked", ignore_errors=True)
                tuned = load_encoder(run / "model", device=inference_device(), allowed_roots=[run])
                base_model, base, notes = self._base_of(tuned)
                events: list[Event] = []
                from index.pipeline import index_with

                for name, enc in (("base", base), ("tuned", tuned)):
                    index_with(
                        enc,
                        texts,
                        run / f"{name}_index",
                        f"Indexing your strings with the {name} encoder",
                        events.append,
                    )
                    yield from events
                    events.clear()
                stats = dict(tuned.info.get("stats") or {})
                stats.update(pooling=tuned.pooling, mode=(tuned.info.get("config") or {}).get("mode", "?"))
                stats.update(uploaded=display_name(zip_path), notes=notes)
                stats["summary"] = f"uploaded model {display_name(zip_path)}" + (
                    f" ({stats['summary']})" if stats.get("summary") else ""
                )
                # served as uploaded, not re-zipped
                kept = link_or_copy(Path(zip_path), run / download_name(base_model, run.name, "model"))
                info = self._serve(session, new_run_info(run, base_model, texts, source, stats, model_zip=kept))
                served.append(info)
                yield Done(info, tuple(notes))
        except MirrorError as exc:
            yield Failed(str(exc))
        except Exception as exc:
            log.exception("model upload failed")  # details (which may name server paths) stay in the log
            yield Failed(f"could not use this model ({type(exc).__name__}); is it a zip saved by this app?")
        finally:
            if session.active is handle:
                session.active = None

    def _base_of(self, tuned) -> tuple[str, Any, list[str]]:
        """The base model an uploaded tuned model names (checked like one a user typed, hub size included), or
        the bundled model with a note when that one is not available here."""
        base_model = str((tuned.info.get("config") or {}).get("model") or BUNDLED_MODEL)
        try:
            return base_model, self.models.base_encoder(self.models.check_download(base_model), tuned.pooling), []
        except MirrorError as exc:
            note = f"its base model {base_model!r} is not available here ({exc}); comparing with the bundled model"
            # with the tuned model's pooling: the served run reloads its base that way
            return BUNDLED_MODEL, self.models.base_encoder(BUNDLED_MODEL, tuned.pooling), [note]

    def blend_run(self, session: Session, alpha: Any) -> Iterator[Event]:
        """Serve a blend of the served run's tuned weights with its base (α of the tuned, 1 - α of the base) as a
        new run: no retraining, the strings re-indexed with the blend, its general checks run. Yields events."""
        from mirror.blend import check_alpha

        try:
            alpha = check_alpha(alpha)
        except MirrorError as exc:
            yield Failed(str(exc))
            return
        parent = session.run
        if parent is None:
            yield Failed("Nothing to blend yet: tune a model in tab ① (or open one of your runs) first.")
            return
        if session.active is not None and session.active.started:
            yield Failed("A run is in progress in this session; wait for it or cancel it.")
            return
        yield from self._exclusive(session, self._blend(session, parent, alpha))

    def _blend(self, session: Session, parent: RunInfo, alpha: float) -> Iterator[Event]:
        from index.pipeline import index_with
        from mirror.blend import blend_folder
        from mirror.encoder import load_encoder

        handle = session.active = RunHandle(started=True)
        run = self._new_run_folder(session, handle)
        try:
            with self._discarded_unless_served(run) as served:
                self.check_disk(session)
                loaded = self.models.loaded(parent)
                texts = list(loaded.main.tuned.texts)
                yield Phase(f"Blending the weights: α = {alpha:g} tuned, {1 - alpha:g} base")
                link_tree(tuned_weights(parent.folder), run / "tuned_model")  # the unblended model, for later blends
                blend_folder(loaded.base, run / "tuned_model", alpha, run / "model")
                blended = load_encoder(run / "model", device=inference_device(), allowed_roots=[run])
                link_tree(parent.folder / "base_index", run / "base_index")
                events: list[Event] = []
                index_with(blended, texts, run / "tuned_index", "Indexing your strings with the blend", events.append)
                yield from events
                stats = {**parent.stats, "losses": parent.losses, "blend_alpha": alpha}
                stats.pop("forgetting", None)  # the parent's checks are not the blend's
                stats.update(blended_from=parent.folder.name, summary=f"blend α={alpha:g} of {parent.summary}")
                if self.settings.general_checks:
                    yield Phase("Checking general similarity (the forgetting check)")
                    stats["forgetting"] = self.forgetting(loaded.base, blended, texts)
                info = self._serve(session, new_run_info(run, parent.base_model, texts, parent.corpus, stats))
                served.append(info)
                yield Done(info)
        except MirrorError as exc:
            yield Failed(str(exc))
        except Exception as exc:
            log.exception("blend failed")
            yield Failed(f"the blend failed ({type(exc).__name__}); the previous model stays served")
        finally:
            if session.active is handle:
                session.active = None

    def forgetting(self, base, tuned, texts: Sequence[str] = ()) -> dict[str, Any] | None:
        """The general checks (explorer.forgetting) of a tuned encoder against its base, and beside them, when the
        run's strings have enough long ones, the label-free self-check on them (`own_long_texts`, not counted in the
        seconds the estimate learns from); None (logged) when they cannot run here: a run is never failed for its
        checks. Seconds on a CPU (the base's scores are kept)."""
        from explorer.forgetting import forgetting_check, own_long_texts

        try:
            started = time.perf_counter()
            with self.search_slots:
                out = forgetting_check(base, tuned)
                out["seconds"] = round(time.perf_counter() - started, 1)
                own = own_long_texts(base, tuned, texts)
            if own is not None:
                out["own_long_texts"] = own
            return out
        except Exception:
            log.exception("forgetting check failed; the run goes on without it")
            return None

    # ---------------------------------------------------------------- tab 2: search

    def search(
        self,
        session: Session,
        queries: str,
        k: Any = 10,
        corpus: str = "main",
        hide_query: bool = False,
        base_model: str | None = None,
        run_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Top-k hits of each query (one per line) for the tuned and the base encoder, compared (explorer.search):
        [{query, tuned: [{rank, text, score, only_here, base_rank}], base: [{..., tuned_rank}], base_only}].

        `hide_query` drops the hit that is the query's own string (off by default: an API caller sees what the
        index holds). Before any tuning it searches the loaded strings with the base model `base_model` (default:
        the bundled one; a served run compares with its own base) alone: "tuned" is empty, "base_only" true.
        `run_id`: search that kept run instead of the session's (any client, after a restart too).
        """
        qs, k = split_queries(queries), clamp_k(k)
        run = self.runs.load(run_id) if run_id else session.run
        pair = None
        if run is not None:
            loaded = self.models.loaded(run)
            pair = loaded.extra if corpus == "extra" else loaded.main
        if pair is None and corpus == "extra":
            raise MirrorError("no other corpus is indexed yet: upload one below and press “Index it”")
        if pair is None:
            return self._search_base_only(session, qs, k, bool(hide_query), base_model or BUNDLED_MODEL)
        with self.search_slots:  # a few encodes at a time, in arrival order: no thread oversubscription
            return search_both(pair.tuned, pair.base, qs, k, bool(hide_query))

    def _search_base_only(
        self, session: Session, queries: list[str], k: int, hide_query: bool, model: str
    ) -> list[dict[str, Any]]:
        texts = list(session.texts)
        if len(texts) < 2:
            raise MirrorError(
                "Nothing to search yet: load your strings in tab ① (step 1) to search them with the base model, "
                "then tune one there to compare it with the tuned model."
            )
        model = self.models.check_download(model)
        encoder = self.models.base_encoder(model)
        with self.search_slots:  # the first search of these strings embeds them all: one slot, like a search
            index = self.base_indexes.get(model, encoder, texts)
            return search_both(None, index, queries, k, hide_query)

    def index_corpus(self, session: Session, path: str | None, column: str | None = None) -> str:
        """Index another uploaded corpus with the served tuned and base encoders; returns a summary."""
        from index.store import VectorIndex
        from mirror.encoder import replace_dir

        run = session.run
        if run is None:
            raise MirrorError("tune a model first (tab ①): the other corpus is indexed with your tuned encoder")
        if not path:
            raise MirrorError("upload a corpus file first")
        raw, _ = read_file(path, column, self.settings.max_upload_bytes, name=display_name(path))
        texts, stats = clean_texts(raw)
        dropped = max(0, len(texts) - self.settings.max_strings)
        texts = texts[: self.settings.max_strings]
        if not texts:
            raise MirrorError(f"`{display_name(path)}` has no non-empty strings")
        self.check_disk(session)
        loaded = self.models.loaded(run)
        tmp_b, tmp_t = run.folder / ".extra_base.new", run.folder / ".extra_tuned.new"
        VectorIndex.build(loaded.base, texts, gpu=False).save(tmp_b)
        VectorIndex.build(loaded.tuned, texts, gpu=False).save(tmp_t)
        with session.lock:
            replace_dir(tmp_b, run.folder / "extra_base")
            replace_dir(tmp_t, run.folder / "extra_tuned")
            loaded.extra = IndexPair(
                VectorIndex.load(run.folder / "extra_base", loaded.base, gpu=False),
                VectorIndex.load(run.folder / "extra_tuned", loaded.tuned, gpu=False),
            )
            run.extra_corpus = display_name(path)
        return (
            f"Indexed {len(texts):,} strings of `{display_name(path)}` with both encoders ({stats.summary()}"
            + (f"; {dropped:,} more dropped: this server's limit is {self.settings.max_strings:,}" if dropped else "")
            + "). Searching it now."
        )

    # ---------------------------------------------------------------- tab 3: evaluate

    def evaluate(self, session: Session, gold: Sequence[str], pairs_path: str | None = None) -> list[dict[str, Any]]:
        """Spearman ρ of cosine vs gold scores, for the base and (when there is one) the tuned encoder: a row per
        set, with bootstrap 95% intervals ("base 95% CI", ...). `evaluate_report` has the rest."""
        return self.evaluate_report(session, gold, pairs_path).rows

    def evaluate_report(
        self,
        session: Session,
        gold: Sequence[str],
        pairs_path: str | None = None,
        on_progress: Callable[[Phase], None] | None = None,
    ) -> EvalReport:
        """The rows of `evaluate`, the pairs whose rank moved most with tuning and notes (a set under 50 pairs,
        no tuned model yet); `on_progress` gets a Phase (strings encoded of all) as the encoders work."""
        sets = load_sets(gold, pairs_path, self.settings.max_upload_bytes)
        notes, run = [], session.run  # the run evaluated, named in the report even if another is served by then
        if run is not None:
            loaded = self.models.loaded(run)
            encoders = [("base", loaded.base), ("tuned", loaded.tuned)]
        else:
            encoders = [("base", self.models.base_encoder(BUNDLED_MODEL))]
            notes.append("no tuned model yet: these are the bundled base model's scores (tune one in tab ① to compare)")
        report = evaluate_sets(sets, encoders, on_progress)
        return dataclasses.replace(report, notes=notes + report.notes, caption=run_caption(run))


def new_run_info(
    folder: Path,
    base_model: str,
    texts: list[str],
    source: str,
    stats: dict[str, Any],
    model_zip: Path | None = None,
    package: bool = True,
) -> RunInfo:
    """The RunInfo of a finished run folder (model/, base_index/, tuned_index/), its downloads named for the base
    model and the run (`mirror-<base>-<run id>-model.zip`) and, with `package`, made (`package_run`).
    `model_zip`: serve this zip (an uploaded one) instead of zipping model/."""
    info = RunInfo(
        folder=folder,
        base_model=base_model,
        pooling=stats["pooling"],
        corpus=source,
        n_texts=len(texts),
        texts_key=texts_key(texts),
        stats={k: v for k, v in stats.items() if k != "losses"},
        losses=list(stats.get("losses", [])),
        summary=stats.get("summary", ""),
        model_zip=model_zip or folder / download_name(base_model, folder.name, "model"),
        index_zip=folder / download_name(base_model, folder.name, "index"),
    )
    return package_run(info, zip_model=model_zip is None) if package else info


def package_run(info: RunInfo, zip_model: bool = True) -> RunInfo:
    """The run's downloads: the model card written into model/ from the run's stats as they are now (the general
    checks included, so run them first), model/ zipped (inside: mirror-model/) unless it is an uploaded zip, and
    the tuned index zipped (inside: mirror-index/) with a meta.json pointing at the model beside it."""
    from index.folder import META_FILE, with_encoder_at

    folder = info.folder
    try:
        write_card(folder / "model", {**info.stats, "losses": info.losses}, info.base_model)
    except Exception:  # a run is never failed for its card
        log.exception("could not write the model card")
    if zip_model:
        zip_folder(folder / "model", info.model_zip, "mirror-model")
    model_dir = model_folder_in_zip(info.model_zip)  # "mirror-model" (what the app zips), or an uploaded zip's own
    index_at = posixpath.normpath(posixpath.join("..", model_dir))  # unzipped beside the model zip: no --encoder
    extra = {"README.txt": INDEX_README, META_FILE: with_encoder_at(folder / "tuned_index", index_at)}
    zip_folder(folder / "tuned_index", info.index_zip, "mirror-index", extra)
    return info


def tuned_weights(run: Path) -> Path:
    """The unblended tuned model of a run folder: tuned_model/ of a blend, model/ otherwise."""
    return run / "tuned_model" if (run / "tuned_model").is_dir() else run / "model"


def link_tree(src: Path, dst: Path) -> Path:
    """`dst` as a copy of the folder `src` made of hard links (no second copy on disk where links work)."""
    shutil.copytree(src, dst, copy_function=lambda a, b: link_or_copy(Path(a), Path(b)))
    return dst


def link_or_copy(src: Path, dst: Path) -> Path:
    """`dst` as a hard link to `src` (no second copy on disk), or a copy across file systems."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
    return dst


def stopped_text(stats: dict[str, Any], why: str, settings: Settings) -> str:
    """What the user reads when a run stopped before its end."""
    done = f"after {stats.get('steps', 0)} of {stats.get('total_steps', 0)} steps"
    if why == "time":
        limit = fmt_seconds(settings.max_run_seconds or 0)
        return (
            f"Stopped {done}: this server stops a run after {limit} (MIRROR_MAX_RUN_SECONDS); nothing was saved. "
            "Try fewer strings, fewer epochs or a smaller model."
        )
    if why == "abandoned":
        return f"Stopped {done}: the page or API client that started it went away; nothing was saved."
    return f"Cancelled {done}; nothing was saved."
