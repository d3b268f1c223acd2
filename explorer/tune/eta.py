"""A run's live ETA, computed in one place (`time_left`): the phases of its plan still to come, as the estimate priced
them (explorer.tune.estimate), with the training's re-timed by the seconds a step took so far. `LiveEta` times a run's
steps as they reach the service and fills in each Step's `eta` (and `after`: its share that follows the training).

Before, two computations chained: the job timed the steps left at the pace of the steps so far, and the service added
what follows the training scaled by how much slower the steps ran than planned (up to 8x): a dictionary's run showed
9 min at step 74 of 75, "most of it after training", where what followed took 43 s. A step's pace says nothing of
the encodes after it (another length, no backward pass): those keep the plan's price.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from time import perf_counter

from explorer.events import Step
from explorer.tune.estimate import Estimate

AFTER_TRAINING = (
    "blend choice",
    "save",
    "tuned index",
    "downloads",
    "general checks",
)  # the plan's phases that follow the training
BURST_S = 1e-3  # steps that reach the service this close together were reported at once (a GPU's log_every)


def time_left(
    planned: Estimate | None, step: int, total: int, per_step: float | None
) -> tuple[float | None, float | None]:
    """(seconds until the run is done, of which after the training) once step `step` of `total` is done.

    The training left: `per_step` (the seconds a step took so far) times the steps left; before a step is timed, the
    plan's training price for the share of the steps left (a plan of another step count, the machine having less
    memory than planned, counts by that share too). After it: the plan's AFTER_TRAINING phases as priced. Without a
    plan (no calibration here): the steps left alone, and (None, None) before a step is timed. Once the last step is
    done: (0, None), what follows reports its own progress as it goes.
    """
    left = max(0, total - step)
    if left == 0:
        return 0.0, None
    after = sum(planned.phase(p) for p in AFTER_TRAINING) if planned is not None else None
    if per_step is not None:
        training = per_step * left
    elif planned is not None and total > 0:
        training = planned.phase("training") * left / total
    else:
        return None, None
    return training + (after or 0.0), after


class LiveEta:
    """The ETA of one run's steps as they come (`timed`): the clock starts at the first step (which pays the warm-up,
    so it is not timed); steps reported together restart it, and so does a step count starting again (a pairs run's
    second training: mirror.job._train_again)."""

    def __init__(self, planned: Estimate | None, clock: Callable[[], float] | None = None) -> None:
        self.planned, self.clock = planned, clock or perf_counter
        self.started: float | None = None
        self.first = self.last = 0

    def per_step(self, step: int) -> float | None:
        """Seconds a step took since the clock started (None before a step is timed)."""
        now = self.clock()
        again, self.last = step <= self.last, step
        if self.started is None or again or (now - self.started < BURST_S and step > self.first):
            self.started, self.first = now, step  # the first step, or one of a burst: the clock (re)starts here
            return None
        return (now - self.started) / (step - self.first) if step > self.first else None

    def timed(self, ev: Step) -> Step:
        """`ev` with its time left (`eta`) and the part of it after the training (`after`)."""
        eta, after = time_left(self.planned, ev.step, ev.total, self.per_step(ev.step))
        return dataclasses.replace(ev, eta=eta, after=after)
