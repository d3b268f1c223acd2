"""The pieces of issue 58's server bounds without a server: the connection guard's counts, a body's pace, the log's
bound. Through the real server: tests/test_abuse_server.py."""

from __future__ import annotations

import asyncio
import io
import ipaddress

import pytest

from ui.web.connections import ConnectionGuard, Pace, SlowBody, default_total, refusal_bytes
from ui.web.logbound import BoundedStream


def test_the_guard_counts_each_address_and_the_total_and_releases():
    guard = ConnectionGuard(per_address=2, total=3, exempt=(ipaddress.ip_network("10.0.0.0/8"),))
    assert guard.admit("1.2.3.4") is None and guard.admit("1.2.3.4") is None
    status, why = guard.admit("1.2.3.4")
    assert status == 429 and "at most 2" in why
    assert guard.admit("10.1.1.1") is None  # a trusted proxy: no per-address cap…
    status, why = guard.admit("10.1.1.1")
    assert status == 503 and "MIRROR_MAX_CONNECTIONS" in why  # …but the total holds for it too
    guard.release("1.2.3.4")
    assert guard.admit("10.1.1.1") is None and guard.by_address == {"1.2.3.4": 1, "10.1.1.1": 2}
    assert guard.refused == 2


def test_private_peers_are_exempt_only_when_asked():
    assert not ConnectionGuard().exempted("10.0.0.5")
    assert ConnectionGuard(exempt_private=True).exempted("10.0.0.5")
    assert not ConnectionGuard(exempt_private=True).exempted("8.8.8.8")
    assert not ConnectionGuard(exempt_private=True).exempted("not an address")


def test_a_refusal_is_a_whole_answer_that_closes():
    answer = refusal_bytes(429, "too many")
    head, body = answer.split(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 429 Too Many Requests") and b"connection: close" in head
    assert int(head.split(b"content-length: ")[1].split(b"\r\n")[0]) == len(body) == len(b"too many\n")


def test_total_connections_leave_room_for_the_servers_own_files():
    assert default_total(20_000) == 14_744 and default_total(256) == 64


def test_a_body_at_pace_passes_and_a_stalled_one_is_dropped():
    async def scenario() -> tuple[list[int], bool]:
        pace = Pace(min_rate=1000.0, grace=0.05)
        got, stalled = [], False

        async def fast() -> dict:
            return {"type": "http.request", "body": b"x", "more_body": True}

        for received in (0, 10, 20):  # within grace + received / rate
            got.append(len((await pace.receive(fast, received))["body"]))

        async def never() -> dict:
            await asyncio.sleep(3600)
            return {}

        try:
            await pace.receive(never, 20)  # the deadline is 0.05 + 0.02 s after the start
        except SlowBody:
            stalled = True
        return got, stalled

    got, stalled = asyncio.run(scenario())
    assert got == [1, 1, 1] and stalled


def test_no_minimum_rate_waits_for_the_body():
    async def scenario() -> dict:
        async def slow() -> dict:
            await asyncio.sleep(0.01)
            return {"body": b"late"}

        return await Pace(None, grace=0.0).receive(slow, 10**9)

    assert asyncio.run(scenario()) == {"body": b"late"}


def test_the_log_cuts_each_write_and_keeps_to_its_budget(monkeypatch):
    out = io.StringIO()
    stream = BoundedStream(out, cut=100, budget=1000, window=60.0)
    assert stream.write("x" * 10_000) == 10_000  # the caller is told all of it was written
    assert out.getvalue().startswith("x" * 100 + "… [9,900 characters cut]")
    for _ in range(50):
        stream.write("y" * 90 + "\n")
    assert len(out.getvalue()) <= 1000  # past the budget, dropped…
    kept = len(out.getvalue())
    now = stream.since + 61  # …until the window turns: then one line says how much
    monkeypatch.setattr("ui.web.logbound.time.monotonic", lambda: now)
    stream.write("z\n")
    tail = out.getvalue()[kept:]
    assert tail.startswith("[log] ") and "characters of output dropped" in tail and tail.endswith("z\n")


@pytest.mark.parametrize("name", ["fileno", "isatty", "encoding"])
def test_the_bounded_stream_is_still_its_stream(name):
    import sys

    stream = BoundedStream(sys.__stderr__)
    assert getattr(stream, name) is not None
