"""The quotas on Gradio's routes: ASGI middleware in front of Gradio (UploadQuota) that tells visitors apart by a
signed cookie, bounds every request body and counts the bytes of each upload as they arrive.

The service (explorer/) never sees a request: it reads the visitor and the address this middleware puts in the
request's state (ui.handlers.current_visitor); the trusted proxies are a setting (explorer.settings.parse_proxies).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import hmac
import ipaddress
import json
import os
import re
import secrets
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from explorer.settings import parse_proxies
from mirror.data import fmt_size
from ui.web.connections import Pace, SlowBody
from ui.web.held import Body, HeldRequests, body_width

SPOOL_CHUNK = 64 * 1024
VISITOR_COOKIE = "mirror_visitor"
TOO_BIG = "an upload is at most"
REQUEST_TOO_BIG = "a request is at most"


def client_address(scope: dict, trusted: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]) -> str:
    """Who sent a request: the peer, unless the peer is a trusted proxy; then the right-most X-Forwarded-For entry
    that is not a trusted proxy (as uvicorn's forwarded_allow_ips and werkzeug's ProxyFix read it). Entries to its
    left were written by the client itself and prove nothing."""
    peer = str((scope.get("client") or ("?",))[0])
    if not trusted or not _trusted(peer, trusted):
        return peer
    values = [v.decode("latin-1") for k, v in scope.get("headers") or [] if k == b"x-forwarded-for"]
    hops = [h.strip() for h in ",".join(values).split(",") if h.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, trusted):
            return hop
    return hops[0] if hops else peer


def _trusted(host: str, trusted: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]) -> bool:
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False  # not an address (a name, garbage): never a trusted proxy
    return any(address in net for net in trusted)


@dataclass(eq=False)
class Upload:
    """One upload request's bookkeeping: bytes received so far, and the files Gradio wrote for it."""

    t: float
    address: str
    visitor: str
    size: int = 0
    paths: list[str] = field(default_factory=list)
    done: bool = False
    charged: bool = True  # its bytes count against its visitor, address and the total


