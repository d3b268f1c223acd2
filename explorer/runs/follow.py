"""Following a run: its events folded into one view of where it stands (`Progress`), handed on at most once a second,
at once when it is served and at its end. The one loop every consumer of a run goes through, whatever its kind (a
training, a model upload, a blend): the page draws the view (ui.runs), the /train API turns it into its progress
dicts and summary (explorer.runs.training.Trainer.train_stream).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from explorer.events import Cancelled, Done, Failed, Note, Phase, Served, Step, Tick

REDRAW_S = 1.0  # at most one view a second: each message costs a small machine's browser ~0.1 s (ui.runs)


@dataclass
class Progress:
    """Where a run stands, from its events so far: its current phase (with a bar when it has one) or its last step,
    every step's loss and strings (the live curve), the notes not taken yet, the run it serves once served, and its
    last event once it has ended."""

    now: Phase | Step | None = None  # what it does now: its last phase or step
    step: Step | None = None  # its last step (kept once a phase follows it)
    losses: list[float] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # said since the consumer last took them (`take_notes`)
    said: list[str] = field(default_factory=list)  # every note the run said
    served: Any = None  # the RunInfo it serves, once served (before its checks)
    end: Done | Failed | Cancelled | None = None
    newly_served: bool = False  # this view is the first since it was served

    def take(self, ev: Any) -> None:
        """One more event of the run."""
        if isinstance(ev, Phase):
            self.now = ev
        elif isinstance(ev, Step):
            if self.step is not None and ev.training != self.step.training:  # a second training: its own curve
                self.losses, self.batches = [], []
            self.now = self.step = ev
            self.losses.append(ev.loss)
            self.batches.append(ev.batch)
        elif isinstance(ev, Note):
            self.notes.append(ev.text)
            self.said.append(ev.text)
        elif isinstance(ev, Served):
            self.served, self.newly_served = ev.run, True
        elif isinstance(ev, Done | Failed | Cancelled):
            self.end = ev

    def take_notes(self) -> list[str]:
        """The notes said since the last call (a consumer shows each once)."""
        notes, self.notes = self.notes, []
        return notes


def progress(
    events: Iterable[Any], every: float = REDRAW_S, clock: Callable[[], float] = time.monotonic
) -> Iterator[Progress]:
    """The run's view as its `events` come: the first once what was kept of the run so far is folded in (at the first
    heartbeat, which Run.follow sends right after the events it had kept: a reattached page draws where the run is,
    not its first phase; or `every` seconds in), then one each
    `every` seconds at most (on a heartbeat too: a consumer that went away is noticed when it is handed one, and
    stops following), one at once when it is served, and the last at its end (`end` set). The same Progress each
    time, updated: read it before asking for the next."""
    view, last = Progress(), clock()
    first = True
    for ev in events:
        if not isinstance(ev, Tick):
            view.take(ev)
        if view.end is not None:
            yield view
            return
        now = clock()
        if view.newly_served or now - last >= every or (first and isinstance(ev, Tick)):
            yield view
            view.newly_served, last, first = False, now, False
