"""One path for every kind of run. `Runner.launch(session, producer)` starts a live run (explorer.runs.live) in a
thread of its own; `Runner.execute(run, producer)` takes it through the training queue, the disk account, its folder
(removed unless served), serving, its general checks, packaging and failure, once for every kind.

A kind of run is a `Producer`: what it says before its folder exists (`prepare`: the bytes it will write) and what it
makes in its folder (`produce`: a RunInfo, not served yet). Both run in the run's own thread and report through the
run (`Run.emit`): the run is the one buffer its followers read (the page, the API, a reattached tab). A training (explorer.runs.training.Training), a model zip
(explorer.runs.saved.Upload) and a blend (explorer.runs.saved.Blend) are the three; the next kind is one more class.
A stop (explorer.runs.live.Run.stop) is honoured here for every kind: after it is prepared, between its phases (its
producer's `Run.checkpoint` and `Run.emit` calls), and just before it is served (`Run.commit`); it ends Cancelled
with the session's served run unchanged and its folder removed.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.errors import incident, user_error
from explorer.events import Cancelled, Done, Event, Failed, Note, Phase, Served, Tick
from explorer.resources.accounts import write_owner
from explorer.resources.cpu import CpuAccounts
from explorer.resources.models import ModelCache, release_memory
from explorer.resources.record import Checks, Made, RunInfo
from explorer.resources.sessions import Session, texts_key
from explorer.resources.store import RunStore
from explorer.resources.turns import TURNS, FairSlots
from explorer.runs.jobs import TrainQueue
from explorer.runs.live import Run, RunRegistry, Status, StopAsked
from explorer.settings import Settings
from explorer.share.packaging import package_run
from explorer.words import fmt_seconds
from mirror.errors import MirrorError
from mirror.exports import download_name

log = logging.getLogger("mirror.app")
BUSY = "A run is already in progress in this session; wait for it or cancel it."
KIND_WORDS = {"run": "run", "blend": "blend", "upload": "uploaded model"}


def busy(going: Run | None) -> str:
    """Why a session's second run is refused: BUSY, or, when the one going is served and checked (its general checks
    cannot be cancelled), that (a Launch right after a blend from Explore said "wait for it or cancel it", and
    Cancel had nothing to stop)."""
    if going is None or not going.checking:
        return BUSY
    what = KIND_WORDS.get(going.kind, "run")
    return (
        f"Your {what} is served and its general checks are running (they finish on their own, usually within a "
        "minute; Cancel cannot stop them): launch again when they are done."
    )


@dataclass(frozen=True)
class Plan:
    """What a run says before its folder exists: about the bytes it will write (its disk account is asked for
    them), and notes for the user."""

    incoming: int
    notes: tuple[str, ...] = ()


class Producer:
    """A kind of run: what it makes in its folder. `execute` does the rest (the slot, the disk, the folder, serving,
    the checks, packaging, failure), the same for every kind. Subclasses write `prepare` and `produce`."""

    kind = "run"  # what the run is called in its thread's name and its log lines
    what = "a run"  # what the user reads it called when its CPU account refuses it ("... so a run cannot start now")
    checked = True  # its general checks follow its serving (when the server runs them: MIRROR_GENERAL_CHECKS)
    timed = False  # its record keeps its wall time from its folder to served (a training's page says it)

    def refusal(self) -> str | None:
        """Why the run cannot begin at all (said before it joins the queue), or None."""
        return None

    def prepare(self, run: Run) -> Plan:
        """Holding its training slot, before its folder exists: what it will write (its events through
        `run.emit`)."""
        raise NotImplementedError

    def produce(self, run: Run, folder: Path) -> RunInfo | Cancelled | Failed:
        """Make the run in `folder`: its RunInfo (not served yet), or the Cancelled or Failed that ends it. An
        exception fails it (`failure` says how); its folder is removed unless it is served. It reports through
        `run.emit` (its followers see each event as it comes; a stop asked meanwhile raises StopAsked there, which
        ends it Cancelled) and calls `run.checkpoint()` between its phases; a job that honours a stop itself (a
        training, between steps) reports through `run.emit(event, stops=False)`, which never raises."""
        raise NotImplementedError

    def holding(self) -> contextlib.AbstractContextManager:
        """Around making and serving it (a training keeps its hub base on disk meanwhile)."""
        return contextlib.nullcontext()

    def learn(self, check_s: float | None) -> None:
        """Once served: what its general checks took a model (None: not run), for the estimate to learn from."""

    def failure(self, exc: Exception) -> str:
        """What the user reads when making it raised something other than a MirrorError (logged)."""
        return f"the {self.kind} failed (error {incident(exc)} in the server's log); the previous model stays served"


class Runner:
    """Runs of every kind, each in a thread of its own, through one path (`execute`): background work that yields
    to interactive work (explorer.resources.turns), its CPU charged to its visitor (`cpu`). One per MirrorApp
    (`app.runner`)."""

    def __init__(
        self,
        registry: RunRegistry,
        queue: TrainQueue,
        models: ModelCache,
        store: RunStore,
        check_disk: Callable[[Session, int], list[str]],
        settings: Settings,
        search_slots: FairSlots,
        cpu: CpuAccounts,
    ):
        self.registry, self.queue, self.models, self.store = registry, queue, models, store
        self.check_disk, self.settings, self.search_slots, self.cpu = check_disk, settings, search_slots, cpu

    def launch(self, session: Session, producer: Producer, run: Run | None = None) -> Run:
        """Start `producer` as the session's run (`run`: the one its Launch click asked for) in a thread of its own,
        and return it: its id, its status, its events (`Run.follow`). A session with a run going gets one that ended
        refused."""
        run = run or Run(session)
        run.kind, run.watcher = producer.kind, self.watch  # watched after each event, its producer's own too
        if not self.registry.begin(run):
            return Run.refused(busy(self.registry.going(session)))
        name = f"mirror-{run.kind}-{run.id[:8]}"
        threading.Thread(target=self._drive, args=(run, producer), name=name, daemon=True).start()
        return run

    def _drive(self, run: Run, producer: Producer) -> None:
        """The run's thread: it executes the run, whose events go into the run as they come, then its last. All of
        it is background work: its steps, its index builds and its checks pause while a map, an export or an
        evaluation runs (explorer.resources.turns)."""
        try:
            with TURNS.background():
                run.publish(self.execute(run, producer))
        except Exception as exc:  # a bug: the followers get a message, the server goes on
            log.exception("run thread failed")
            run.publish(Failed(user_error(exc)))
        finally:
            self.registry.end(run)
            run.end()

    def watch(self, run: Run) -> None:
        """The one place a run is found abandoned (nobody followed it for MIRROR_ABANDONED_S: its page closed, its
        API client gone) or over its time (MIRROR_MAX_RUN_SECONDS since its folder was made, whatever its kind: a
        training, a model upload, a blend), and stopped for it. A run waiting for a slot gives its place up; a served
        one is past stopping."""
        import explorer.runs.jobs as jobs

        if run.unwatched_for() > jobs.ABANDONED_S:
            run.stop("abandoned")
        elif run.overdue(self.settings.max_run_seconds):
            run.stop("time")
        elif run.session is not None and self.cpu.over(run.session.owner):
            run.stop("cpu")  # its visitor's hour of CPU spent meanwhile: checked during a run, not only at its start

    def room(self, run: Run, job: Any, seconds: float) -> str | None:
        """Why `run` may not go on `seconds` more (a pairs run's second training: mirror.job), or None: the watch
        would stop it over its time (MIRROR_MAX_RUN_SECONDS) or its visitor's hour of CPU, spent at the rate the run
        has spent it since its slot. Stopped there, it would serve nothing."""
        cap, now = self.settings.max_run_seconds, time.monotonic()
        if cap and run.job_since is not None and seconds > cap - (now - run.job_since):
            left = max(0.0, cap - (now - run.job_since))
            return (
                f"would not end within this server's time for a run ({fmt_seconds(left)} left of "
                f"{fmt_seconds(cap)}, MIRROR_MAX_RUN_SECONDS)"
            )
        if run.session is None or run.slot_at is None or now <= run.slot_at:
            return None
        spent, left = self.cpu.spending(job, run.session.owner)
        needed = spent / (now - run.slot_at) * seconds
        if needed > left:
            return (
                f"would spend ~{needed:,.0f} CPU seconds where this server leaves you {max(0.0, left):,.0f} of your "
                "hour's budget (MIRROR_VISITOR_CPU_S, MIRROR_ADDRESS_CPU_S)"
            )
        return None

    def execute(self, run: Run, producer: Producer) -> Event:
        """A run from its first event to its last: it waits for a training slot (one place per visitor; how many
        are ahead, cancellable), holds it while it is made, served, checked and packaged, and gives it back before
        its last event (Done, Cancelled or Failed). Its CPU is charged to its visitor while it holds the slot (a
        visitor or address past its hour's budget is refused before it waits, and again when its slot comes). Its
        events go into the run as they come; it returns its last. Never raises for bad input: it ends Failed."""
        if run.stopping:
            return Cancelled("Cancelled before it started.")
        refusal = producer.refusal()
        if refusal:
            return Failed(refusal)
        owner = run.session.owner
        try:
            self.cpu.check(owner, producer.what)  # before it waits for a slot it would be refused at
            self.queue.join(run)  # refused at once when its visitor has another run in line, or the line is full
        except MirrorError as exc:
            return Failed(str(exc))
        end: Event = Cancelled("Cancelled before it started.")
        try:
            shown = None
            for ahead in self.queue.wait(run):
                if ahead != shown:
                    shown = ahead
                    jobs = f"{ahead} job{'s' if ahead != 1 else ''}"
                    run.emit(Phase(f"Waiting for a training slot ({jobs} ahead of yours)"), stops=False)
                else:
                    run.emit(Tick(), stops=False)  # watched while it waits: abandoned, it gives its place up
            if run.status is not Status.QUEUED:  # it holds a slot (else it was asked to stop while it waited)
                run.slot_at = time.monotonic()  # its wait for a slot ends here (a run's status says it)
                try:
                    with self.cpu.metered(owner, producer.what) as job:  # its work, checks included: its visitor's
                        run.room = lambda seconds: self.room(run, job, seconds)
                        end = self._make(run, producer)
                except MirrorError as exc:  # its visitor's CPU budget ran out while it waited
                    end = Failed(str(exc))
                finally:
                    release_memory()
        finally:
            self.queue.leave(run)
        return end

    def _make(self, run: Run, producer: Producer) -> Event:
        """Holding the slot: prepared, the disk asked, made in a fresh folder (removed unless served), served, checked
        and packaged. Returns its last event."""
        session = run.session
        try:
            plan = producer.prepare(run)
            notes = [*self.check_disk(session, plan.incoming), *plan.notes]
            for n in notes:
                run.emit(Note(n), stops=False)
            run.checkpoint()  # stopped while it was prepared: no folder made
            folder = self.store.folder(run.id)
            folder.mkdir(parents=True)
            write_owner(folder, session.owner)  # charged to its visitor from its first byte
            run.begins(folder)  # the time cap (MIRROR_MAX_RUN_SECONDS) counts from here, for every kind
            clock = (time.perf_counter(), time.time())
            with discarded_unless_served(folder) as served, producer.holding():
                made = producer.produce(run, folder)
                if not isinstance(made, RunInfo):
                    return made
                try:
                    self._serve(run, producer, made, served, clock)
                except StopAsked as stop:  # stopped before it was served: its losses so far, for the page's curve
                    return Cancelled(stopped_unserved(str(stop), self.settings), tuple(made.losses), dict(made.stats))
                return Done(made, tuple(notes) + tuple(made.record.notes))
        except StopAsked as stop:  # while it was prepared or made: nothing of it is served, its folder goes
            return Cancelled(stopped_unserved(str(stop), self.settings))
        except MirrorError as exc:
            return Failed(str(exc))
        except Exception as exc:
            incident(exc, f"{producer.kind} failed")  # details (which may name server paths) stay in the log
            return Failed(producer.failure(exc))

    def _serve(
        self, run: Run, producer: Producer, info: RunInfo, served: list[RunInfo], clock: tuple[float, float]
    ) -> None:
        """Serve what the run made: packaged first when no general checks follow; else served before them (search
        and Explore use it while they run), then checked, then packaged (its card and downloads carry them). A stop
        asked before it is served raises StopAsked (`Run.commit`): nothing of it is served; one asked later is
        refused (`Run.stop`)."""
        session, timed = run.session, producer.timed
        if timed and run.slot_at is not None:  # the wait for a training slot, which its wall time leaves out
            info.record.timing.waited_seconds = round(max(0.0, run.slot_at - run.asked_at), 1)
        if not (producer.checked and self.settings.general_checks):
            run.checkpoint()
            run.emit(Phase("Preparing downloads"), stops=False)
            package_run(info)
            run.commit()  # past stopping from here: served, or failed
            producer.learn(None)
            served.append(self.serve(session, info))
            self.measure_change(info)
            self.store.save(finished(info, *clock) if timed else info)
            return
        run.commit()  # past stopping from here: served (then checked), or failed
        if timed:
            finished(info, *clock)  # provisional: a server stopped mid-check keeps these
        run.serving(info)  # its status: checking; whoever opens it meanwhile gets `info`
        served.append(self.serve(session, info, checks_pending=True))  # a broken model fails here, before the swap
        if timed:
            info.record.timing.served_seconds = round(time.perf_counter() - clock[0], 1)
        run.emit(Served(info), stops=False)
        self.check_and_package(run, info, producer)
        self.store.save(finished(info, *clock) if timed else info)

    def serve(self, session: Session, info: RunInfo, checks_pending: bool = False) -> RunInfo:
        """Check the new run loads, keep it (run.json: from now on its id reaches it), then serve it. The run it
        replaces stays in the store (the session's history, others' links) until the run budget removes it."""
        self.models.loaded(info)  # load now: a broken artifact fails here, before the swap
        self.store.save(info, checks_pending)
        with session.lock:
            session.run = info
            session.run_ids.append(info.folder.name)
        return info

    def check_and_package(self, run: Run, info: RunInfo, producer: Producer) -> None:
        """A served run's general checks, then its card and downloads (which carry them). Nothing here fails the
        run: it is served already; a check that cannot run is left out (logged), downloads that cannot be made are
        said. run.json keeps `checks_pending` until the caller saves it after this (a server stopped before that
        leaves it: the run's next opening repairs it)."""
        from explorer.compare.forgetting import base_scored, general_checks

        run.emit(Phase("Checking general similarity (the forgetting check)"), stops=False)
        try:
            loaded = self.models.loaded(info)  # loaded by `serve` just before
            encoders = 1 if base_scored(loaded.base) else 2
            info.record.checks = general_checks(loaded.base, loaded.tuned, loaded.main.tuned.texts, self.search_slots)
            check_s = info.record.checks.seconds
            producer.learn(check_s / encoders if check_s is not None else None)
        except Exception:  # a bug: the served run stays served, without its checks
            log.exception("the general checks of a served run failed")
            info.record.checks = Checks(failed=True)
        self.measure_change(info)
        run.emit(Phase("Preparing downloads"), stops=False)
        try:
            package_run(info)  # its card has the checks' results
        except Exception as exc:
            log.exception("could not package the run's downloads")
            info.record.notes.append(f"The downloads could not be made ({exc}).")

    def measure_change(self, info: RunInfo) -> None:
        """What the page says in one sentence: how much the served run's strings' neighbours changed, from its two
        indexes; left out (logged) when it cannot be measured: a run is never failed for it."""
        from explorer.compare.explore import neighbours_changed

        try:
            with self.search_slots:
                info.record.neighbours_changed = neighbours_changed(self.models.loaded(info))
        except Exception:
            log.exception("could not measure how much the neighbours changed")


def stopped_unserved(why: str, settings: Settings, done: str = "before it was served") -> str:
    """What the user reads when a run was stopped before it was served (`why`: the stop's reason; `done`: how far it
    got, "after 57 of 1000 steps" for a training stopped between steps)."""
    if why == "time":
        limit = fmt_seconds(settings.max_run_seconds or 0)
        return (
            f"Stopped {done}: this server stops a run after {limit} (MIRROR_MAX_RUN_SECONDS); nothing was saved. "
            "Try fewer strings, fewer epochs or a smaller model."
        )
    if why == "abandoned":
        return f"Stopped {done}: the page or API client that started it went away; nothing was saved."
    if why == "cpu":
        return (
            f"Stopped {done}: your visitor (or address) spent its hour's CPU budget on this server during the run "
            "(MIRROR_VISITOR_CPU_S, MIRROR_ADDRESS_CPU_S); nothing was saved. Try again later."
        )
    return f"Cancelled {done}; nothing was saved."


@contextlib.contextmanager
def discarded_unless_served(folder: Path) -> Iterator[list[RunInfo]]:
    """Remove the run `folder` unless the body put the RunInfo it now serves into the list."""
    served: list[RunInfo] = []
    try:
        yield served
    finally:
        if not served:
            shutil.rmtree(folder, ignore_errors=True)


def run_bytes(encoder: Any, n_texts: int, models: int = 2) -> int:
    """About what a run on `encoder` writes: its model `models` times (the folder and its zip, weights barely
    compress; a pairs run that chooses its blend keeps the weights as trained too: 3) and two indexes of `n_texts`
    rows (vectors and texts)."""
    weights = sum(p.numel() * p.element_size() for p in encoder.model.parameters())
    return models * weights + 2 * n_texts * (4 * encoder.dim + 64)


def made_info(
    folder: Path, base_model: str, texts: Sequence[str], source: str, made: Made, model_zip: Path | None = None
) -> RunInfo:
    """The RunInfo of what a run made in `folder` (model/, base_index/, tuned_index/), its downloads named for the
    base model and the run (`mirror-<base>-<run id>-model.zip`; made when it is served). `model_zip`: serve this
    zip (an uploaded one) instead of zipping model/."""
    return RunInfo(
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


def finished(info: RunInfo, started: float, started_at: float) -> RunInfo:
    """`info` with the run's wall time (from its folder to served with its checks and downloads) and clock times."""
    timing = info.record.timing
    timing.wall_seconds = round(time.perf_counter() - started, 1)
    timing.started_at, timing.finished_at = round(started_at, 3), round(time.time(), 3)
    return info
