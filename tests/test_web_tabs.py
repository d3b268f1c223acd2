"""The server's own work for a request charged to its visitor (ui.web.tabs, issue 58): the hooks on asyncio's
callbacks and anyio's worker threads, the middleware that opens a tab per request, and the queue's events. Through
the real server: tests/test_abuse_cpu_server.py."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

import explorer.resources.cpu as cpu
from explorer.resources.accounts import Owner
from ui.web import tabs
from ui.web.quota import sign_visitor


def burn(seconds: float) -> None:
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        pass


@pytest.fixture
def hooked(monkeypatch):
    """The hooks installed for this test only (monkeypatch puts asyncio's and anyio's own back after it)."""
    from anyio._backends._asyncio import AsyncIOBackend

    monkeypatch.setattr(asyncio.events.Handle, "_run", asyncio.events.Handle._run)
    monkeypatch.setattr(
        AsyncIOBackend, "run_sync_in_worker_thread", AsyncIOBackend.__dict__["run_sync_in_worker_thread"]
    )
    assert tabs.install()
    return cpu.CpuAccounts(visitor_s=0, address_s=0)


def test_a_requests_work_on_the_event_loop_and_in_worker_threads_is_its_visitors(hooked):
    import anyio

    accounts, owner = hooked, Owner("v", "1.1.1.1")
    left: list[asyncio.Task] = []

    async def request() -> None:
        with accounts.serving(owner) as tab:
            burn(0.1)  # on the event loop, in the request's own task
            await asyncio.sleep(0)
            burn(0.1)  # a later step of it
            await anyio.to_thread.run_sync(burn, 0.1)  # a sync handler in a worker thread
            left.append(asyncio.get_running_loop().create_task(stray()))  # a task it leaves running
        return tab

    async def stray() -> None:
        await asyncio.sleep(0.05)
        burn(0.1)  # after the request ended: nobody's

    async def main():
        tab = await request()
        await left[0]
        return tab

    tab = anyio.run(main)
    assert tab.seconds == pytest.approx(0.3, abs=0.05)
    assert accounts.used(owner)[0] == pytest.approx(tab.seconds)


def test_the_middleware_charges_the_visitor_its_cookie_names_or_the_address(hooked):
    accounts, key = hooked, b"k" * 32
    seen: list[cpu.Tab | None] = []

    async def app(scope, receive, send) -> None:
        seen.append(cpu.current_tab())
        burn(0.05)

    middleware = tabs.ServerWork(app, accounts, key)
    token = "a" * 32
    with_cookie = {
        "type": "http",
        "client": ("5.6.7.8", 1),
        "headers": [(b"cookie", f"mirror_visitor={sign_visitor(token, key)}".encode())],
    }
    forged = {
        "type": "http",
        "client": ("5.6.7.8", 2),
        "headers": [(b"cookie", f"mirror_visitor={token}.{'0' * 32}".encode())],
    }
    asyncio.run(middleware(with_cookie, None, None))
    asyncio.run(middleware(forged, None, None))
    asyncio.run(middleware({"type": "lifespan"}, None, None))
    assert [t.owner if t else None for t in seen] == [Owner(token, "5.6.7.8"), Owner("@5.6.7.8", "5.6.7.8"), None]
    assert accounts.used(Owner(token, "5.6.7.8")) == (pytest.approx(0.05, abs=0.02), pytest.approx(0.1, abs=0.04))


def test_each_event_the_queue_processes_is_its_joiners(hooked):
    """Gradio's queue processes an event from its own loop, outside the request that joined it: the event's work is
    charged to the visitor the quota middleware named on that request."""
    accounts = hooked
    inside: list[cpu.Tab | None] = []

    async def process_events(events, batch, begin, fn) -> None:
        inside.append(cpu.current_tab())
        burn(0.05)

    queue = SimpleNamespace(process_events=process_events)
    tabs.meter_events(queue, accounts)
    tabs.meter_events(queue, accounts)  # once only
    state = {"mirror_visitor": "v", "mirror_address": "1.1.1.1"}
    event = SimpleNamespace(request=SimpleNamespace(scope={"state": state}), fn=SimpleNamespace(api_name="export"))
    asyncio.run(queue.process_events([event], False, 0.0, None))
    asyncio.run(queue.process_events([SimpleNamespace(request=None)], False, 0.0, None))  # nobody's: not metered
    assert inside[0].owner == Owner("v", "1.1.1.1") and inside[0].what == "an event (export)" and inside[1] is None
    assert accounts.used(Owner("v", "1.1.1.1"))[0] == pytest.approx(0.05, abs=0.02)
