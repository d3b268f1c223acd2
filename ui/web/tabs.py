"""The server's own work for a request charged to the visitor who sent it (issue 58, "CPU charged to who spent it").

A request costs the server more than the job it may start: Gradio's queue and event stream, its pre- and
post-processing (the answer's file put in its cache), the file served when the client fetches it, /config. That work
runs in the server's threads, the event loop's and the worker threads', outside any metered job; it was part of
the rest of the process's CPU that the running jobs share (explorer.resources.cpu), so a stranger's one-row exports
pushed a victim's run to 1.19x its charge alone (bench/RESULTS.md "Abuse (issue 58)"). Here each request and each
event the queue processes opens a tab (`CpuAccounts.serving`) for its visitor, and every stretch of server work done
in its context is charged to it, measured by the thread's own CPU clock:

- on the event loop: each callback (asyncio's `Handle._run`, which every task step and I/O callback goes through)
  run in a context whose tab is open (or opened by it: a request's first step);
- in a worker thread: each call handed over by `anyio.to_thread.run_sync` (Gradio's sync handlers and generators,
  Starlette's file stats and sync routes) from such a context, less what metered jobs on that thread were charged.

Contexts carry the tab as asyncio and anyio copy them (a task started for the request, a call handed to a thread);
a task a request leaves running finds its tab closed and charges nobody (Gradio's queue loop is started from its
first request). The visitor is the one the quota middleware names (ui.web.quota: the signed cookie, or the address's
anonymous visitor). With uvloop (compiled handles) or another anyio, the hooks are not installed and that work is
nobody's: never the running jobs' (the server threads are kept out of their rest either way).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
from collections.abc import Callable, Iterable
from typing import Any

from explorer.resources.accounts import Owner
from explorer.resources.cpu import CpuAccounts, callback_call, charged_call, current_tab
from explorer.settings import parse_proxies
from ui.web.quota import client_address, visitor_cookie

log = logging.getLogger("mirror.cpu")
_MARK = "_mirror_tabs"


def install() -> bool:
    """Charge the server's work to the open tab of its context, on the event loop and in anyio's worker threads
    (once per process). False where either hook could not be put in (then that part is nobody's)."""
    return _hook_event_loop() & _hook_worker_threads()


def _hook_event_loop() -> bool:
    handle = asyncio.events.Handle
    original = handle._run
    if getattr(original, _MARK, False):
        return True

    def _run(self: asyncio.Handle) -> None:
        return callback_call(self._context, original, self)  # type: ignore[attr-defined]

    setattr(_run, _MARK, True)
    handle._run = _run  # type: ignore[method-assign]
    return True


def _hook_worker_threads() -> bool:
    try:
        from anyio._backends._asyncio import AsyncIOBackend
    except ImportError:
        return False
    original = getattr(AsyncIOBackend, "run_sync_in_worker_thread", None)
    if original is None:
        log.warning("anyio has no run_sync_in_worker_thread: worker threads' work for requests is charged to nobody")
        return False
    if getattr(original, _MARK, False):
        return True

    async def run_sync_in_worker_thread(cls: type, func: Callable, args: tuple, *rest: Any, **kwargs: Any) -> Any:
        tab = current_tab()
        if tab is not None:
            func = functools.partial(charged_call, tab, func)
        return await original(func, args, *rest, **kwargs)

    setattr(run_sync_in_worker_thread, _MARK, True)  # read back through the bound method
    AsyncIOBackend.run_sync_in_worker_thread = classmethod(run_sync_in_worker_thread)  # type: ignore[method-assign]
    return True


class ServerWork:
    """ASGI middleware, outermost: each HTTP request is served under a tab of its visitor (the signed `key`'s cookie,
    or the anonymous visitor of its address, the proxies in `trusted` seen through), from its first byte read to its
    last sent, the download links and the quota's own work included."""

    def __init__(self, app: Callable, accounts: CpuAccounts, key: bytes, trusted: str | Iterable[str] = ()):
        self.app, self.accounts, self.key = app, accounts, key
        self.trusted: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = parse_proxies(trusted)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        address = client_address(scope, self.trusted)
        owner = Owner(visitor_cookie(scope, self.key) or f"@{address}", address)
        with self.accounts.serving(owner, "a request"):
            await self.app(scope, receive, send)


def meter_events(queue: Any, accounts: CpuAccounts) -> None:
    """Each event Gradio's `queue` processes (its pre- and post-processing, its handler's calls in worker threads)
    under a tab of the visitor whose request joined it: the queue starts it from its own loop, outside that request."""
    process = queue.process_events
    if getattr(process, _MARK, False):
        return

    async def process_events(events: list, *args: Any, **kwargs: Any) -> None:
        owner = _event_owner(events)
        if owner is None:
            await process(events, *args, **kwargs)
            return
        fn = getattr(events[0], "fn", None)
        with accounts.serving(owner, f"an event ({getattr(fn, 'api_name', None) or getattr(fn, 'name', '?')})"):
            await process(events, *args, **kwargs)

    setattr(process_events, _MARK, True)
    queue.process_events = process_events


def _event_owner(events: list) -> Owner | None:
    """Who sent the request that joined the first of `events` (the quota middleware put it in the request's state)."""
    request = getattr(events[0], "request", None) if events else None
    state = (getattr(request, "scope", None) or {}).get("state") or {}
    visitor, address = state.get("mirror_visitor"), state.get("mirror_address")
    if not isinstance(visitor, str) or not visitor:
        return None
    return Owner(visitor=visitor, address=str(address or ""))