class UploadQuota:
    """ASGI middleware in front of Gradio: tells visitors apart (a signed cookie), bounds every request body, and on
    the upload route counts the bytes that arrive (chunked bodies included), cutting a request off, before Gradio sees
    any of it, the moment it would pass a limit.

    Every request: its visitor (the `mirror_visitor` cookie, signed with `key`, which this middleware sets on a
    browser's first response; an unsigned or forged one counts as none, and a client without one is "the anonymous
    visitor of its address") and its address go into `scope["state"]` (`mirror_visitor`, `mirror_address`), where
    the app's handlers read them (ui.handlers.current_visitor): the disk accounts and the training queue use them.
    A POST other than an upload is read whole before the app sees it, at most `max_request` bytes (a declared
    Content-Length over it is refused unread): a paste of MIRROR_MAX_UPLOAD_MB as JSON fits, a 400 MB body does not.

    Uploads: limits hold for uploads of the last `window` seconds still on disk (a file removed gives its bytes
    back): `quota` per visitor, `address_quota` per client address (so a visitor who drops cookies gets no more),
    `total_quota` for everyone. Uploads older than `window` are removed from disk. The client address is the peer, or
    behind `trusted` proxies the right-most untrusted X-Forwarded-For entry. An upload is tracked from its first body
    byte to an hour later (a refused or failed one is forgotten at once); at most `max_entries` are, and one address
    at most a quarter of them: past that, 429 for that address until its oldest age out."""

    def __init__(
        self,
        app: Callable,
        quota: int,
        window: float = 3600.0,
        *,
        address_quota: int | None = None,
        total_quota: int | None = None,
        trusted: str | Iterable[str] = (),
        max_body: int | None = None,
        max_request: int | None = None,
        max_entries: int = 10_000,
        key: bytes | None = None,
        known_session: Callable[[str], bool] | None = None,
        held: HeldRequests | None = None,
        min_rate: float | None = None,
        grace: float = 10.0,
        max_in_flight: int | None = None,
    ):
        self.app, self.quota, self.window = app, quota, window
        # a body's minimum pace (ui.web.connections.Pace) and the requests one client address has in flight
        self.min_rate, self.grace, self.max_in_flight = min_rate, grace, max_in_flight
        self.in_flight: collections.Counter[str] = collections.Counter()
        self.address_quota = address_quota or 4 * quota
        self.total_quota = total_quota or 8 * quota
        self.trusted = parse_proxies(trusted)
        self.max_body, self.max_request, self.max_entries = max_body, max_request, max_entries
        self.key = key or secrets.token_bytes(32)
        # whether Gradio's queue knows a session hash: a poll of its event stream for one it does not is answered
        # 404 here (Gradio raises it after starting the stream, and the server logged a 5 kB traceback per poll)
        self.known_session = known_session
        # large request bodies held in memory until their handler has read them (ui.web.held)
        self.held = held
        self.uploads: collections.deque[Upload] = collections.deque()
        self.by_visitor: collections.Counter[str] = collections.Counter()
        self.by_address: collections.Counter[str] = collections.Counter()
        self.entries: collections.Counter[str] = collections.Counter()  # tracked uploads per address
        self.total = 0
        self.lock = threading.Lock()

    # ------------------------------------------------------------------ bookkeeping (under self.lock)

    def _charge(self, upload: Upload, n: int) -> None:
        upload.size += n
        self.by_visitor[upload.visitor] += n
        self.by_address[upload.address] += n
        self.total += n

    def _release(self, upload: Upload) -> None:
        if not upload.charged:
            return
        upload.charged = False
        for counter, key in ((self.by_visitor, upload.visitor), (self.by_address, upload.address)):
            counter[key] -= upload.size
            if counter[key] <= 0:
                del counter[key]
        self.total -= upload.size

    def _forget(self, upload: Upload) -> None:
        """Drop a refused or failed upload from the table: nothing of it is on disk, it holds no place."""
        self._release(upload)
        with contextlib.suppress(ValueError):
            self.uploads.remove(upload)
            self.entries[upload.address] -= 1
            if self.entries[upload.address] <= 0:
                del self.entries[upload.address]

    def _admit(self, upload: Upload) -> str | None:
        """Track `upload` (its first bytes arrived), or why not: the table, or this address's share of it, is full."""
        if len(self.uploads) >= self.max_entries or self.entries[upload.address] >= max(1, self.max_entries // 4):
            return "too many uploads in flight; try again later"
        self.uploads.append(upload)
        self.entries[upload.address] += 1
        return None

    def prune(self, now: float) -> None:
        """Forget (and remove from disk) uploads older than the window; give back the bytes of files gone."""
        while self.uploads and (now - self.uploads[0].t > self.window) and self.uploads[0].done:
            old = self.uploads[0]
            self._forget(old)
            for path in old.paths:
                _remove_upload(path)
        for upload in self.uploads:
            if upload.done and upload.charged and upload.paths and not any(os.path.exists(p) for p in upload.paths):
                self._release(upload)  # consumed or swept: its bytes are no longer parked here

    def refusal(self, upload: Upload, more: int) -> str | None:
        """Why `more` bytes for `upload` would pass a limit, or None."""
        if self.by_visitor[upload.visitor] + more > self.quota:
            return f"upload quota reached: at most {fmt_size(self.quota)} per visitor and hour (MIRROR_UPLOAD_QUOTA_MB)"
        if self.by_address[upload.address] + more > self.address_quota:
            return f"upload quota reached: at most {fmt_size(self.address_quota)} per address and hour"
        if self.total + more > self.total_quota:
            return "the server holds as many uploads as it may for now; try again later"
        return None

    def used(self, visitor: str) -> int:
        with self.lock:
            return self.by_visitor.get(visitor, 0)

    # ------------------------------------------------------------------ the middleware

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        address = client_address(scope, self.trusted)
        with self.lock:
            crowded = self.max_in_flight is not None and self.in_flight[address] >= self.max_in_flight
            if not crowded:
                self.in_flight[address] += 1
        if crowded:  # behind a proxy, the connection cap sees the proxy: this sees its clients
            why = f"too many requests from your address at once (at most {self.max_in_flight}); try again shortly"
            return await _refuse(send, why, 429)
        try:
            return await self._call(scope, receive, send, address)
        finally:
            with self.lock:
                self.in_flight[address] -= 1
                if self.in_flight[address] <= 0:
                    del self.in_flight[address]

    async def _call(self, scope: dict, receive: Callable, send: Callable, address: str) -> None:
        cookie = visitor_cookie(scope, self.key)
        send = self._with_cookie(scope, send) if cookie is None else send
        visitor = cookie or f"@{address}"
        scope.setdefault("state", {}).update(mirror_visitor=visitor, mirror_address=address)
        if scope.get("method") != "POST":
            if self.known_session is not None and scope["path"].endswith("/queue/data"):
                query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
                session = (query.get("session_hash") or [""])[0]
                if not self.known_session(session):
                    return await _refuse(send, "no such session (join an event first)", 404)
            return await self.app(scope, receive, send)
        if not scope["path"].endswith("/upload"):
            return await self._bounded(scope, receive, send)
        upload = Upload(time.monotonic(), address, visitor)
        declared = _content_length(scope)
        with self.lock:
            self.prune(upload.t)
            why = None
            if self.max_body is not None and declared is not None and declared > self.max_body:
                why = f"{TOO_BIG} {fmt_size(self.max_body)}"
            why = why or self.refusal(upload, declared or 0)
        if why is not None:
            return await _refuse(send, why)
        spool = tempfile.SpooledTemporaryFile(max_size=2**20)
        try:
            try:
                why = await self._receive_all(upload, receive, spool, Pace(self.min_rate, self.grace))
            except SlowBody:
                why = Pace(self.min_rate, self.grace).why()
            if why is not None:
                with self.lock:
                    upload.done = True
                    self._forget(upload)
                if why:  # "" : the client went away, nobody to answer
                    await _refuse(send, why)
                return None
            spool.seek(0)
            await self.app(scope, _replay(spool, upload.size, receive), self._recording(upload, send))
        finally:
            spool.close()
            with self.lock:
                if not upload.done:  # the app failed before answering: nothing of it is kept
                    upload.done = True
                    self._forget(upload)
        return None

    async def _bounded(self, scope: dict, receive: Callable, send: Callable) -> None:
        """A POST other than an upload (an event joining the queue, an API call): read whole, within max_request,
        before the app sees it; refused unread when its declared length is over. A large body is charged to the
        held-requests account (`self.held`) from its first byte until its handler has read it or its event is over,
        and refused (429) unread, or as it arrives, when its visitor, its address or the server holds too much."""
        limit = self.max_request
        if limit is None:
            return await self.app(scope, receive, send)
        why = f"{REQUEST_TOO_BIG} {fmt_size(limit)} (MIRROR_MAX_UPLOAD_MB of text, as JSON)"
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            return await _refuse(send, why)
        state = scope["state"]
        body = Body(state["mirror_visitor"], state["mirror_address"])
        held = self.held
        if held is not None and declared:  # its declared bytes are reserved now: simultaneous ones are refused unread
            if no := held.refusal(body, declared):
                return await _refuse(send, no, 429)
            held.charge(body, declared)
        chunks, size, pace = [], 0, Pace(self.min_rate, self.grace)
        try:
            while True:
                try:
                    message = await pace.receive(receive, size)
                except SlowBody:
                    return await _refuse(send, pace.why(), 408)
                if message["type"] == "http.disconnect":
                    return None
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    return await _refuse(send, why)
                if held is not None and size > body.size:  # past what it declared (or it declared nothing)
                    if no := held.refusal(body, size - body.size):
                        return await _refuse(send, no, 429)
                    held.charge(body, size - body.size)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
            data = b"".join(chunks)
            del chunks
            if held is not None and size > held.small and (width := body_width(data)) > 1:
                # read now: what its text costs once decoded (wide characters), checked again
                if no := held.refusal(body, 0, width):
                    return await _refuse(send, no, 429)
                held.charge(body, 0, width)
            sent = False

            async def replay() -> dict:
                nonlocal sent, data
                if sent:
                    return await receive()
                sent, chunk, data = True, data, b""
                return {"type": "http.request", "body": chunk, "more_body": False}

            if held is None:
                return await self.app(scope, replay, send)
            state["mirror_release"] = lambda: held.release(body)  # the handler read it (ui.handlers.consume_request)
            # a queue event (the page's join, the API's /call/<name>) keeps its body while it lives
            event = scope["path"].endswith("/queue/join") or "/call/" in scope["path"]
            return await self.app(scope, replay, self._holding(body, event, send))
        finally:
            if held is not None and body.event_id is None:
                held.release(body)  # refused, failed, or answered: nothing waits with it

    def _holding(self, body: Body, join: bool, send: Callable) -> Callable:
        """`send` that notes the queue event a joined body became: it stays charged while the event lives."""
        answer = {"status": 0, "body": b""}

        async def holding_send(message: dict) -> None:
            if join and message["type"] == "http.response.start":
                answer["status"] = message["status"]
            elif join and message["type"] == "http.response.body" and answer["status"] == 200:
                answer["body"] += message.get("body", b"")[:4096]
                if not message.get("more_body", False):
                    with contextlib.suppress(ValueError, TypeError, AttributeError):
                        body.event_id = str(json.loads(answer["body"])["event_id"])
            await send(message)

        return holding_send

    async def _receive_all(self, upload: Upload, receive: Callable, spool: Any, pace: Pace) -> str | None:
        """Read the whole body into `spool`, charging it as it arrives; a refusal message ("" for a disconnect)
        the moment it passes a limit, else None. The upload takes its place in the table with its first bytes."""
        admitted = False
        while True:
            message = await pace.receive(receive, upload.size)
            if message["type"] == "http.disconnect":
                return ""
            chunk = message.get("body", b"")
            with self.lock:
                why = None if admitted or not chunk else self._admit(upload)
                admitted = admitted or (why is None and bool(chunk))
                over = self.max_body is not None and upload.size + len(chunk) > self.max_body
                if why is None:
                    why = f"{TOO_BIG} {fmt_size(self.max_body)}" if over else self.refusal(upload, len(chunk))
                if why is None:
                    self._charge(upload, len(chunk))
            if why is not None:
                return why
            spool.write(chunk)
            if not message.get("more_body", False):
                return None

    def _recording(self, upload: Upload, send: Callable) -> Callable:
        """`send` that notes the files Gradio wrote (its JSON answer) once the answer is complete."""
        state: dict[str, Any] = {"status": 0, "body": b""}

        async def recording_send(message: dict) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
            elif message["type"] == "http.response.body":
                if len(state["body"]) < 2**20:
                    state["body"] += message.get("body", b"")
                if not message.get("more_body", False):
                    paths = _answer_paths(state["body"]) if state["status"] == 200 else []
                    with self.lock:
                        upload.paths, upload.done = paths, True
                        if not paths:
                            self._forget(upload)  # refused by Gradio (size, type): nothing of it is on disk
            await send(message)

        return recording_send

    def _with_cookie(self, scope: dict, send: Callable) -> Callable:
        """`send` that gives a new visitor its signed cookie. Over https SameSite=None and Partitioned (CHIPS): a Space
        is shown in an iframe of huggingface.co, where browsers keep a cookie only partitioned by the top site."""
        secure = scope.get("scheme") == "https"
        attrs = "; SameSite=None; Secure; Partitioned" if secure else "; SameSite=Lax"
        token = sign_visitor(secrets.token_hex(16), self.key)
        value = f"{VISITOR_COOKIE}={token}; Path=/; Max-Age=31536000; HttpOnly{attrs}"

        async def cookie_send(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", value.encode())]}
            await send(message)

        return cookie_send


def sign_visitor(token: str, key: bytes) -> str:
    """A visitor cookie's value: its random id and the server's signature of it (`<32 hex>.<32 hex>`)."""
    return f"{token}.{hmac.new(key, token.encode(), hashlib.sha256).hexdigest()[:32]}"


def visitor_cookie(scope: dict, key: bytes) -> str | None:
    """The visitor's id (32 hex characters) from its cookie when the server signed it with `key`, else None: a
    client cannot make itself a new visitor (a fresh quota) by inventing a cookie."""
    for name_, value in scope.get("headers") or []:
        if name_ == b"cookie":
            for part in value.decode("latin-1").split(";"):
                name, _, cookie = part.strip().partition("=")
                if name == VISITOR_COOKIE and re.fullmatch(r"[0-9a-f]{32}\.[0-9a-f]{32}", cookie):
                    token = cookie.split(".")[0]
                    if hmac.compare_digest(sign_visitor(token, key), cookie):
                        return token
    return None


def _content_length(scope: dict) -> int | None:
    for key, value in scope.get("headers") or []:
        if key == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def _replay(spool: Any, size: int, receive: Callable) -> Callable:
    """A `receive` that hands the spooled body (`size` bytes) over in chunks, then passes on to the real one."""
    left = size
    finished = False

    async def replay() -> dict:
        nonlocal left, finished
        if finished:
            return await receive()
        chunk = spool.read(min(SPOOL_CHUNK, left))
        left -= len(chunk)
        finished = left <= 0 or not chunk
        return {"type": "http.request", "body": chunk, "more_body": not finished}

    return replay


def _answer_paths(body: bytes) -> list[str]:
    """The file paths in Gradio's upload answer (a JSON list of paths)."""
    try:
        answer = json.loads(body)
    except ValueError:
        return []
    return [p for p in answer if isinstance(p, str)] if isinstance(answer, list) else []


def _remove_upload(path: str) -> None:
    """Remove an aged-out upload and its folder (Gradio writes each into its own hashed folder) if now empty."""
    p = Path(path)
    try:
        p.unlink(missing_ok=True)
        if re.fullmatch(r"[0-9a-f]{64}", p.parent.name):  # Gradio's own folder for it (a sha256), not anything else
            p.parent.rmdir()
    except OSError:  # not empty (another upload of the same content), or gone already
        pass


async def _refuse(send: Callable, text: str, status: int | None = None) -> None:
    """413 for a body larger than any upload (or request) may be, 429 for a quota (it comes back with time)."""
    status = status or (413 if text.startswith((TOO_BIG, REQUEST_TOO_BIG)) else 408 if "too slowly" in text else 429)
    body = text.encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    headers.append((b"connection", b"close"))  # the rest of its body, if any, is not read: the connection ends
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
