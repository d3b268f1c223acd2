"""Sharing the cores: turns between a server's background work and its interactive work, with a bound on what
turns cost a run; and `FairSlots`, a counting semaphore that admits in arrival order (the search and job slots).

A run of any kind (a training's steps, index builds and checks; a blend's or an upload's encoding and checks: its
thread, explorer.runs.execute) is background; a map's layout, an export, an evaluation are interactive, asked for by
someone waiting at the page. While interactive work runs, background work waits at the engine's next step or encode
batch (mirror.hooks: `background()` installs the wait there), so the interactive job has the cores to itself
(bench/RESULTS.md "Shared cores": a run and a map overlapping took 3.2x and 2.4x, taking turns ~1.6x and 1.0x).

The bound (issue 58: a stranger firing one-row exports back to back slowed a victim's run 3.0-3.8x, for as long as
they kept going): a background thread waits in all at most `factor - 1` times the time it has worked, so turns make
a run at most `factor` (2x) as long as its work, plus PAUSE_FLOOR_S; past that it overlaps the interactive work instead of waiting. One
wait is at most `most` seconds.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterator

from mirror.cores import sharing_off
from mirror.hooks import pausing

PAUSE_FACTOR = 2.0  # turns make a run at most this much longer than its own work…
PAUSE_FLOOR_S = 1.0  # …and this: a run that has barely started may still wait for a map asked before it


class Turns:
    """Interactive work first: background threads (`background()`) pause at their `pause()` points while any
    interactive work (`interactive()`) runs, each pause at most `most` seconds, and all of a thread's pauses at most
    `factor - 1` times its working time (a stream of maps or exports cannot starve a run, nor slow it past `factor`)."""

    def __init__(self, most: float = 300.0, enabled: bool = True, factor: float = PAUSE_FACTOR):
        self.most, self.enabled, self.factor = most, enabled, factor
        self._cond = threading.Condition()
        self._interactive = 0
        self._local = threading.local()
        self.paused_s = 0.0  # what background work spent paused, in all (benches, tests)

    @contextlib.contextmanager
    def background(self) -> Iterator[None]:
        """This thread's work until the end of the block is background: it pauses for interactive work at the
        engine's steps and batches (mirror.hooks)."""
        before = getattr(self._local, "background", False)
        outer = not before
        if outer:  # the thread's own clock of work and waits, for the bound
            self._local.since, self._local.waited = time.monotonic(), 0.0
        self._local.background = True
        try:
            with pausing(lambda: self.pause()):  # late-bound: tests patch `pause`
                yield
        finally:
            self._local.background = before

    @contextlib.contextmanager
    def interactive(self) -> Iterator[None]:
        """Interactive work (someone waits for it): background work pauses until it is done."""
        if getattr(self._local, "background", False):  # called from within a run (its own checks): no turn to take
            yield
            return
        with self._cond:
            self._interactive += 1
        try:
            yield
        finally:
            with self._cond:
                self._interactive -= 1
                self._cond.notify_all()

    def allowance(self) -> float:
        """How long this background thread may still wait: (factor - 1) x its work so far and the floor, less its
        waits."""
        worked = time.monotonic() - self._local.since - self._local.waited
        return min(self.most, (self.factor - 1.0) * worked + PAUSE_FLOOR_S - self._local.waited)

    def record(self) -> tuple[float, float] | None:
        """This background thread's (waits, work) so far in seconds, as the bound counts them (waits <= (factor - 1)
        x work + PAUSE_FLOOR_S, give or take one wait's wake-up), or None outside background work."""
        if not getattr(self._local, "background", False):
            return None
        waited = self._local.waited
        return waited, time.monotonic() - self._local.since - waited

    def pause(self) -> None:
        """In background work, between two steps or batches: wait while interactive work runs, within the bound."""
        if not self.enabled or not getattr(self._local, "background", False) or not self._interactive:
            return
        allowed = self.allowance()
        if allowed <= 0:
            return  # this run has waited its share: it overlaps now
        started = time.monotonic()
        with self._cond:
            self._cond.wait_for(lambda: not self._interactive, timeout=allowed)
        waited = time.monotonic() - started
        self._local.waited += waited
        self.paused_s += waited


TURNS = Turns(enabled=not sharing_off())  # this process's one


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
