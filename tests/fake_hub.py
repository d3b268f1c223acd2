"""A fake Hugging Face Hub on 127.0.0.1 for tests: the few endpoints huggingface_hub 2.4 calls to create a repo and
commit files to it (regular, base64 files in the ndjson commit: the fake answers "regular" to every preupload, unless
`lfs_suffixes` names files it wants through LFS's basic transfer: batch, PUT, then an lfsFile in the commit; Xet
is never offered, so a test of LFS sets HF_HUB_DISABLE_XET), to read a dataset (info with file sizes, file download),
and to download a model's files (info with file sizes, file download: what `snapshot_download` asks).

    with FakeHub(tokens={"hf_good"}) as hub:        # hub.url: set HF_ENDPOINT to it
        hub.datasets["me/words"] = {"data/train-00000.parquet": b"..."}
        hub.models["org/encoder"] = {"config.json": b"...", "model.safetensors": b"..."}
        ...
        hub.repos["me/model"]["files"]["README.md"]  # what a push left there

Endpoints: POST /api/repos/create, POST /api/validate-yaml, POST /api/{type}s/{repo}/preupload/{rev},
POST /api/{type}s/{repo}/commit/{rev}, POST /{repo}.git/info/lfs/objects/batch, PUT /lfs-upload/{oid}, GET /api/datasets/{repo}[/revision/{rev}], GET /datasets/{repo}/resolve/
{rev}/{path} (also HEAD), GET /api/models/{repo}[/revision/{rev}], GET /api/models/{repo}/tree/{rev}, GET /{repo}/resolve/
{rev}/{path} (also HEAD).
Anything else answers 404 (and is in `hub.requests`, so a test sees what was asked).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

SHA = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self, tokens: set[str] | None = None, lfs_suffixes: tuple[str, ...] = ()):
        self.tokens = set(tokens or ())  # accepted for writes (Bearer); reads need none
        self.lfs_suffixes = lfs_suffixes  # files the preupload sends through LFS (basic transfer), not inline
        self.lfs: dict[str, bytes] = {}  # sha256 -> bytes PUT by an LFS upload
        self.repos: dict[str, dict[str, Any]] = {}  # repo id -> {private, type, files: {path: bytes}, commits}
        self.datasets: dict[str, dict[str, bytes]] = {}  # dataset id -> {path: bytes}
        self.models: dict[str, dict[str, bytes]] = {}  # model id -> {path: bytes} (read only: downloads)
        self.requests: list[dict[str, Any]] = []  # method, path, query, authorization
        self.lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                hub.handle(self, "GET")

            def do_HEAD(self) -> None:
                hub.handle(self, "HEAD")

            def do_POST(self) -> None:
                hub.handle(self, "POST")

            def do_PUT(self) -> None:
                hub.handle(self, "PUT")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    # ---------------------------------------------------------------- dispatch

    def handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(h.path)
        path, query = unquote(parts.path), parts.query
        body = read_body(h)
        auth = h.headers.get("authorization")
        with self.lock:
            self.requests.append({"method": method, "path": path, "query": query, "authorization": auth})
        token = auth[len("Bearer ") :] if auth and auth.startswith("Bearer ") else None
        routes = [
            ("POST", r"/api/repos/create", self.create_repo),
            ("POST", r"/api/validate-yaml", lambda: (200, {"errors": [], "warnings": []})),
            (
                "POST",
                r"/api/(models|datasets|spaces)/(?P<repo>[^/]+(?:/[^/]+)?)/preupload/(?P<rev>[^/]+)",
                self.preupload,
            ),
            ("POST", r"/api/(models|datasets|spaces)/(?P<repo>[^/]+(?:/[^/]+)?)/commit/(?P<rev>[^/]+)", self.commit),
            ("POST", r"/(?P<repo>[^/]+(?:/[^/]+)?)\.git/info/lfs/objects/batch", self.lfs_batch),
            ("PUT", r"/lfs-upload/(?P<oid>[0-9a-f]{64})", self.lfs_put),
            ("GET", r"/api/datasets/(?P<repo>[^/]+(?:/[^/]+)?)(?:/revision/(?P<rev>[^/]+))?", self.dataset_info),
            ("GET", r"/datasets/(?P<repo>[^/]+/[^/]+|[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)", self.resolve),
            ("HEAD", r"/datasets/(?P<repo>[^/]+/[^/]+|[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)", self.resolve),
            ("GET", r"/api/models/(?P<repo>[^/]+(?:/[^/]+)?)/tree/(?P<rev>[^/]+)", self.model_tree),
            ("GET", r"/api/models/(?P<repo>[^/]+(?:/[^/]+)?)(?:/revision/(?P<rev>[^/]+))?", self.model_info),
            ("GET", r"/(?P<repo>[^/]+/[^/]+|[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)", self.resolve_model),
            ("HEAD", r"/(?P<repo>[^/]+/[^/]+|[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)", self.resolve_model),
        ]
        for verb, pattern, fn in routes:
            m = re.fullmatch(pattern, path)
            if verb == method and m:
                kwargs = {k: v for k, v in m.groupdict().items() if v is not None}
                writes = (self.create_repo, self.preupload, self.commit, self.lfs_batch)  # need a good token
                if fn in writes and token not in self.tokens:
                    return self.reply(h, 401, {"error": "Invalid username or password."}, method)
                if fn in (*writes, self.lfs_put):  # an LFS PUT goes to storage, without the token
                    kwargs["body"] = body
                status, payload = fn(**kwargs)
                return self.reply(h, status, payload, method)
        return self.reply(h, 404, {"error": "Not Found"}, method, headers={"X-Error-Code": "RepoNotFound"})

    def reply(
        self, h: BaseHTTPRequestHandler, status: int, payload: Any, method: str, headers: dict | None = None
    ) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/octet-stream" if isinstance(payload, bytes) else "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.send_header("X-Repo-Commit", SHA)
        h.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        if method != "HEAD":
            h.wfile.write(data)

    # ---------------------------------------------------------------- writes

    def create_repo(self, body: bytes) -> tuple[int, Any]:
        req = json.loads(body)
        repo = f"{req['organization']}/{req['name']}" if req.get("organization") else f"user/{req['name']}"
        with self.lock:
            if repo in self.repos:
                return 409, {"error": "You already created this model repo", "url": f"{self.url}/{repo}"}
            self.repos[repo] = {
                "private": req.get("visibility") == "private",
                "visibility": req.get("visibility"),
                "type": req.get("type") or "model",
                "files": {},
                "commits": [],
            }
        return 200, {"url": f"{self.url}/{repo}", "name": repo}

    def preupload(self, repo: str, rev: str, body: bytes) -> tuple[int, Any]:
        if repo not in self.repos:
            return 404, {"error": "Repository not found"}
        files = json.loads(body)["files"]
        return 200, {
            "files": [
                {
                    "path": f["path"],
                    "uploadMode": "lfs" if f["path"].endswith(self.lfs_suffixes or ("\0",)) else "regular",
                    "shouldIgnore": False,
                    "oid": None,
                }
                for f in files
            ]
        }

    def lfs_batch(self, repo: str, body: bytes) -> tuple[int, Any]:
        req = json.loads(body)
        objects = [
            {"oid": o["oid"], "size": o["size"], "actions": {"upload": {"href": f"{self.url}/lfs-upload/{o['oid']}"}}}
            for o in req["objects"]
        ]
        return 200, {"transfer": "basic", "objects": objects}

    def lfs_put(self, oid: str, body: bytes) -> tuple[int, Any]:
        if hashlib.sha256(body).hexdigest() != oid:
            return 400, {"error": "sha256 mismatch"}
        with self.lock:
            self.lfs[oid] = body
        return 200, {}

    def commit(self, repo: str, rev: str, body: bytes) -> tuple[int, Any]:
        if repo not in self.repos:
            return 404, {"error": "Repository not found"}
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        files = {}
        for item in lines:
            if item["key"] == "file":
                files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
            elif item["key"] == "lfsFile":
                if item["value"]["oid"] not in self.lfs:
                    return 400, {"error": f"LFS object of {item['value']['path']} was never uploaded"}
                files[item["value"]["path"]] = self.lfs[item["value"]["oid"]]
            elif item["key"] != "header":
                return 400, {"error": f"the fake hub does not take {item['key']} entries"}
        with self.lock:
            self.repos[repo]["files"].update(files)
            self.repos[repo]["commits"].append(lines[0]["value"])
        oid = hashlib.sha1(body).hexdigest()
        return 200, {"commitUrl": f"{self.url}/{repo}/commit/{oid}", "commitOid": oid}

    # ---------------------------------------------------------------- reads

    def dataset_info(self, repo: str, rev: str = "main") -> tuple[int, Any]:
        if repo not in self.datasets:
            return 404, {"error": "Repository not found"}
        siblings = [{"rfilename": p, "size": len(b)} for p, b in self.datasets[repo].items()]
        return 200, {"id": repo, "sha": SHA, "private": False, "gated": False, "siblings": siblings}

    def model_info(self, repo: str, rev: str = "main") -> tuple[int, Any]:
        if repo not in self.models:
            return 404, {"error": "Repository not found"}
        siblings = [{"rfilename": p, "size": len(b)} for p, b in self.models[repo].items()]
        return 200, {"id": repo, "modelId": repo, "sha": SHA, "private": False, "gated": False, "siblings": siblings}

    def model_tree(self, repo: str, rev: str) -> tuple[int, Any]:
        if repo not in self.models:
            return 404, {"error": "Repository not found"}
        files = self.models[repo].items()
        return 200, [{"type": "file", "path": p, "size": len(b), "oid": hashlib.sha1(b).hexdigest()} for p, b in files]

    def resolve_model(self, repo: str, rev: str, file: str) -> tuple[int, Any]:
        data = self.models.get(repo, {}).get(file)
        if data is None:
            return 404, {"error": "Entry not found"}
        return 200, data

    def resolve(self, repo: str, rev: str, file: str) -> tuple[int, Any]:
        data = self.datasets.get(repo, {}).get(file)
        if data is None:
            return 404, {"error": "Entry not found"}
        return 200, data


def read_body(h: BaseHTTPRequestHandler) -> bytes:
    """A request's body: by Content-Length, or chunked (how a streamed upload comes)."""
    if "chunked" in (h.headers.get("transfer-encoding") or "").lower():
        out = b""
        while True:
            size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                h.rfile.readline()  # the blank line after the last chunk (no trailers sent by httpx)
                return out
            out += h.rfile.read(size)
            h.rfile.readline()
    length = int(h.headers.get("content-length") or 0)
    return h.rfile.read(length) if length else b""
