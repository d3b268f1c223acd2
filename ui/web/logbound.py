"""The server's own output bounded: what a visitor sends never reaches the log unbounded.

Gradio prints the traceback of an event that failed, and the message of some of its errors carries the event's
inputs: five malformed events holding a 19 MB string wrote 95 MiB of log in 6.5 s (issue 58). `BoundedStream` wraps
stdout and stderr (which the log handlers, uvicorn's and Gradio's tracebacks write to): every write is cut to
`cut` characters with a note of how much was cut, and at most `budget` characters pass in a `window` of seconds;
past it output is dropped until the window turns, and then one line says how much was dropped. A flood of tracebacks
(each an ordinary few kB) is so rate-limited to the budget.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO


class BoundedStream:
    """A text stream that passes at most `cut` characters of a write and `budget` characters a `window`."""

    def __init__(self, stream: TextIO, cut: int = 4096, budget: int = 256 * 1024, window: float = 60.0):
        self.stream, self.cut, self.budget, self.window = stream, cut, budget, window
        self.lock = threading.Lock()
        self.since = time.monotonic()
        self.used = 0
        self.dropped = 0  # characters dropped in this window
        self.total_cut = 0  # characters cut or dropped since start (the tests read it)

    def write(self, text: str) -> int:
        n = len(text)
        with self.lock:
            now = time.monotonic()
            if now - self.since >= self.window:
                if self.dropped:
                    note = f"[log] {self.dropped:,} characters of output dropped in the last {self.window:.0f} s "
                    note += "(MIRROR_LOG_KB_PER_MINUTE)\n"
                    self.stream.write(note)
                self.since, self.used, self.dropped = now, 0, 0
            if n > self.cut:
                cut = n - self.cut
                self.total_cut += cut
                text = f"{text[: self.cut]}… [{cut:,} characters cut]\n"
            if self.used + len(text) > self.budget:
                self.dropped += len(text)
                self.total_cut += len(text)
                return n
            self.used += len(text)
            self.stream.write(text)
        return n

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding…: the wrapped stream's
        return getattr(self.stream, name)


def bound_output(cut: int, budget: int, window: float = 60.0) -> None:
    """Wrap sys.stdout and sys.stderr (once) in BoundedStream; before the log handlers are made, so they write
    through it."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, BoundedStream):
            setattr(sys, name, BoundedStream(stream, cut, budget, window))
