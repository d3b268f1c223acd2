"""Issue 58's probes of the public server, against the real app with its default limits (`python app.py` on a free
port, no model work): what one client does without a body or a job that an account sees.

    .venv/bin/python bench/bench_abuse_server.py [--connections 21000] [--events 5] [--event-mb 19]

1. idle connections: one address (127.0.0.9) opens `--connections` connections, each a POST declaring 200 kB with
   one byte sent (what a slow-body attacker holds). Reported: how many the server kept and refused, its open files
   at the end, and another visitor's (127.0.0.2) /config time while they are held (5 tries: the slowest).
2. malformed events: `--events` events of the Tune tab's "train" handler with too few inputs, one of them a string of
   `--event-mb` MB. Reported: what the log grew by, and what the visitor was answered.
3. stalled bodies: 2 addresses x 2 POSTs declaring 40 MiB, 1 byte sent (all of MIRROR_REQUEST_MEMORY_MB reserved),
   and another address's 19 MB body 5, 15 and 60 s later: read (accepted) or refused.

Prints a table; JSON: bench/out/abuse_server.json.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import common  # puts the project on sys.path

from tests.server import Page, serve  # noqa: E402

MB = 2**20


def connect(url: str, source: str, timeout: float = 30) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(timeout)
    sock.connect((parts.hostname, parts.port))
    return sock


def head(url: str, declared: int) -> bytes:
    host = urlsplit(url).netloc
    return (
        f"POST /gradio_api/queue/join HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n\r\n"
    ).encode()


def config_seconds(url: str, source: str) -> float:
    import httpx

    with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=60) as client:
        t = time.perf_counter()
        client.get(url + "config").raise_for_status()
        return time.perf_counter() - t


def idle_connections(url: str, pid: int, n: int) -> dict:
    kept, refused, failed = [], 0, 0
    t0 = time.perf_counter()
    for _ in range(n):
        try:
            sock = connect(url, "127.0.0.9", timeout=5)
            sock.sendall(head(url, 200_000) + b"[")
        except OSError:
            failed += 1
            continue
        sock.settimeout(0.05)  # a refusal comes at once; a kept connection says nothing
        try:
            answer = sock.recv(200)
        except TimeoutError:
            kept.append(sock)
            continue
        except OSError:
            answer = b""
        refused += answer.startswith(b"HTTP/1.1 429")
        sock.close()
    opened_s = time.perf_counter() - t0
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    config = max(config_seconds(url, "127.0.0.2") for _ in range(5))
    for sock in kept:
        sock.close()
    return {"attempts": n, "kept": len(kept), "refused_429": refused, "failed": failed, "server_fds": fds,
            "other_config_s_max_of_5": round(config, 3), "attack_s": round(opened_s, 1)}  # fmt: skip


def malformed_events(url: str, log: Path, n: int, mb: float) -> dict:
    page = Page(url)
    before = log.stat().st_size
    answers = []
    for k in range(n):
        answer = page.event("train", ["x" * int(mb * MB) + str(k), None])
        answers.append(str((answer.get("output") or {}).get("error")))
    return {"events": n, "mb_each": mb, "log_grew_bytes": log.stat().st_size - before, "answer": answers[0][:160]}


def stalled_bodies(url: str) -> dict:
    socks = []
    for source in ("127.0.0.31", "127.0.0.32"):
        for _ in range(2):
            sock = connect(url, source)
            sock.sendall(head(url, 40 * MB) + b"[")
            socks.append(sock)
    t0, out = time.monotonic(), {}
    for at in (5, 15, 60):
        time.sleep(max(0.0, t0 + at - time.monotonic()))
        victim = connect(url, "127.0.0.40")
        victim.sendall(head(url, 19 * MB) + b"[" * 4096)
        victim.settimeout(2)
        try:
            answer = victim.recv(300)
        except TimeoutError:
            answer = b""  # no answer before the body is whole: it is being read
        out[f"victim_at_{at}s"] = "read (accepted)" if answer == b"" else answer.split(b"\r\n")[0].decode()
        victim.close()
    answers = []
    for sock in socks:
        sock.settimeout(1)
        with contextlib.suppress(OSError):
            answers.append(sock.recv(200).split(b"\r\n")[0].decode())
        sock.close()
    out["stalled_answers"] = sorted(set(answers))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=21_000)
    parser.add_argument("--events", type=int, default=5)
    parser.add_argument("--event-mb", type=float, default=19)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="abuse_server_"))
    rows = {}
    with serve(work, {"MIRROR_GENERAL_CHECKS": "0"}) as served:
        rows["idle connections"] = idle_connections(served.url, served.proc.pid, args.connections)
        rows["malformed events"] = malformed_events(served.url, served.log, args.events, args.event_mb)
        rows["stalled bodies"] = stalled_bodies(served.url)
        rows["log_total_bytes"] = served.log.stat().st_size
    for name, row in rows.items():
        print(f"{name:18} {row}")
    common.write_json("abuse_server.json", rows)


if __name__ == "__main__":
    main()
