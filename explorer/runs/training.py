"""Runs: start one in its own thread, follow it (a reloaded page reattaches), cancel it, hold a training slot,
then check, package and serve what it made (`serve`). Saved models and blends (explorer.runs.saved) reuse the slot
and the serving.
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from explorer.events import (
    TERMINAL,
    Cancelled,
    Done,
    Event,
    Failed,
    Finished,
    Note,
    Phase,
    Served,
    Step,
    Stopped,
    Tick,
)
from explorer.render import fmt_seconds, user_error
from explorer.runs.accounts import write_owner
from explorer.runs.jobs import train_job
from explorer.runs.live import Run, Status, queue_key
from explorer.runs.models import release_memory
from explorer.runs.record import Checks, Made, training_of
from explorer.runs.sessions import RunInfo, Session, texts_key
from explorer.settings import Settings
from explorer.share.card import write_card
from explorer.share.uploads import model_folder_in_zip, zip_folder
from explorer.tune.inputs import build_config
from mirror.config import BUNDLED_MODEL
from mirror.errors import MirrorError
from mirror.exports import download_name

log = logging.getLogger("mirror.app")
BUSY = "A run is already in progress in this session; wait for it or cancel it."
INDEX_README = """\
A Mirror Explorer search index (FAISS) of your strings, built with the tuned model.
Unzip the model zip beside it (this folder and mirror-model/ side by side), then search it:

  with sentence-transformers and FAISS alone (pip install sentence-transformers faiss-cpu):
    import json, faiss
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer("mirror-model")
    index = faiss.read_index("mirror-index/index.faiss")        # exact inner product over unit vectors
    texts = json.load(open("mirror-index/texts.json", encoding="utf-8"))
    scores, ids = index.search(model.encode(["your query"], normalize_embeddings=True), 10)
    print([(texts[i], float(s)) for i, s in zip(ids[0], scores[0])])

  with Mirror Explorer's own command (its virtualenv's python, from any folder):
    /path/to/mirror-explorer/.venv/bin/python -m index query mirror-index "your query"
