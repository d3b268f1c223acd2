"""Issue 58: what one client can do to the public server without a body or a job that an account sees, each against
the real server over raw sockets: idle and half-sent connections, bodies that stall while holding a reservation, and
malformed events that carried their inputs into the log.

Clients speak from their own loopback addresses (127.0.0.x: all of 127/8 is this machine), so the server sees each
as another address. The pieces underneath: tests/test_explorer_connections.py (the guard, the pace, the log bound).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.server import Page, Served, serve

MB = 2**20
PER_ADDRESS = 16
DEADLINE_S = 2.0  # MIRROR_HEADER_TIMEOUT_S here: also the grace before a body's pace counts


@pytest.fixture(scope="module")
def guarded(tmp_path_factory) -> Iterator[Served]:
    work = tmp_path_factory.mktemp("abuse_server")
    env = {
        "MIRROR_MAX_CONNECTIONS_PER_ADDRESS": str(PER_ADDRESS),
        "MIRROR_HEADER_TIMEOUT_S": str(DEADLINE_S),
        "MIRROR_MIN_BODY_KBPS": "64",
        "MIRROR_MAX_UPLOAD_MB": "2",  # a request (a paste) is at most ~4 MB
        "MIRROR_REQUEST_MEMORY_MB": "32",  # ... and 8 MB of them held at once (each charged 4x its size: ui.web.held)
        "MIRROR_GENERAL_CHECKS": "0",
    }
    with serve(work, env) as served:
        yield served


def open_fds(served: Served) -> int:
    return len(os.listdir(f"/proc/{served.proc.pid}/fd"))


def connect(served: Served, source: str) -> socket.socket:
    """A TCP connection to the server from loopback address `source`."""
    parts = urlsplit(served.url)
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(30)
    sock.connect((parts.hostname, parts.port))
    return sock


def post_head(served: Served, declared: int, path: str = "/gradio_api/queue/join") -> bytes:
    host = urlsplit(served.url).netloc
    return f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n\r\n".encode()


def answer_when_closed(sock: socket.socket, limit: float = 60.0) -> bytes:
    """Everything the server sends until it closes the connection (a bound of `limit` s: a server that never closes
    it fails here, not by a time measured)."""
    sock.settimeout(limit)
    answer = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def config_answers(served: Served, source: str) -> int:
    import httpx

    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=30) as client:
        return client.get(served.url + "config").status_code


@pytest.mark.slow
def test_one_address_cannot_hold_more_than_its_connections(guarded):
    """High row 1: 21,000 idle connections of one address (a POST declaring 200 kB, a byte every 5 s) filled the
    server's open files and another visitor's /config timed out. Here 200 such connections of one address: the
    server keeps PER_ADDRESS of them, answers the rest 429 at once, and another address is served."""
    before = open_fds(guarded)
    socks, refused = [], 0
    for _ in range(200):
        sock = connect(guarded, "127.0.0.9")
        sock.sendall(post_head(guarded, 200_000) + b"[")
        socks.append(sock)
    for sock in socks[PER_ADDRESS:]:
        answer = answer_when_closed(sock)
        refused += answer.startswith(b"HTTP/1.1 429") and b"too many open connections" in answer
    assert refused == 200 - PER_ADDRESS
    grew = open_fds(guarded) - before
    assert grew <= PER_ADDRESS + 8, grew  # the kept ones (and a few of the server's own), not 200
    assert config_answers(guarded, "127.0.0.2") == 200  # another visitor is served meanwhile
    for sock in socks:
        sock.close()


@pytest.mark.slow
def test_half_sent_headers_and_stalled_bodies_are_dropped(guarded):
    """High row 1's deadline and the Medium row 'a large body that never finishes keeps its reservation': headers
    never finished are closed after the deadline; bodies that stall (declared 3 MB, 1 kB sent) are dropped with 408
    and give back what they reserved, so another visitor's large paste is read again."""
    half = connect(guarded, "127.0.0.20")
    half.sendall(b"GET /config HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # a header a byte at a time, never finished
    stalled = []
    for source in ("127.0.0.21", "127.0.0.22"):
        sock = connect(guarded, source)
        sock.sendall(post_head(guarded, 3 * MB) + b"[" * 1024)
        stalled.append(sock)
    # the server's 8 MB of held bodies: a third 3 MB body from elsewhere is refused while these two stall
    third = connect(guarded, "127.0.0.23")
    third.sendall(post_head(guarded, 3 * MB) + b"[" * 1024)
    assert answer_when_closed(third).startswith(b"HTTP/1.1 429")
    assert answer_when_closed(half) == b""  # closed, nothing said: no request was made
    for sock in stalled:
        answer = answer_when_closed(sock)
        assert answer.startswith(b"HTTP/1.1 408") and b"too slowly" in answer, answer[:300]
    # their reservation is free: another visitor's large body is being read now (no answer before it is whole)
    fourth = connect(guarded, "127.0.0.24")
    fourth.sendall(post_head(guarded, 3 * MB) + b"[" * 1024)
    fourth.settimeout(DEADLINE_S / 2)
    with pytest.raises(TimeoutError):
        fourth.recv(100)
    for sock in (half, third, fourth, *stalled):
        sock.close()


@pytest.mark.slow
def test_malformed_events_get_a_message_and_leave_the_log_short(guarded):
    """High row 2: an event with too few inputs, one of them a large string: Gradio printed its traceback with the
    inputs (1 byte of log per byte sent) and answered {"error": null}. Here: a message naming what is missing, and
    five such events of 2 MB add little to the log."""
    page = Page(guarded.url)
    fn_index, _ = page.fn("train")
    needed = len(page.config["dependencies"][fn_index]["inputs"])
    before = guarded.log.stat().st_size
    answers = [page.event("train", ["x" * (2 * MB) + str(k), None]) for k in range(5)]
    # (Gradio prints a failed event's traceback before it answers, and the server's output is unbuffered)
    grew = guarded.log.stat().st_size - before
    assert grew < 64 * 1024, grew  # 10 MB sent; before: ~10 MB of log
    for answer in answers:
        assert answer.get("success") is False, answer
        error = str((answer.get("output") or {}).get("error"))
        assert f"needs {needed} input values, it was sent 2" in error, answer


@pytest.mark.slow
def test_a_short_text_field_of_megabytes_is_refused_before_its_handler(guarded):
    """A search's queries, a filter, a run id or an export format of megabytes reached its handler, which split,
    lowered, encoded or quoted it back (charged to the request memory while read, never cut). Now every text field
    but the strings to tune on has a length (Gradio's max_length, which only the browser kept) that the server holds
    before any handler: the answer names the field and the length."""
    page = Page(guarded.url)
    big = "kitten " * 150_000  # ~1 MB
    for name, inputs, field, limit in [
        ("search", {0: big}, "queries", "20,000"),
        ("search", {0: "kitten", 3: big}, "run", "1,000"),
        ("neighbours", {0: big}, "text", "20,000"),
        ("moved", {0: big}, "filter", "1,000"),
        ("export", {0: big}, "fmt", "1,000"),
        ("map", {1: big}, "queries", "20,000"),
    ]:
        answer = page.event(name, inputs)
        error = str((answer.get("output") or {}).get("error"))
        assert answer.get("success") is False and len(error) < 300, (name, error[:300])
        assert f"{field} is {len(big):,} characters long; this server takes at most {limit} there" in error, error
    # the JSON inputs (issue 58's leftover): a settings dict holding a megabyte, a million row numbers and more
    from ui.api import MAX_BROWSER_JSON, MAX_ROWS_JSON, MAX_SETTINGS_JSON

    for name, inputs, field, limit in [
        ("train", {0: "cat\ndog", 5: {"lr": big}}, "settings", MAX_SETTINGS_JSON),
        ("export", {1: [7] * (MAX_ROWS_JSON // 8 + 1)}, "rows", MAX_ROWS_JSON),
        ("on_load", {0: big}, "a JSON input", MAX_BROWSER_JSON),  # the page's own BrowserState, sent back
    ]:
        answer = page.event(name, inputs)
        error = str((answer.get("output") or {}).get("error"))
        assert answer.get("success") is False and len(error) < 300, (name, error[:300])
        assert f"{field} is over about {limit:,} characters of JSON" in error, error
