"""Open connections a client may hold: a cap per client address and in all, and a deadline for a request's headers,
enforced where connections are made (uvicorn's HTTP protocol), before any request of them reaches the app.

uvicorn accepts every connection and keeps it for as long as the client sends nothing, or sends its headers a byte at
a time: 21,000 such connections from one address filled the server's open files (20,000) and other visitors waited
30 s for /config (issue 58). Here a connection is refused the moment it is made when its address already holds
`per_address` of them (429) or the server holds `total` (503), with a one-line answer, and a connection that has
not completed a request's headers within `header_timeout` seconds of being made, or of its last request, is closed.
A body that arrives too slowly is the middleware's to drop (ui.web.quota.UploadQuota, `min_rate`): it
knows how much each request declared and holds.

A trusted proxy's address (MIRROR_TRUSTED_PROXIES) is exempt from the per-address cap (every visitor behind it shares
it; the proxy bounds its own clients: the README's deployment notes), and so are private addresses on a Hugging Face
Space, whose proxy is one. uvicorn takes its protocol from `uvicorn.config.HTTP_PROTOCOLS` when it loads its config
(Gradio builds that config itself and lets nobody pass `http=`): `install` puts the guarded class there.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import logging
import os
import resource
import threading
from typing import Any

log = logging.getLogger("mirror.app")


class ConnectionGuard:
    """How many connections each address holds, and whether one more may open (thread-safe; one per server)."""

    def __init__(
        self,
        per_address: int = 64,
        total: int = 4096,
        header_timeout: float = 10.0,
        exempt: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = (),
        exempt_private: bool = False,
    ):
        self.per_address, self.total, self.header_timeout = per_address, total, header_timeout
        self.exempt, self.exempt_private = exempt, exempt_private
        self.by_address: collections.Counter[str] = collections.Counter()
        self.open = 0
        self.refused = 0  # since start, for the operator (and the tests)
        self.timed_out = 0
        self.lock = threading.Lock()

    def exempted(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address.strip("[]"))
        except ValueError:
            return False
        return any(ip in net for net in self.exempt) or (self.exempt_private and (ip.is_private or ip.is_loopback))

    def admit(self, address: str) -> tuple[int, str] | None:
        """Count one more connection of `address`, or (status, why) it is refused."""
        with self.lock:
            if self.open >= self.total:
                self.refused += 1
                return 503, (
                    f"the server holds as many open connections as it may ({self.total}, MIRROR_MAX_CONNECTIONS); "
                    "try again in a moment"
                )
            if self.by_address[address] >= self.per_address and not self.exempted(address):
                self.refused += 1
                return 429, (
                    f"too many open connections from your address (at most {self.per_address} at once, "
                    "MIRROR_MAX_CONNECTIONS_PER_ADDRESS); close some and try again"
                )
            self.by_address[address] += 1
            self.open += 1
            return None

    def release(self, address: str) -> None:
        with self.lock:
            self.open -= 1
            self.by_address[address] -= 1
            if self.by_address[address] <= 0:
                del self.by_address[address]


def refusal_bytes(status: int, text: str) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection: written before the request is read."""
    body = (text + "\n").encode()
    phrase = {429: "Too Many Requests", 503: "Service Unavailable", 408: "Request Timeout"}[status]
    head = f"HTTP/1.1 {status} {phrase}\r\ncontent-type: text/plain; charset=utf-8\r\n"
    head += f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    return head.encode() + body


def guarded_protocol(base: type, guard: ConnectionGuard) -> type:
    """`base` (uvicorn's h11 or httptools protocol) with `guard`'s caps at connection_made and its header deadline."""

    class GuardedProtocol(base):  # type: ignore[misc, valid-type]
        _address: str | None = None
        _refused = False
        _deadline: asyncio.TimerHandle | None = None
        _seen: Any = None  # the request cycle current at the last deadline: a new one means a request came

        def connection_made(self, transport: Any) -> None:
            peer = transport.get_extra_info("peername")
            address = str(peer[0]) if isinstance(peer, tuple | list) and peer else "?"
            no = guard.admit(address)
            if no is not None:
                self._refused = True
                transport.write(refusal_bytes(*no))
                transport.close()
                return
            self._address = address
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            self._deadline = asyncio.get_running_loop().call_later(guard.header_timeout, self._expire)

        def _expire(self) -> None:
            self._deadline = None
            transport = self.transport
            if transport is None or transport.is_closing():
                return
            if transport.get_protocol() is not self:  # upgraded (a websocket): its own protocol's now
                self._forget()
                return
            cycle = getattr(self, "cycle", None)
            if cycle is not None and (cycle is not self._seen or not cycle.response_complete):
                self._seen = cycle  # a request came, or one is going on (a slow body is the middleware's)
                self._arm()
                return
            guard.timed_out += 1  # no request's headers within the deadline: slow headers, or idle
            transport.close()

        def _forget(self) -> None:
            if self._address is not None:
                guard.release(self._address)
                self._address = None

        def data_received(self, data: bytes) -> None:
            if not self._refused:
                super().data_received(data)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:
                return
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            self._forget()
            super().connection_lost(exc)

    GuardedProtocol.__name__ = GuardedProtocol.__qualname__ = f"Guarded{base.__name__}"
    return GuardedProtocol


def raise_open_files() -> int:
    """The soft open-files limit raised to the hard one (a server's connections are files); the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def default_total(open_files: int) -> int:
    """Connections in all when MIRROR_MAX_CONNECTIONS is 0: three quarters of the open files, leaving the rest for
    the models, indexes, uploads and logs a server opens (at least 64)."""
    return max(64, open_files * 3 // 4 - 256)


def install(guard: ConnectionGuard) -> type:
    """Make uvicorn's "auto" HTTP protocol the guarded one (before Gradio's launch builds its uvicorn Config)."""
    import uvicorn.config
    from uvicorn.importer import import_from_string

    base = import_from_string(uvicorn.config.HTTP_PROTOCOLS["auto"])
    if getattr(base, "__name__", "").startswith("Guarded"):
        base = base.__mro__[1]
    protocol = guarded_protocol(base, guard)
    uvicorn.config.HTTP_PROTOCOLS["auto"] = protocol  # type: ignore[assignment]  # a class is taken as it is
    return protocol


def on_a_space() -> bool:
    return bool(os.environ.get("SPACE_ID"))


class SlowBody(Exception):
    """A request body that fell below the minimum rate: dropped, its reservation given back."""


class Pace:
    """A request body's deadline: its bytes must arrive at `min_rate` bytes/s on average after `grace` seconds (a 19
    MB paste at 4 kB/s: 80 min; 1 byte every 5 s: dropped after the grace). `receive` raises SlowBody past it."""

    def __init__(self, min_rate: float | None, grace: float = 10.0):
        self.min_rate, self.grace = min_rate, grace
        self.started = asyncio.get_running_loop().time()

    async def receive(self, receive: Any, received: int) -> dict:
        if not self.min_rate:
            return await receive()
        loop = asyncio.get_running_loop()
        left = self.started + self.grace + received / self.min_rate - loop.time()
        if left <= 0:
            raise SlowBody
        try:
            return await asyncio.wait_for(receive(), left)
        except TimeoutError:
            raise SlowBody from None

    def why(self) -> str:
        return (
            f"the request's body came too slowly: at least {self.min_rate / 1024:.0f} kB/s after its first "
            f"{self.grace:g} s (MIRROR_MIN_BODY_KBPS); it was dropped"
        )
