"""Request bodies the server holds: what a large request costs in memory from its first byte until its handler has
read it, bounded per visitor, per address and in all before the body is read (ui.web.quota.UploadQuota).

A 20 MB paste sent to /train is parsed by Gradio (its bytes, the JSON, the event's copy) and held while its event
waits and runs; 30 such requests at once once took the server from 4.1 to 9.6 GB. Here each body over `small` bytes
is charged as it arrives and given back when its handler says it has read it (`ui.handlers.consume_request`), when
its event is over (`live(event_id)` is False), or, for a request that is not a queue event, when its answer is sent.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass

from mirror.data import fmt_size

SMALL_BODY = 256 * 1024  # a page's ordinary events (clicks, a search, a short paste) are never counted


@dataclass(eq=False)
class Body:
    """One large request body: its bytes so far, who sent it, and the queue event it became (if any)."""

    visitor: str
    address: str
    size: int = 0
    event_id: str | None = None  # set once Gradio's queue answered the join
    released: bool = False


class HeldRequests:
    """The bytes of large request bodies held now: at most `per_visitor` for one visitor, `per_address` for one
    address (all its visitors) and `total` for everyone. `live(event_id)`: whether Gradio's queue still holds that
    event (its data, its request)."""

    def __init__(
        self,
        per_visitor: int,
        per_address: int,
        total: int,
        live: Callable[[str], bool] | None = None,
        small: int = SMALL_BODY,
    ):
        self.per_visitor, self.per_address, self.total_limit, self.small = per_visitor, per_address, total, small
        self.live = live
        self.bodies: list[Body] = []
        self.by_visitor: collections.Counter[str] = collections.Counter()
        self.by_address: collections.Counter[str] = collections.Counter()
        self.total = 0
        self.lock = threading.Lock()

    def refusal(self, body: Body, more: int) -> str | None:
        """Why `body` may not grow by `more` bytes (to a size over `small`), or None. Bodies of events that are over
        are given back first."""
        if body.size + more <= self.small:
            return None
        with self.lock:
            self._prune()
            counted = body.size if body in self.bodies else 0
            grow = body.size + more - counted
            if self.by_visitor[body.visitor] + grow > self.per_visitor:
                return (
                    f"you have {fmt_size(self.by_visitor[body.visitor])} of requests waiting on this server already; "
                    "one large request at a time: wait for it to be read, then send the next"
                )
            if self.by_address[body.address] + grow > self.per_address:
                return (
                    f"your address has {fmt_size(self.by_address[body.address])} of large requests waiting on this "
                    f"server (at most {fmt_size(self.per_address)}); try again in a moment"
                )
            if self.total + grow > self.total_limit:
                return (
                    f"this server holds {fmt_size(self.total)} of large requests now (at most "
                    f"{fmt_size(self.total_limit)}, MIRROR_REQUEST_MEMORY_MB); try again in a moment"
                )
            return None

    def charge(self, body: Body, more: int) -> None:
        """Add `more` bytes to `body` (checked by `refusal` first); counted once it is over `small`."""
        with self.lock:
            if body.released:
                return
            body.size += more
            if body.size <= self.small:
                return
            if body not in self.bodies:
                self.bodies.append(body)
                more = body.size
            self.by_visitor[body.visitor] += more
            self.by_address[body.address] += more
            self.total += more

    def release(self, body: Body) -> None:
        """Give `body`'s bytes back (its handler read it, its event is over, or it was refused): idempotent."""
        with self.lock:
            self._release(body)

    def held(self, visitor: str | None = None) -> int:
        """Bytes held now, in all or for one visitor (bodies of events that are over given back first)."""
        with self.lock:
            self._prune()
            return self.total if visitor is None else self.by_visitor.get(visitor, 0)

    def _release(self, body: Body) -> None:
        if body.released:
            return
        body.released = True
        if body not in self.bodies:
            return
        self.bodies.remove(body)
        for counter, key in ((self.by_visitor, body.visitor), (self.by_address, body.address)):
            counter[key] -= body.size
            if counter[key] <= 0:
                del counter[key]
        self.total -= body.size

    def _prune(self) -> None:
        """Give back the bodies whose queue events are over (finished, failed, cancelled, or never joined)."""
        if self.live is None:
            return
        for body in [b for b in self.bodies if b.event_id is not None]:
            if not self.live(body.event_id):
                self._release(body)
