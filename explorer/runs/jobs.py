"""The training job and the slots it runs in: one thread per job, typed events out, a stop file in.

`train_job` runs `index.pipeline.tune_and_index` in a thread and yields its events; it is a plain generator
of picklable values, so on a ZeroGPU Space it runs inside `spaces.GPU` in another process. It stops the job
between steps when asked (a STOP file in the run folder), past the run's wall-clock cap, or when its consumer
stops asking for events (a closed tab, a disconnected or cancelled API client).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.events import Event, Failed, Step, Tick
from explorer.runs.sessions import STOP_FILE, write_stop
from explorer.settings import spaces
from explorer.tune.estimate import IO_PHASES, Estimate
from explorer.tune.guess import estimate_seconds
from mirror.config import MirrorConfig
from mirror.errors import MirrorError

log = logging.getLogger("mirror.app")


def abandoned_seconds(env: dict[str, str] | None = None) -> float:
    """MIRROR_ABANDONED_S (default 20): a job whose consumer (the page's or the API client's event stream) has not
    asked for an event in this long is stopped: the tab was closed or the client went away, and nobody will see its
    result. Read once at import (a ZeroGPU worker reads it from the same environment); the app's settings refuse a
    bad value at start (explorer.settings), here one is read as unset."""
    raw = (os.environ if env is None else env).get("MIRROR_ABANDONED_S", "").strip()
    try:
        value = float(raw or 20.0)
    except ValueError:
        return 20.0
    return 20.0 if math.isnan(value) else max(1.0, value)


ABANDONED_S = abandoned_seconds()


class FairSlots:
    """A counting semaphore that admits waiters in arrival order (threading.Semaphore lets late ones overtake)."""

    def __init__(self, n: int):
        self._free = n
        self._waiting: collections.deque[object] = collections.deque()
        self._cond = threading.Condition()

    def __enter__(self) -> None:
        me = object()
        with self._cond:
            self._waiting.append(me)
            while self._free <= 0 or self._waiting[0] is not me:
                self._cond.wait()
            self._waiting.popleft()
            self._free -= 1
            self._cond.notify_all()  # the next in line may be able to go too

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._free += 1
            self._cond.notify_all()


@dataclass(eq=False)
class Place:
    """One job's place in the TrainQueue: waiting, then holding a training slot, then gone."""

    who: str
    address: str = ""
    running: bool = False
    gone: bool = False