"""


class Trainer:
    """Runs: start one in its own thread, follow it (a reloaded page reattaches), cancel it, hold a training slot,
    serve it. One per MirrorApp (`app.trainer`), over its state."""

    def __init__(self, app: Any):  # the MirrorApp (explorer.service) that composes it
        self.app = app

    def request_run(self, session: Session) -> Run:
        """Launch was clicked: the run exists (and can be cancelled) while it still waits in the queue."""
        return self.app.registry.ask(session)

    def cancel(self, session: Session) -> str:
        """Stop the session's run between two steps, or before it starts (while it waits in the queue)."""
        run = self.app.registry.of(session)  # read once: the run may end at any moment
        if run is None:
            return "Nothing is running. Your model and index (if any) stay served."
        if not run.stop("cancel"):
            return "This run is served already: its general checks and downloads follow in a few seconds."
        if self.app.registry.get(run.id) is run:
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

    def start(self, session: Session, model: str, mode: str, overrides: dict[str, Any]) -> Run:
        """Start the session's run in its own thread; returns it (id, status, events)."""
        registry = self.app.registry
        run = registry.asked(session) or Run(session)  # an API call: no Launch click made one
        run.strings = (len(session.texts), session.source)  # what a page reattached to it says it tunes
        run.texts = tuple(session.texts)
        if not registry.begin(run):
            return Run.refused(BUSY)
        args = (session, run, model, mode, overrides)
        threading.Thread(target=self._run, args=args, name=f"mirror-run-{run.id[:8]}", daemon=True).start()
        return run

    def load_for_api(
        self, session: Session, texts: str, file: str | None, column: str, settings: Any, pair_column: str = ""
    ) -> dict[str, Any]:
        """The /train API's input: `file` (or the pasted `texts`) loaded as the session's strings, with each one's
        partner from `pair_column` when given, once this visitor may queue a run (checked before 20 MB of text is
        read for a run refused anyway). What `set_texts` reports; MirrorError with the message the page would show."""
        try:
            self.app.train_queue.check(queue_key(session), session.owner.address)
            pair = str(pair_column or "").strip()
            if pair and not file:
                raise MirrorError("a partner column (pair_column) is a column of an uploaded .csv/.tsv/.jsonl file")
            info = (
                self.app.loader.load_file(session, file, (column or "").strip() or None, pair_column=pair or None)
                if file
                else self.app.loader.load_pasted(session, texts)
            )
            if settings is not None and not isinstance(settings, dict):
                raise MirrorError('settings must be a JSON object such as {"max_steps": 20}')
        except Exception as exc:  # MirrorError, or a bug: a message either way
            raise MirrorError(user_error(exc)) from None
        return info

    def train_stream(
        self, session: Session, info: dict[str, Any], model: str, mode: str, settings: dict | None
    ) -> Iterator[tuple[dict[str, Any], RunInfo | None]]:
        """The /train API's run on the strings `load_for_api` loaded (`info`): yields (progress, None) as the run goes
        (the run id with the first, so the client's /cancel can reach it; then at most once a second), then
        (summary, run). Errors raise MirrorError with the message the page would show."""
        notes, progress, last = list(info.get("notes", [])), {"status": "queued"}, 0.0
        run = self.start(session, model or BUNDLED_MODEL, mode or "auto", dict(settings or {}))
        for ev in run.follow():
            if isinstance(ev, Failed | Cancelled):
                raise MirrorError(ev.text)
            if isinstance(ev, Done):
                run = ev.run
                # the run's record as the API has always said it (explorer.runs.record.flat), and what it was made of
                summary = {**run.stats, "base_model": run.base_model, "strings": run.n_texts, "losses": run.losses}
                summary.update(notes=notes + list(run.record.notes), run_id=run.folder.name)
                yield summary, run
                return
            if isinstance(ev, Note):
                notes.append(ev.text)
            if isinstance(ev, Step):
                progress.update(step=ev.step, total_steps=ev.total, loss=ev.loss)
            if "run_id" not in progress and run.status.live:
                progress.update(status="running", run_id=run.id)
                last = 0.0
            if time.monotonic() - last >= 1.0:
                last = time.monotonic()
                yield dict(progress), None
        raise MirrorError("the run ended without a result")

    def follow(self, run: str | Run, since: int = 0, session: Session | None = None) -> Iterator[Event]:
        """The events of a run in progress (from number `since`), e.g. for a page reloaded during its run; with
        `session`, that session shows it (it can cancel it), and is served the run once it is served (Served, then
        Done). `run`: its id, or the Run as read from the registry before (it replays its events to the end even
        when the run has ended since, and left the registry)."""
        live = run if isinstance(run, Run) else self.app.registry.get(run)
        if live is None:
            raise MirrorError("that run is not in progress on this server (finished, or the server restarted)")
        if session is not None:
            self.app.registry.attach(live, session)
        for ev in live.follow(since):
            if session is not None and isinstance(ev, Served | Done) and session.run is not ev.run:
                self.app.saved.open_run(session, live.id)
            yield ev

    def _run(self, session: Session, run: Run, model: str, mode: str, overrides: dict[str, Any]) -> None:
        """The run's thread: its events into the run; a stop when nobody follows it any more, or past its time."""
        import explorer.runs.jobs as jobs

        try:
            for ev in self._run_events(session, run, model, mode, overrides):
                run.publish(ev)
                if run.unwatched_for() > jobs.ABANDONED_S:
                    run.stop("abandoned")  # still waiting for a training slot: it gives its place up
                elif run.overdue(self.app.settings.max_run_seconds):
                    run.stop("time")
        except Exception as exc:  # a bug: the followers get a message, the server goes on
            log.exception("run thread failed")
            run.publish(Failed(user_error(exc)))
        finally:
            self.app.registry.end(run)
            run.end()

    def _run_events(
        self, session: Session, run: Run, model: str, mode: str, overrides: dict[str, Any]
    ) -> Iterator[Event]:
        if run.stopping:
            yield Cancelled("Cancelled before it started.")
            return
        if len(session.texts) < 2:
            yield Failed("Load at least 2 strings first (step 1 above).")
            return
        yield from self.exclusive(run, self._train(session, run, model, mode, overrides))

    def exclusive(self, run: Run, events: Iterator[Event]) -> Iterator[Event]:
        """Run a job's events holding a training slot; its final event is yielded after the job cleaned up.

        The run takes its visitor's one place in the training queue (app.train_queue: refused at once when the
        visitor has another run going or waiting, or the line is full), says how many are ahead while it waits
        (cancellable), then runs."""
        queue = self.app.train_queue
        try:
            queue.join(run)
        except MirrorError as exc:
            events.close()
            yield Failed(str(exc))
            return
        try:
            shown = None
            for ahead in queue.wait(run):
                if ahead != shown:
                    shown = ahead
                    yield Phase(f"Waiting for a training slot ({ahead} job{'s' if ahead != 1 else ''} ahead of yours)")
                else:
                    yield Tick()
            if run.status is Status.QUEUED:
                events.close()
                yield Cancelled("Cancelled before it started.")
                return
            yield from self._holding_slot(run, events)
        finally:
            queue.leave(run)

    def _holding_slot(self, run: Run, events: Iterator[Event]) -> Iterator[Event]:
        terminal = None
        try:
            with contextlib.closing(events) as job:
                for ev in job:
                    if isinstance(ev, TERMINAL):
                        terminal = ev
                        break
                    yield ev
        finally:
            self.app.train_queue.leave(run)
            release_memory()
        if terminal is not None:
            yield terminal

    def _train(self, session: Session, live: Run, model: str, mode: str, overrides: dict[str, Any]) -> Iterator[Event]:
        texts, source = list(session.texts), session.source
        partners, pairing = session.partners, session.pairing
        try:
            config, notes = build_config(
                texts,
                self.app.models.check_download(model),
                mode,
                overrides,
                self.app.settings.max_steps,
                pairs=partners is not None,
            )
            yield Phase(f"Checking the base model {config.model}")
            base = self.app.models.base_encoder(config.model, config.pooling)
            notes = [*self.app.check_disk(session, run_bytes(base, len(texts))), *notes]
        except Exception as exc:  # MirrorError, or a bug: a message either way
            yield Failed(user_error(exc))
            return
        yield from (Note(n) for n in notes)
        run = self.new_run_folder(session, live)
        key, prev = texts_key(texts), session.run
        build_base = True
        if prev and (prev.base_model, prev.pooling, prev.texts_key) == (config.model, base.pooling, key):
            if (prev.folder / "base_index").is_dir():  # same strings, same base: reuse its index
                shutil.copytree(prev.folder / "base_index", run / "base_index")
                build_base = False
        planned = self.app.planner.planned(texts, key, config, base, build_base)  # to learn from, once the run has run
        started, started_at = time.perf_counter(), time.time()
        limits = {
            "memory": self.app.settings.train_memory_bytes,
            "hub_cache": str(self.app.models.hub.root),
        }
        roots = [str(run)] + [str(r) for r in self.app.settings.model_roots]
        try:
            with self.discarded_unless_served(run) as served, self.app.models.using(config.model):
                columns = list(pairing.columns()) if pairing is not None else None
                live.carry_stop(run)  # the job may be in another process (ZeroGPU): a stop reaches it as a file
                job = train_job(texts, config.to_dict(), str(run), roots, build_base, limits, partners, columns)
                for ev in job:
                    if isinstance(ev, Step):
                        session.touch()  # a long run keeps its session from being swept as idle
                    if isinstance(ev, Stopped) or (isinstance(ev, Finished) and live.stopping):
                        text = stopped_text(ev.stats, live.stop_reason, self.app.settings)
                        yield Cancelled(text, tuple(ev.stats.get("losses", [])), ev.stats)
                        return
                    if isinstance(ev, Finished):
                        info = new_run_info(run, config.model, texts, source, Made.of_training(ev.stats), package=False)
                        train_s = info.record.training.seconds
                        if not self.app.settings.general_checks:
                            if planned is not None:
                                self.app.estimator.observe(planned.key, planned.phase("training"), train_s, None)
                            yield Phase("Preparing downloads")
                            served.append(self.serve(session, package_run(info)))
                            self.measure_change(info)
                            self.app.runs.save(finished(info, started, started_at))
                            yield Done(info)
                            return
                        # served before its checks: search and Explore use the run while they run (seconds, more on a
                        # CPU without bf16 or a larger base), then its card and downloads carry them
                        finished(info, started, started_at)  # provisional: a server stopped mid-check keeps these
                        served.append(self.serve_first(live, info))  # a broken model fails here, before the swap
                        info.record.timing.served_seconds = round(time.perf_counter() - started, 1)
                        yield Served(info)
                        clock = (started, started_at)
                        yield from self.check_and_package(info, texts, planned, train_s, clock)
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

    def serve_first(self, run: Run, info: RunInfo) -> RunInfo:
        """Serve `info` before its general checks (`check_and_package` next): its run is checking, and `info` the one
        RunInfo whoever opens the run meanwhile gets (the registry's), so the checks complete it for every session."""
        run.serving(info)
        return self.serve(run.session, info, checks_pending=True)

    def check_and_package(
        self,
        info: RunInfo,
        texts: Sequence[str],
        planned: Any = None,
        train_s: float | None = None,
        clock: tuple[float, float] | None = None,
    ) -> Iterator[Event]:
        """A served run's (or blend's) general checks, then its card and downloads (which carry them), then run.json
        without `checks_pending` (a server stopped before that leaves it: the run's next opening repairs it). `planned`: the estimate's plan of a training run, which learns what they cost;
        `clock`: its (perf_counter, time) at Launch, for its wall time. Nothing here fails the run: it is served
        already; a check that cannot run is left out (logged), downloads that cannot be made are said."""
        from explorer.compare.forgetting import base_scored

        yield Phase("Checking general similarity (the forgetting check)")
        try:
            loaded = self.app.models.loaded(info)  # loaded by `serve` just before
            encoders = 1 if base_scored(loaded.base) else 2
            info.record.checks = self.forgetting(loaded.base, loaded.tuned, texts)
            check_s = info.record.checks.seconds
            if planned is not None:
                check_s = check_s / encoders if check_s is not None else None
                self.app.estimator.observe(planned.key, planned.phase("training"), train_s, check_s)
        except Exception:  # a bug: the served run stays served, without its checks
            log.exception("the general checks of a served run failed")
            info.record.checks = Checks(failed=True)
        self.measure_change(info)
        yield Phase("Preparing downloads")
        try:
            package_run(info)  # its card has the checks' results
        except Exception as exc:
            log.exception("could not package the run's downloads")
            info.record.notes.append(f"The downloads could not be made ({exc}).")
        self.app.runs.save(finished(info, *clock) if clock else info)

    def measure_change(self, info: RunInfo) -> None:
        """What the page says in one sentence: how much the served run's strings' neighbours changed (stats), from
        its two indexes; left out (logged) when it cannot be measured: a run is never failed for it."""
        try:
            with self.app.search_slots:
                info.record.neighbours_changed = neighbours_changed(self.app.models.loaded(info))
        except Exception:
            log.exception("could not measure how much the neighbours changed")

    def new_run_folder(self, session: Session, run: Run) -> Path:
        """The run's folder, charged to the session's visitor from its first byte."""
        folder = self.app.runs.folder(run.id)
        folder.mkdir(parents=True)
        write_owner(folder, session.owner)
        run.folder = folder
        return folder

    @contextlib.contextmanager
    def discarded_unless_served(self, run: Path) -> Iterator[list[RunInfo]]:
        """Remove `run` unless the body put the RunInfo it now serves into the list; bugs become a Failed event
        upstream (the caller's generator yields it)."""
        served: list[RunInfo] = []
        try:
            yield served
        finally:
            if not served:
                shutil.rmtree(run, ignore_errors=True)

    def serve(self, session: Session, info: RunInfo, checks_pending: bool = False) -> RunInfo:
        """Check the new run loads, keep it (run.json: from now on its id reaches it), then serve it. The run it
        replaces stays in the store (the session's history, others' links) until the run budget removes it."""
        self.app.models.loaded(info)  # load now: a broken artifact fails here, before the swap
        self.app.runs.save(info, checks_pending)
        with session.lock:
            session.run = info
            session.run_ids.append(info.folder.name)
        return info

    def forgetting(self, base, tuned, texts: Sequence[str] = ()) -> Checks:
        """The general checks (explorer.compare.forgetting) of a tuned encoder against its base, and beside them, when the
        run's strings have enough long ones, the label-free self-check on them (`own_long_texts`, not counted in the
        seconds the estimate learns from); failed (logged) when they cannot run here: a run is never failed for its
        checks. Seconds on a CPU (the base's scores are kept)."""
        from explorer.compare.forgetting import CHECKS, forgetting_check, own_long_texts, verdict

        try:
            started, rows = time.perf_counter(), []
            for check in CHECKS:  # a search slot per check: a served run's searches wait for one check at most
                with self.app.search_slots:
                    rows += forgetting_check(base, tuned, checks=[check])["checks"]
            seconds = round(time.perf_counter() - started, 1)
            with self.app.search_slots:
                own = own_long_texts(base, tuned, texts)
            return Checks(rows, verdict(rows), seconds, own)
        except Exception:
            log.exception("forgetting check failed; the run goes on without it")
            return Checks(failed=True)


