"""The training job and the slots it runs in.

`run_job` tunes and indexes (`mirror.job.tune_and_index`) in the calling thread, reporting through a callback
and stopping when asked: a run calls it in its own thread, and its events go straight into the run
(explorer.runs.training). Only on a ZeroGPU Space, where the job runs inside `spaces.GPU` in another process, does
`train_job` wrap it as a generator of picklable events, its stop carried as a STOP file in the run folder.
`TrainQueue` holds the live runs (explorer.runs.live) waiting for a training slot and admits them in turn.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from explorer.errors import incident
from explorer.events import Event, Failed, Tick
from explorer.runs.live import FIRST_FILE, STOP_FILE, Run, Status, queue_key
from explorer.settings import spaces
from explorer.tune.guess import estimate_seconds
from mirror.config import MirrorConfig
from mirror.errors import MirrorError

log = logging.getLogger("mirror.app")


def abandoned_seconds(env: dict[str, str] | None = None) -> float:
    """MIRROR_ABANDONED_S (default 20): a run whose consumers (the page's or the API client's event stream) have not
    asked for an event in this long is stopped (explorer.runs.execute): the tab was closed or the client went away,
    and nobody will see its result. Read once at import; the app's settings refuse a bad value at start
    (explorer.settings), here one is read as unset."""
    raw = (os.environ if env is None else env).get("MIRROR_ABANDONED_S", "").strip()
    try:
        value = float(raw or 20.0)
    except ValueError:
        return 20.0
    return 20.0 if math.isnan(value) else max(1.0, value)


ABANDONED_S = abandoned_seconds()


class TrainQueue:
    """The training slots and the runs waiting for one (runs, blends, model uploads): `slots` runs hold one at once,
    at most `max_waiting` wait, in arrival order, and one visitor has one run in line at most (waiting or holding a
    slot): a second is refused at once; one address (a visitor with fresh cookies, or a NAT) holds at most a quarter
    of the line. One visitor's runs never stand between another visitor and the next free slot, and a waiting run
    holds nothing but its place (no Gradio worker, no encode slot). A run holds a slot from `Run.admit` (its status:
    running) until it leaves the line."""

    def __init__(self, slots: int, max_waiting: int):
        self.slots, self.max_waiting = slots, max_waiting
        self._line: list[Run] = []  # runs holding a slot and runs waiting for one, in arrival order
        self._cond = threading.Condition()

    def check(self, who: str, address: str = "") -> None:
        """MirrorError when `who` (at `address`) could not join now: it has a run in line, or the line is full."""
        with self._cond:
            self._refusal(who, address)

    def join(self, run: Run) -> None:
        """`run` at the end of the line (admitted at once when a slot is free), or MirrorError (its visitor has a run
        in line already, or the line is full)."""
        with self._cond:
            self._refusal(run.who, run.address)
            self._line.append(run)
            self._promote()

    def _refusal(self, who: str, address: str) -> None:
        if any(r.who == who for r in self._line):
            raise MirrorError(
                "You have a run, blend or model upload going or waiting already (one at a time per visitor, so "
                "everyone gets a turn); wait for it to finish, or cancel it."
            )
        waiting = sum(not self._holds(r) for r in self._line)
        here = sum(r.address == address for r in self._line) if address else 0
        if waiting >= self.max_waiting or here >= max(2, self.max_waiting // 4):
            raise MirrorError(
                f"{waiting} jobs are waiting for a training slot already (MIRROR_TRAIN_QUEUE), {here} of them from your "
                "address; try again in a few minutes"
            )

    @staticmethod
    def _holds(run: Run) -> bool:
        return run.status is not Status.QUEUED

    def _promote(self) -> None:
        holding = sum(self._holds(r) for r in self._line)
        for r in self._line:
            if holding >= self.slots:
                break
            if not self._holds(r):
                r.admit()
                holding += 1
                self._cond.notify_all()

    def wait(self, run: Run, poll: float = 0.5) -> Iterator[int]:
        """Until `run` holds a slot, every `poll` seconds: how many runs are ahead of it (those holding a slot
        included). Returns early, without a slot, when the run is asked to stop (it leaves the line)."""
        while True:
            with self._cond:
                if self._holds(run) or run not in self._line:
                    return
                if run.stopping:
                    self._leave(run)
                    return
                self._cond.wait(poll)
                if self._holds(run):
                    return
                n = self._line.index(run) if run in self._line else 0
            yield n

    def leave(self, run: Run) -> None:
        """The run ended (or never started): its place, and its slot if it held one, go to the next in line."""
        with self._cond:
            self._leave(run)

    def _leave(self, run: Run) -> None:
        if run in self._line:
            self._line.remove(run)
        self._promote()
        self._cond.notify_all()

    def ahead_of(self, session: Any) -> tuple[int, int]:
        """(runs in line of visitors other than `session`'s, slots free now): what a plan says a Launch of its would
        wait behind (a second visitor's plan said "~44 s" and its Launch then waited 3 min for a slot)."""
        who = queue_key(session)
        with self._cond:
            others = sum(r.who != who for r in self._line)
            return others, self.slots - sum(self._holds(r) for r in self._line)

    @property
    def free(self) -> int:
        """Slots free now (tests, the status line)."""
        with self._cond:
            return self.slots - sum(self._holds(r) for r in self._line)


def is_out_of_memory(exc: BaseException) -> bool:
    """A CUDA or CPU allocation failure (torch raises OutOfMemoryError or a RuntimeError that says so)."""
    text = str(exc).lower()
    return (
        isinstance(exc, MemoryError)
        or type(exc).__name__ == "OutOfMemoryError"
        or "out of memory" in text
        or "can't allocate memory" in text
    )


def job_duration(texts: list[str], config: dict[str, Any], *job: Any, **named: Any) -> int:
    """ZeroGPU reservation in seconds for a training job (`spaces.GPU` calls it with `train_job`'s arguments): its
    GPU estimate plus loading, with a margin (a pairs run's rows priced at their longer side, its held-out rows not
    trained: a term list's reservation was its terms' length, not its definitions')."""
    from explorer.tune.inputs import trained_rows

    cfg = MirrorConfig.from_dict(config)
    partners = named.get("partners", job[4] if len(job) > 4 else None)
    trained = trained_rows(texts, cfg, partners)
    _, train_s, index_s = estimate_seconds(texts, cfg, "cuda", trained=trained, partners=partners)
    return int(min(600, max(60, 1.5 * (train_s + index_s) + 30)))


def _gpu(fn: Callable) -> Callable:
    """`spaces.GPU` with a duration estimated from the job on ZeroGPU; a no-op elsewhere."""
    if spaces is None:
        return fn
    return spaces.GPU(duration=job_duration)(fn)


def run_job(
    texts: list[str],
    config: MirrorConfig,
    run: Path,
    roots: list[Path],
    build_base: bool,
    limits: dict,
    emit: Callable[[Event], None],
    should_stop: Callable[[], bool],
    partners: list[str | None] | None = None,
    columns: list[str] | None = None,
) -> None:
    """Tune and index in the folder `run`, reporting through `emit`: Phase, Step and Replanned as they come, then one
    of Finished, Stopped or Failed. Never raises for a failed training (a bug or an OOM is said as Failed, logged).

    Results are files in `run`: model/ (sentence-transformers), base_index/ (unless build_base is False) and
    tuned_index/. It stops between steps and phases once `should_stop()` is true. `limits["memory"]`: the memory
    budget the run's plan was made with (explorer.tune.planning.Planner.memory_budget), which the run keeps unless the
    machine has less than that free when it trains (then it says so: Replanned; None: what the machine gives when it
    trains); `limits["hub_cache"]`: where the server keeps hub models (explorer.resources.hubcache: the base was
    downloaded there before the job); `limits["room"]`: whether the run may go on so many seconds more (its runner's
    caps: explorer.runs.execute.Runner.room), or across processes `limits["until"]`, the time (time.time()) it must
    be served by (a second training that would end later is not started); `limits["first"]`: true once its user asked for
    the first training's blend while a second one trains (explorer.runs.training.Trainer.serve_first). Its Steps carry no time left: the service
    times them against the run's plan (explorer.tune.eta). `partners`: each string's partner text (pairs, from the file's `columns` [strings,
    partners]): some held out, the gain on them in Finished's stats["pairs"] (mirror.job.tune_and_index).
    """
    from index.store import FolderIndexes
    from mirror.job import tune_and_index

    try:
        tune_and_index(
            texts,
            config,
            run,
            indexes=FolderIndexes(),
            roots=roots,
            build_base=build_base,
            emit=emit,
            should_stop=should_stop,
            planned_memory=limits.get("memory"),
            cache_dir=limits.get("hub_cache"),
            room=limits.get("room") or until_room(limits.get("until")),
            first=limits.get("first"),
            pairs=partners,
            columns=tuple(columns or ("string", "partner")),
        )
    except MirrorError as exc:
        emit(Failed(str(exc)))
    except Exception as exc:  # a bug, an OOM or a full disk: report it, keep the server alive
        emit(Failed(failure_text(exc)))


def until_room(until: float | None) -> Callable[[float], str | None] | None:
    """`room` for a job that must be served by `until` (time.time(); None: no bound): the reason a stretch of that
    many seconds more would end too late, or None."""
    if until is None:
        return None

    def room(seconds: float) -> str | None:
        left = until - time.time()
        if seconds <= left:
            return None
        return f"would not end within this server's time for a run ({max(0, round(left / 60))} min left)"

    return room


def failure_text(exc: BaseException) -> str:
    """What the user reads of a training job that raised (its traceback logged): an out-of-memory names its kind
    (OutOfMemoryError: the GPU's; MemoryError: the machine's) and what to try, a full disk says so; anything else is a
    bug, said as a code to quote (explorer.errors.incident), not its type and text (issue 58: they named the server's
    classes, and could carry its paths)."""
    if is_out_of_memory(exc):
        log.error("training job failed: out of memory", exc_info=exc)
        return (
            f"out of memory ({type(exc).__name__}); try fewer strings, a smaller batch size or max length, or a "
            "smaller model"
        )
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        log.error("training job failed: the disk is full", exc_info=exc)
        return f"the server's disk is full ({os.strerror(exc.errno)}): this run could not be finished; try again later"
    return f"training failed unexpectedly (error {incident(exc, 'training job failed')} in the server's log)"


@_gpu
def train_job(
    texts: list[str],
    config: dict[str, Any],
    run_dir: str,
    roots: list[str],
    build_base: bool,
    limits: dict,
    partners: list[str | None] | None = None,
    columns: list[str] | None = None,
) -> Iterator[Event]:
    """`run_job` as a generator of picklable values, for ZeroGPU only: `spaces.GPU` runs it in another process and
    carries what it yields back. Everywhere else a run calls `run_job` in its own thread (explorer.runs.training).

    Yields what `run_job` emits, and a Tick every half second without one. The job stops between steps when a file
    named STOP appears in run_dir (its run's one stop, explorer.runs.live.Run.stop, across processes), or when this
    generator is closed before its end (its consumer is gone); a second training stops for the first training's
    blend when a file named FIRST appears there (Trainer.serve_first)."""
    run = Path(run_dir)
    stop = run / STOP_FILE
    # the GPU is reserved for job_duration's seconds: a second training that would outlast it is not started
    reserved = time.time() + job_duration(texts, config)
    first = run / FIRST_FILE  # the user asked for the first training's blend (Trainer.serve_first writes it)
    limits = {**limits, "until": min(limits.get("until") or reserved, reserved), "first": first.exists}
    events: queue.Queue = queue.Queue()
    closed = threading.Event()  # this generator was closed before its end: nobody takes the job's events any more

    def work() -> None:
        try:
            run_job(
                texts,
                MirrorConfig.from_dict(config),
                run,
                [Path(r) for r in roots],
                build_base,
                limits,
                events.put,
                lambda: closed.is_set() or stop.exists(),
                partners,
                columns,
            )
        finally:
            events.put(None)

    thread = threading.Thread(target=work, name="mirror-train", daemon=True)
    thread.start()
    try:
        while True:
            try:
                item = events.get(timeout=0.5)
            except queue.Empty:
                yield Tick()
                continue
            if item is None:
                break
            yield item
    finally:
        if thread.is_alive():  # closed before its end: the job stops at its next step, its results unused
            closed.set()
            thread.join()