class TrainQueue:
    """The training slots and the places waiting for one (runs, blends, model uploads): `slots` jobs run at once, at
    most `max_waiting` wait, in arrival order, and one visitor holds one place at most (waiting or running): a second
    is refused at once; one address (a visitor with fresh cookies, or a NAT) holds at most a quarter of the line. One
    visitor's jobs never stand between another visitor and the next free slot, and a waiting job holds nothing but
    its place (no Gradio worker, no encode slot)."""

    def __init__(self, slots: int, max_waiting: int):
        self.slots, self.max_waiting = slots, max_waiting
        self._places: list[Place] = []  # running ones and waiting ones, in arrival order
        self._cond = threading.Condition()

    def check(self, who: str, address: str = "") -> None:
        """MirrorError when `who` (at `address`) could not join now: it holds a place, or the line is full."""
        with self._cond:
            self._refusal(who, address)

    def join(self, who: str, address: str = "") -> Place:
        """A place for `who` at the end of the line, or MirrorError (it holds one already, or the line is full)."""
        with self._cond:
            self._refusal(who, address)
            place = Place(who, address)
            self._places.append(place)
            self._promote()
            return place

    def _refusal(self, who: str, address: str) -> None:
        if any(p.who == who for p in self._places):
            raise MirrorError(
                "You have a run, blend or model upload going or waiting already (one at a time per visitor, so "
                "everyone gets a turn); wait for it to finish, or cancel it."
            )
        waiting = sum(not p.running for p in self._places)
        here = sum(p.address == address for p in self._places) if address else 0
        if waiting >= self.max_waiting or here >= max(2, self.max_waiting // 4):
            raise MirrorError(
                f"{waiting} jobs are waiting for a training slot already (MIRROR_TRAIN_QUEUE), {here} of them from your "
                "address; try again in a few minutes"
            )

    def _promote(self) -> None:
        running = sum(p.running for p in self._places)
        for p in self._places:
            if running >= self.slots:
                break
            if not p.running:
                p.running, running = True, running + 1
                self._cond.notify_all()

    def ahead(self, place: Place) -> int:
        """How many places are ahead of a waiting one (running ones included)."""
        with self._cond:
            return self._places.index(place) if place in self._places else 0

    def wait(self, place: Place, stop: threading.Event | None = None, poll: float = 0.5) -> Iterator[int]:
        """Until `place` holds a slot, every `poll` seconds: how many places are ahead of it. Returns early, without
        a slot, when `stop` is set (the place is then gone)."""
        while True:
            with self._cond:
                if place.running or place.gone:
                    return
                if stop is not None and stop.is_set():
                    self._leave(place)
                    return
                self._cond.wait(poll)
                if place.running:
                    return
                n = self._places.index(place) if place in self._places else 0
            yield n

    def leave(self, place: Place) -> None:
        """The job ended (or never started): its place, and its slot if it held one, go to the next in line."""
        with self._cond:
            self._leave(place)

    def _leave(self, place: Place) -> None:
        place.gone = True
        if place in self._places:
            self._places.remove(place)
        self._promote()
        self._cond.notify_all()

    @property
    def free(self) -> int:
        """Slots free now (tests, the status line)."""
        with self._cond:
            return self.slots - sum(p.running for p in self._places)


def is_out_of_memory(exc: BaseException) -> bool:
    """A CUDA or CPU allocation failure (torch raises OutOfMemoryError or a RuntimeError that says so)."""
    text = str(exc).lower()
    return (
        isinstance(exc, MemoryError)
        or type(exc).__name__ == "OutOfMemoryError"
        or "out of memory" in text
        or "can't allocate memory" in text
    )


def job_duration(
    texts: list[str],
    config: dict[str, Any],
    run_dir: str,
    roots: list[str],
    build_base: bool,
    limits: dict,
    partners: list[str | None] | None = None,
    columns: list[str] | None = None,
) -> int:
    """ZeroGPU reservation in seconds for a training job: its GPU estimate plus loading, with a margin."""
    cfg = MirrorConfig.from_dict(config)
    _, train_s, index_s = estimate_seconds(texts, cfg, "cuda")
    return int(min(600, max(60, 1.5 * (train_s + index_s) + 30)))


def _gpu(fn: Callable) -> Callable:
    """`spaces.GPU` with a duration estimated from the job on ZeroGPU; a no-op elsewhere."""
    if spaces is None:
        return fn
    return spaces.GPU(duration=job_duration)(fn)


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
    """Tune and index in `run_dir`, yielding Phase, Step, Note and Tick, then Finished, Stopped or Failed.

    Results are files in run_dir: model/ (sentence-transformers), base_index/ (unless build_base is False) and
    tuned_index/. The job stops between steps when a file named STOP appears in run_dir (Cancel, across
    processes), when `limits["max_seconds"]` have passed, or when nobody has asked for an event for ABANDONED_S.
    `limits["memory"]` bounds what a training step may plan for (None: the memory available); `limits["hub_cache"]`:
    where the server keeps hub models (explorer.runs.hubcache: the base was downloaded there before the job).
    `partners`: each string's partner text (pairs, from the file's `columns` [strings, partners]): some held out,
    the gain on them in Finished's stats["pairs"] (index.pipeline.tune_and_index).
    """
    run = Path(run_dir)
    stop = run / STOP_FILE
    events: queue.Queue = queue.Queue()
    deadline = time.monotonic() + limits["max_seconds"] if limits.get("max_seconds") else math.inf
    last_pull = [time.monotonic()]

    def should_stop() -> bool:
        now = time.monotonic()
        if now > deadline:
            write_stop(run, "time")
        elif now - last_pull[0] > ABANDONED_S:
            write_stop(run, "abandoned")
        return stop.exists()

    def work() -> None:
        from index.pipeline import tune_and_index
        from mirror.cores import TURNS

        try:
            with TURNS.background():  # yields to interactive work at its steps and encode batches (mirror.cores)
                tune_and_index(
                    texts,
                    MirrorConfig.from_dict(config),
                    run,
                    roots=[Path(r) for r in roots],
                    build_base=build_base,
                    emit=events.put,
                    should_stop=should_stop,
                    memory=limits.get("memory"),
                    cache_dir=limits.get("hub_cache"),
                    pairs=partners,
                    columns=tuple(columns or ("string", "partner")),
                )
        except MirrorError as exc:
            events.put(Failed(str(exc)))
        except Exception as exc:  # a bug or an OOM: report it, keep the server alive
            log.exception("training job failed")
            if is_out_of_memory(exc):
                events.put(
                    Failed(
                        f"out of memory ({type(exc).__name__}); try fewer strings, a smaller batch size or max "
                        "length, or a smaller model"
                    )
                )
            else:
                events.put(Failed(f"training failed unexpectedly ({type(exc).__name__}: {exc})"))
        finally:
            events.put(None)

    thread = threading.Thread(target=work, name="mirror-train", daemon=True)
    thread.start()
    clock = StepClock()
    try:
        while True:
            last_pull[0] = time.monotonic()
            try:
                item = events.get(timeout=0.5)
            except queue.Empty:
                yield Tick()
                continue
            if item is None:
                break
            yield clock.timed(item) if isinstance(item, Step) else item
    finally:
        if thread.is_alive():  # the consumer closed us (tab closed, client cancelled): stop at the next step
            write_stop(run, "abandoned")
            thread.join()


class StepClock:
    """Fills in a Step's time left from the pace of the steps so far (the first step pays for warm-up, so it
    only starts the clock)."""

    def __init__(self) -> None:
        self.t1: float | None = None
        self.first = 0

    def timed(self, ev: Step) -> Step:
        now = time.perf_counter()
        if self.t1 is None:
            self.t1, self.first = now, ev.step
            return ev
        rate = (now - self.t1) / (ev.step - self.first) if ev.step > self.first else None
        return dataclasses.replace(ev, eta=rate * (ev.total - ev.step) if rate is not None else None)


AFTER_TRAINING = ("save", "tuned index", "downloads", "general checks")


def time_left(step: Step, planned: Estimate | None) -> Step:
    """A training Step whose ETA (the steps left at the pace of the steps so far) also covers what follows the
    training (AFTER_TRAINING, as the run's plan priced them, at the pace the steps ran against that plan): the time
    until the run is done, re-timed at every step. `step` as it is without a plan or a pace yet."""
    if planned is None or step.eta is None or step.step >= step.total or not planned.steps:
        return step
    planned_rate = planned.phase("training") / planned.steps
    rate = step.eta / max(1, step.total - step.step)
    pace = min(8.0, max(0.25, rate / planned_rate)) if planned_rate > 0 else 1.0
    after = sum(planned.phase(p) * (1.0 if p in IO_PHASES else pace) for p in AFTER_TRAINING)
    return dataclasses.replace(step, eta=step.eta + after, after=after)