def neighbours_changed(loaded: Any, k: int = 10) -> float:
    """The share (0-1) of the run's strings' k nearest neighbours that are not the base's, from the vectors its two
    indexes hold (no re-encoding): the mean of what the Explore tab's "what moved" ranks."""
    from explorer.compare.explore import vectors_of
    from mirror.moved import changed_share

    return round(changed_share(vectors_of(loaded.main.base), vectors_of(loaded.main.tuned), k), 4)


def run_bytes(encoder: Any, n_texts: int) -> int:
    """About what a run on `encoder` writes: its model twice (the folder and its zip, weights barely compress) and
    two indexes of `n_texts` rows (vectors and texts)."""
    weights = sum(p.numel() * p.element_size() for p in encoder.model.parameters())
    return 2 * weights + 2 * n_texts * (4 * encoder.dim + 64)


def new_run_info(
    folder: Path,
    base_model: str,
    texts: list[str],
    source: str,
    made: Made,
    model_zip: Path | None = None,
    package: bool = True,
) -> RunInfo:
    """The RunInfo of a finished run folder (model/, base_index/, tuned_index/) and what made it (its record, pooling,
    summary and losses), its downloads named for the base model and the run (`mirror-<base>-<run id>-model.zip`)
    and, with `package`, made (`package_run`). `model_zip`: serve this zip (an uploaded one) instead of zipping
    model/."""
    info = RunInfo(
        folder=folder,
        base_model=base_model,
        pooling=made.pooling,
        corpus=source,
        n_texts=len(texts),
        texts_key=texts_key(texts),
        record=made.record,
        losses=list(made.losses),
        summary=made.summary,
        model_zip=model_zip or folder / download_name(base_model, folder.name, "model"),
        index_zip=folder / download_name(base_model, folder.name, "index"),
    )
    return package_run(info, zip_model=model_zip is None) if package else info


def finished(info: RunInfo, started: float, started_at: float) -> RunInfo:
    """`info` with the run's wall time (from Launch to served with its checks and downloads) and its clock times."""
    timing = info.record.timing
    timing.wall_seconds = round(time.perf_counter() - started, 1)
    timing.started_at, timing.finished_at = round(started_at, 3), round(time.time(), 3)
    return info


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


def stopped_text(stats: dict[str, Any], why: str, settings: Settings) -> str:
    """What the user reads when a run stopped before its end."""
    t = training_of(stats)
    done = f"after {t.steps or 0} of {t.total_steps or 0} steps"
    if why == "time":
        limit = fmt_seconds(settings.max_run_seconds or 0)
        return (
            f"Stopped {done}: this server stops a run after {limit} (MIRROR_MAX_RUN_SECONDS); nothing was saved. "
            "Try fewer strings, fewer epochs or a smaller model."
        )
    if why == "abandoned":
        return f"Stopped {done}: the page or API client that started it went away; nothing was saved."
    return f"Cancelled {done}; nothing was saved."
