"""Where a caller may wait inside the engine's long loops: between two training steps and two encode batches.

The engine knows nothing of who waits there or why. A server that runs the engine beside interactive work (the app:
explorer.resources.turns) installs its own pause for the work it runs in the background (`pausing`); everywhere else
`pause()` costs one context-variable read. The hook is per context (a thread starts with none), so an interactive
request's encode in another thread never waits on it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

_PAUSE: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar("mirror_pause", default=None)


@contextlib.contextmanager
def pausing(hook: Callable[[], None]) -> Iterator[None]:
    """Within the block (this thread's context), the engine's loops call `hook` between steps and batches."""
    token = _PAUSE.set(hook)
    try:
        yield
    finally:
        _PAUSE.reset(token)


def pause() -> None:
    """Between two steps or batches: the installed hook, if any."""
    hook = _PAUSE.get()
    if hook is not None:
        hook()
