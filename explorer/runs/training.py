"""Training runs: `Trainer` starts one (Launch, /train), follows it (a reloaded page reattaches), cancels it; the
`Training` producer tunes and indexes the session's strings in the run's folder (explorer.runs.jobs.run_job), in the
run's own thread, its events straight into the run.
The slot, the disk, serving, the checks and packaging are every run's: explorer.runs.execute.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from explorer.errors import incident, user_error
from explorer.events import Cancelled, Done, Event, Failed, Finished, Note, Phase, Replanned, Served, Step, Stopped
from explorer.resources.models import ModelCache
from explorer.resources.record import Made, RunInfo, training_of
from explorer.resources.sessions import Session, texts_key
from explorer.resources.store import write_partners
from explorer.runs.execute import Plan, Producer, Runner, made_info, run_bytes, stopped_unserved
from explorer.runs.follow import progress
from explorer.runs.jobs import TrainQueue, run_job, train_job
from explorer.runs.live import FIRST_FILE, Run, RunRegistry, queue_key
from explorer.settings import Settings, zero_gpu
from explorer.tune.eta import LiveEta
from explorer.tune.inputs import build_config
from explorer.tune.planning import pairs_notes
from mirror.config import BUNDLED_MODEL
from mirror.errors import MirrorError

if TYPE_CHECKING:
    from explorer.runs.saved import SavedRuns
    from explorer.tune.estimate import Estimator
    from explorer.tune.loading import TextLoader
    from explorer.tune.planning import Planner


class Trainer:
    """Training runs: start one in its own thread, follow it (a reloaded page reattaches), cancel it. One per
    MirrorApp (`app.trainer`)."""

    def __init__(
        self,
        registry: RunRegistry,
        runner: Runner,
        queue: TrainQueue,
        loader: TextLoader,
        saved: SavedRuns,
        models: ModelCache,
        planner: Planner,
        estimator: Estimator,
        settings: Settings,
    ):
        self.registry, self.runner, self.queue, self.loader, self.saved = registry, runner, queue, loader, saved
        self.models, self.planner, self.estimator, self.settings = models, planner, estimator, settings

    def request_run(self, session: Session) -> Run:
        """Launch was clicked: the run exists (and can be cancelled) while it still waits in the queue."""
        return self.registry.ask(session)

    def cancel(self, session: Session) -> str:
        """Stop the session's run between two steps, or before it starts (while it waits in the queue)."""
        run = self.registry.of(session)  # read once: the run may end at any moment
        if run is None:
            return "Nothing is running. Your model and index (if any) stay served."
        if not run.stop("cancel"):
            return "This run is served already: its general checks and downloads follow (the status line says when)."
        kept = KEPT if session.run is not None else NOTHING_KEPT
        if self.registry.get(run.id) is run:
            return STOPPING.get(run.kind, STOPPING["run"]) + kept
        return "Cancelled before it started." + kept

    def serve_first(self, session: Session) -> str:
        """While the session's run trains a second time (a pairs run whose general checks held its blend down:
        mirror.job._train_again), stop that training at its next step and serve the first training's blend: the
        run goes on to its tuned index and checks. Written as the run folder's FIRST file, which its job reads
        between steps (here, or in another process on ZeroGPU)."""
        run = self.registry.of(session)
        if run is None:
            return "Nothing is running. Your model and index (if any) stay served."
        if run.stopping:
            return "This run is stopping already: nothing of it is served."
        if self.first_asked(session):
            return "Asked already: the second training stops at its next step and the first training's blend is served."
        events = list(run.events)
        now = next((e for e in reversed(events) if isinstance(e, Phase | Step)), None)
        if any(isinstance(e, Step) and e.training == 2 for e in events) and not isinstance(now, Step):
            return (
                "The second training has ended its steps: the better of the two trainings is served (its blend is "
                "being chosen, or it is served already)."
            )
        if not (isinstance(now, Step) and now.training == 2) or run.folder is None:
            return (
                "No second training is going on: this button stops one (a pairs run whose general checks held its "
                "blend down trains again) and serves the first training's blend instead."
            )
        with contextlib.suppress(OSError):  # the run just ended: said by the run itself
            (run.folder / FIRST_FILE).touch()
        return (
            "Stopping the second training after this step: the first training's blend is served, then its tuned "
            "index and general checks follow."
        )

    def first_asked(self, session: Session) -> bool:
        """*Serve the first training* was asked of the session's run (its FIRST file is there: `serve_first`)."""
        run = self.registry.of(session)
        return run is not None and run.folder is not None and (run.folder / FIRST_FILE).exists()

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
        run = self.registry.asked(session) or Run(session)  # an API call: no Launch click made one
        run.strings = (len(session.texts), session.source)  # what a page reattached to it says it tunes
        run.texts = tuple(session.texts)
        if session.partners is not None and session.pairing is not None:  # a pairs run: its partners come back too
            run.partners, run.pair_columns = tuple(session.partners), session.pairing.columns()
        training = Training(session, model, mode, overrides, self.models, self.planner, self.estimator, self.settings)
        return self.runner.launch(session, training, run)

    def load_for_api(
        self, session: Session, texts: str, file: str | None, column: str, settings: Any, pair_column: str = ""
    ) -> dict[str, Any]:
        """The /train API's input: `file` (or the pasted `texts`) loaded as the session's strings, with each one's
        partner from `pair_column` when given, once this visitor may queue a run (checked before 20 MB of text is
        read for a run refused anyway). What `set_texts` reports; MirrorError with the message the page would show."""
        try:
            self.queue.check(queue_key(session), session.owner.address)
            pair = str(pair_column or "").strip()
            if pair and not file:
                raise MirrorError("a partner column (pair_column) is a column of an uploaded .csv/.tsv/.jsonl file")
            info = (
                self.loader.load_file(session, file, (column or "").strip() or None, pair_column=pair or None)
                if file
                else self.loader.load_pasted(session, texts)
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
        notes = list(info.get("notes", []))
        live = self.start(session, model or BUNDLED_MODEL, mode or "auto", dict(settings or {}))
        for view in progress(live.follow()):  # the page's loop too: at most once a second, then its end
            if isinstance(view.end, Failed | Cancelled):
                raise MirrorError(view.end.text)
            if isinstance(view.end, Done):
                run = view.end.run
                # the run's record as the API has always said it (explorer.resources.record.flat), and what it was made of
                summary = {**run.stats, "base_model": run.base_model, "strings": run.n_texts, "losses": run.losses}
                summary.update(notes=notes + view.said + list(run.record.notes), run_id=run.folder.name)
                yield summary, run
                return
            state = {"status": "running", "run_id": live.id}
            if view.step is not None:
                # training 2: a pairs run's second training, which /serve_first stops (Trainer.serve_first)
                state.update(
                    step=view.step.step, total_steps=view.step.total, loss=view.step.loss, training=view.step.training
                )
            yield state, None
        raise MirrorError("the run ended without a result")

    def follow(self, run: str | Run, since: int = 0, session: Session | None = None) -> Iterator[Event]:
        """The events of a run in progress (from number `since`), e.g. for a page reloaded during its run; with
        `session`, that session shows it (it can cancel it), and is served the run once it is served (Served, then
        Done). `run`: its id, or the Run as read from the registry before (it replays its events to the end even
        when the run has ended since, and left the registry)."""
        live = run if isinstance(run, Run) else self.registry.get(run)
        if live is None:
            raise MirrorError("that run is not in progress on this server (finished, or the server restarted)")
        if session is not None:
            self.registry.attach(live, session)
        for ev in live.follow(since):
            if session is not None and isinstance(ev, Served | Done) and session.run is not ev.run:
                self.saved.open_run(session, live.id)
            yield ev


class Training(Producer):
    """A run tuned here: the session's strings (and partners) tuned and indexed in the run's folder by
    `run_job` (`train_job`, in another process, on ZeroGPU), its base index reused when the served run has the same strings
    and base. It learns the estimate what it took."""

    kind, timed = "run", True

    def __init__(
        self,
        session: Session,
        model: str,
        mode: str,
        overrides: dict[str, Any],
        models: ModelCache,
        planner: Planner,
        estimator: Estimator,
        settings: Settings,
    ):
        self.session, self.model, self.mode, self.overrides = session, model, mode, overrides
        self.models, self.planner, self.estimator, self.settings = models, planner, estimator, settings
        self.planned: Any = None  # the estimate's plan of this run, which learns what it took
        self.train_s: float | None = None

    def refusal(self) -> str | None:
        if len(self.session.texts) < 2:
            return "Load at least 2 strings first (step 1 above)."
        try:  # a model this server cannot load (refused, over its size, the hub out of reach): now, not after a wait
            self.models.check_download(self.model)
        except Exception as exc:  # MirrorError, or a bug: a message either way
            return user_error(exc)
        return None

    def prepare(self, run: Run) -> Plan:
        s = self.session  # its strings as they are when it gets its slot
        self.texts, self.source, self.partners, self.pairing = list(s.texts), s.source, s.partners, s.pairing
        model = self.models.check_download(self.model)
        pairs = self.partners is not None
        self.config, notes = build_config(
            self.texts, model, self.mode, self.overrides, self.settings.max_steps, pairs=pairs, partners=self.partners
        )
        run.emit(Phase(f"Checking the base model {self.config.model}"))
        self.base = self.models.base_encoder(self.config.model, self.config.pooling)
        models = 3 if self.config.blend_choose and pairs else 2  # tuned_model/ as well (mirror.job._choose_blend)
        return Plan(run_bytes(self.base, len(self.texts), models), tuple(notes))

    def why_alone(self, stats: dict, folder: Path) -> None:
        """The load's reasons for the rows that train alone in the run's record (and its model's): the job cleans the
        session's partners again, where each of them is None whatever its reason, and counted them all "empty" (a run
        opened again said "58 train alone (58 empty)" for 58 codes equal to their names)."""
        counted, loaded = stats.get("pairs"), self.pairing.stats if self.pairing is not None else None
        if not isinstance(counted, dict) or loaded is None or counted.get("paired") != loaded.paired:
            return
        if not loaded.accounts_for(len(self.texts)):
            return  # (the load's reasons counted rows it did not keep: a file cut at MIRROR_MAX_STRINGS)
        counted.update(empty=loaded.empty, same=loaded.same, shared=loaded.shared, other=loaded.other)
        from mirror.train import add_stats

        add_stats(folder / "model", pairs=counted)

    def holding(self) -> contextlib.AbstractContextManager:
        return self.models.using(self.config.model)  # a hub base's files stay on disk while the run uses them

    def produce(self, run: Run, folder: Path) -> RunInfo | Cancelled | Failed:
        config, texts, key, prev = self.config, self.texts, texts_key(self.texts), self.session.run
        build_base = True
        if prev and (prev.base_model, prev.pooling, prev.texts_key) == (config.model, self.base.pooling, key):
            if (prev.folder / "base_index").is_dir():  # same strings, same base: reuse its index
                shutil.copytree(prev.folder / "base_index", folder / "base_index")
                build_base = False
        # the run's plan, the one the page showed: its memory budget goes to the job, which keeps it
        # (mirror.job.kept_memory), and its priced phases time what is left of it as the steps go (explorer.tune.eta)
        budget = self.planner.launch_budget(self.session, config)  # the plan shown's, else the machine's now
        self.planned = self.planner.planned(texts, key, config, self.base, build_base, budget, self.partners)
        if self.planned is not None:  # a reattached page shows it, with what it says of the pairs (held-out rows)
            launched = SimpleNamespace(texts=texts, partners=self.partners, pairing=self.pairing)  # (as launched)
            run.planned = (self.planned, config, tuple(pairs_notes(launched, config)))
        limits: dict[str, Any] = {"memory": budget, "hub_cache": str(self.models.hub.root), "room": run.room}
        limits["first"] = (folder / FIRST_FILE).exists  # Serve the first training (Trainer.serve_first)
        cap = self.settings.max_run_seconds
        if cap and run.job_since is not None:  # its time cap as a clock time, for a job in another process (ZeroGPU)
            limits["until"] = time.time() + cap - (time.monotonic() - run.job_since)
        roots = [folder, *self.settings.model_roots]
        columns = list(self.pairing.columns()) if self.pairing is not None else None
        relay = Relay(run, self.session, self.planned)
        if zero_gpu():  # the job runs in a GPU worker process: its events come back through a generator
            run.job_starts(folder)  # its stop reaches it as a file
            # (not picklable: the job there is bounded by `until` and its GPU reservation, and reads FIRST itself)
            limits.pop("room"), limits.pop("first")
            job = train_job(texts, config.to_dict(), str(folder), [str(r) for r in roots], build_base, limits,
                            self.partners, columns)  # fmt: skip
            with contextlib.closing(job):
                for ev in job:
                    relay(ev)
        else:  # here, in the run's own thread: its events go straight into the run
            run_job(texts, config, folder, roots, build_base, limits, relay, lambda: run.stopping, self.partners,
                    columns)  # fmt: skip
        (folder / FIRST_FILE).unlink(missing_ok=True)  # asked for, read: not part of what the run keeps
        ev = relay.end  # the job's last event
        if isinstance(ev, Stopped) or (isinstance(ev, Finished) and run.stopping):
            text = stopped_text(ev.stats, run.stop_reason, self.settings)
            return Cancelled(text, tuple(ev.stats.get("losses", [])), ev.stats)
        if isinstance(ev, Finished):
            if self.partners is not None and columns:  # its strings loaded again pair with them again
                write_partners(folder, list(self.partners), (columns[0], columns[1]))
                self.why_alone(ev.stats, folder)
            made = Made.of_training(ev.stats)
            self.train_s = made.record.training.seconds
            retry = (made.record.training.blend_choice or {}).get("retry") or {}
            if "seconds" in retry:  # trained twice: the plan's training is the first (mirror.job._train_again)
                self.train_s = retry["seconds"][0]
            return made_info(folder, config.model, texts, self.source, made)
        if isinstance(ev, Failed):
            return ev
        return Failed("the run ended without a result; the previous model stays served")

    def learn(self, check_s: float | None) -> None:
        if self.planned is not None:  # a plan priced with another length's calibration teaches its checks only
            priced = 0.0 if self.planned.borrowed else self.planned.phase("training")
            self.estimator.observe(self.planned.key, priced, self.train_s, check_s)

    def failure(self, exc: Exception) -> str:
        return (
            f"the run failed unexpectedly (error {incident(exc)} in the server's log); the previous model stays served"
        )


class Relay:
    """A training job's `emit`: each event straight into the run (its followers see it as it comes), its Steps timed
    against the run's plan (explorer.tune.eta), a changed plan said at the first step that follows it, a Phase the
    user should not miss said as a Note too; the job's
    last event (Finished, Stopped, Failed) is kept as `end` for the producer to turn into the run's end."""

    def __init__(self, run: Run, session: Session, planned: Any):
        self.run, self.session, self.planned = run, session, planned
        self.eta, self.replanned, self.end = LiveEta(planned), None, None

    def __call__(self, ev: Event) -> None:
        if isinstance(ev, Finished | Stopped | Failed):
            self.end = ev
            return
        if isinstance(ev, Replanned):  # said with its new step count, at its first step
            self.replanned = ev
            return
        if isinstance(ev, Step):
            self.session.touch()  # a long run keeps its session from being swept as idle
            if self.replanned is not None:
                self.run.emit(Note(replanned_text(self.replanned, ev.total, self.planned)), stops=False)
                self.replanned = None
            ev = self.eta.timed(ev)  # its ETA: the plan's phases left, its steps re-timed as they go
        if isinstance(ev, Phase) and ev.said:  # its line passes in a blink: a note too (a toast on the page)
            self.run.emit(Note(ev.text), stops=False)
        self.run.emit(ev, stops=False)  # watched after each: abandoned, over its time or its visitor's CPU stops it


# what Cancel says stays served: the session's run, or (a first run) nothing yet
KEPT, NOTHING_KEPT = " The previous model and index stay served.", " Nothing was served before it: nothing is lost."
# what Cancel answers while a run of each kind goes on (explorer.runs.execute.Producer.kind)
STOPPING = {
    "run": "Stopping after the current step…",
    # they stop between their phases and within an index build (explorer.runs.saved): nothing of them is served
    "upload": (
        "Stopping the model upload: it ends once the model is unpacked and loaded, or at the next batch of the index "
        "it is building… the uploaded model is not served."
    ),
    "blend": (
        "Stopping the blend (or α 1, the tuned weights served again): it ends once the weights are blended, or at "
        "the next batch of its index… it is not served."
    ),
}


def replanned_text(ev: Replanned, steps: int, planned: Any) -> str:
    """What the page says when a run trains within less memory than its plan was made with: the plan changed."""
    from mirror.memory import fmt_gb

    was = f", not the {planned.steps:,} planned" if planned is not None and planned.steps != steps else ""
    return (
        f"The plan changed: this machine has less memory free than when the run was planned, so it trains within "
        f"{fmt_gb(ev.budget)} (planned: {fmt_gb(ev.planned)}), in {steps:,} steps{was} (batches of long strings split "
        "to fit: fewer negatives in those steps); the time left follows the new plan."
    )


def stopped_text(stats: dict[str, Any], why: str, settings: Settings) -> str:
    """What the user reads when a run stopped before its end (explorer.runs.execute.stopped_unserved's words): how
    far the training it stopped in got ("after 120 of 120 steps" read as the whole run's when a Cancel came in a
    pairs run's second training, at its step 5, or while it chose its blend)."""
    t = training_of(stats)
    steps, total = t.steps or 0, t.total_steps or 0
    of = " of its second training (general text held near the base)" if stats.get("second_training") else ""
    done = f"after {steps:,} of {total:,} steps{of}"
    if total and steps >= total:
        done = f"after {'its second' if of else 'its'} training's {total:,} steps, before it was served"
    return stopped_unserved(why, settings, done)
