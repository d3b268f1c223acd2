"""Request bodies the server holds: what a large request costs in memory from its first byte until its handler has
read it, bounded per visitor, per address and in all before the body is read (ui.web.quota.UploadQuota).

A 20 MB paste sent to /train is parsed by Gradio (its bytes, the JSON, the event's copy) and held while its event
waits and runs; 30 such requests at once once took the server from 4.1 to 9.6 GB. Here each body over `small` bytes
is charged as it arrives and given back when its handler says it has read it (`ui.handlers.consume_request`), when
its event is over (`live(event_id)` is False), or, for a request that is not a queue event, when its answer is sent.

A body is charged what it costs in memory, not its size (issue 58: 30 bodies of 19 MB took +1,449 MB when each was
charged 19 MB): its bytes, the JSON text they decode to and the value parsed from it live at once while Gradio reads
it (3 copies for text that is one byte a character), and the allocator's slack on top, so `BODY_COST` (4) times its
size; text whose characters take 2 or 4 bytes in Python (an accented capital, a CJK character, an emoji, or a
"\\u" escape of one: Python stores a whole string at its widest character's width) costs 2 more for each extra byte
of width (`body_width`): up to 10x its size.
"""

from __future__ import annotations

import collections
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

from mirror.data import fmt_size

SMALL_BODY = 256 * 1024  # a page's ordinary events (clicks, a search, a short paste) are never counted
# What a JSON body of one-byte characters costs while Gradio reads it, per byte of its size (measured, issue 58: the
# body's bytes, the decoded JSON text and the parsed value at once, and the allocator's slack; bench/RESULTS.md)
BODY_COST = 4.0
# UTF-8 lead bytes of characters past U+00FF (stored 2 bytes wide), of characters past U+FFFF (4 bytes wide), and
# JSON escapes of such characters ("\\u0100".."\\uffff"; a surrogate pair's first half)
_WIDE2 = re.compile(rb"[\xc4-\xef]|\\u(?:0[1-9a-fA-F]|[1-9a-fA-F])")
_WIDE4 = re.compile(rb"[\xf0-\xf4]|\\u[dD][89abAB]")


def body_width(data: bytes) -> int:
    """The widest a character of JSON body `data` is stored in Python (1, 2 or 4 bytes): the width of the text it
    decodes to and of the strings parsed from it (a string is stored at its widest character's width). An escaped
    backslash before a "u" counts as an escape: a few bytes over-charged, never under."""
    if data.isascii() and b"\\u" not in data:
        return 1
    if _WIDE4.search(data):
        return 4
    return 2 if _WIDE2.search(data) else 1


@dataclass(eq=False)
class Body:
    """One large request body: its bytes so far, who sent it, and the queue event it became (if any)."""

    visitor: str
    address: str
    size: int = 0  # its bytes so far
    event_id: str | None = None  # set once Gradio's queue answered the join
    released: bool = False
    width: int = 1  # the widest character of its text, in bytes (body_width); 1 until it is read
    counted: float = 0.0  # what it is charged now (HeldRequests.cost)


class HeldRequests:
    """The memory large request bodies cost now (`cost`: `factor` times their bytes, more for wide characters): at
    most `per_visitor` for one visitor, `per_address` for one address (all its visitors) and `total` for everyone.
    A body that costs more than a limit on its own is let in when its visitor, address or the server holds no other
    (a paste of wide characters is never refused for good): the memory held is at most `total`, or one body's cost
    when that is more. `live(event_id)`: whether Gradio's queue still holds that event (its data, its request)."""

    def __init__(
        self,
        per_visitor: float,
        per_address: float,
        total: float,
        live: Callable[[str], bool] | None = None,
        small: int = SMALL_BODY,
        factor: float = 1.0,
    ):
        self.per_visitor, self.per_address, self.total_limit, self.small = per_visitor, per_address, total, small
        self.factor = factor
        self.live = live
        self.bodies: list[Body] = []
        self.by_visitor: collections.Counter[str] = collections.Counter()
        self.by_address: collections.Counter[str] = collections.Counter()
        self.total: float = 0
        self.lock = threading.Lock()

    def cost(self, size: int, width: int = 1) -> float:
        """What a body of `size` bytes costs in memory while it is read: `factor` per byte, 2 more per byte for each
        extra byte of its characters' width (the decoded text and the parsed value are both that wide)."""
        return size * (self.factor + 2 * (width - 1))

    def refusal(self, body: Body, more: int, width: int | None = None) -> str | None:
        """Why `body` may not grow by `more` bytes (to a size over `small`), or widen to `width`, or None. Bodies of
        events that are over are given back first."""
        if body.size + more <= self.small:
            return None
        with self.lock:
            self._prune()
            counted = body.counted if body in self.bodies else 0
            cost = self.cost(body.size + more, width or body.width)
            grow = cost - counted

            def over(held: float, limit: float) -> bool:  # alone, a body passes any limit
                return held - counted > 0 and held + grow > limit

            if over(self.by_visitor[body.visitor], self.per_visitor):
                return (
                    f"you have a large request waiting on this server already (it holds "
                    f"{fmt_size(self.by_visitor[body.visitor])} of its memory while it is read); one large request at "
                    "a time: wait for it to be read, then send the next"
                )
            if over(self.by_address[body.address], self.per_address):
                return (
                    f"your address's large requests waiting on this server hold {fmt_size(self.by_address[body.address])}"
                    f" of its memory while they are read (at most {fmt_size(self.per_address)}); try again in a moment"
                )
            if over(self.total, self.total_limit):
                return (
                    f"the large requests this server is reading hold {fmt_size(self.total)} of its memory now (at most "
                    f"{fmt_size(self.total_limit)}, MIRROR_REQUEST_MEMORY_MB); try again in a moment"
                )
            return None

    def charge(self, body: Body, more: int, width: int | None = None) -> None:
        """Add `more` bytes to `body`, or widen it to `width` (checked by `refusal` first); counted once it is over
        `small`."""
        with self.lock:
            if body.released:
                return
            body.size += more
            body.width = width or body.width
            if body.size <= self.small:
                return
            if body not in self.bodies:
                self.bodies.append(body)
            cost = self.cost(body.size, body.width)
            more, body.counted = cost - body.counted, cost
            self.by_visitor[body.visitor] += more
            self.by_address[body.address] += more
            self.total += more

    def release(self, body: Body) -> None:
        """Give `body`'s bytes back (its handler read it, its event is over, or it was refused): idempotent."""
        with self.lock:
            self._release(body)

    def held(self, visitor: str | None = None) -> float:
        """What the bodies held now cost, in all or for one visitor (bodies of events that are over given back
        first)."""
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
            counter[key] -= body.counted
            if counter[key] <= 1e-6:
                del counter[key]
        self.total -= body.counted
        if not self.bodies:
            self.total = 0  # no rounding left over

    def _prune(self) -> None:
        """Give back the bodies whose queue events are over (finished, failed, cancelled, or never joined)."""
        if self.live is None:
            return
        for body in [b for b in self.bodies if b.event_id is not None]:
            if not self.live(body.event_id):
                self._release(body)
