"""Download links that say nothing of the server's folders: `download/<token>/<file name>`.

Gradio serves a file a handler returns at `/gradio_api/file=<its absolute path>` (after copying it into its cache): a
visitor reads the server's temp folder in every link, and a model zip costs its size twice on disk. The app's
downloads (the tuned model and index zips, Explore's exports, What moved's CSV) are links instead, made here:

- `Downloads.link(path)` registers a file the app made and returns its link: an unguessable token (one per file, the
  same link each time the file is offered again) and the file's own name, relative to the page (so it works under a
  proxy's path prefix too). Nothing else can be fetched: a token names one registered file, and the name must match.
- `DownloadRoute` (ASGI middleware in front of Gradio) answers GET and HEAD of such a link from the file where it
  lies (the run folder, the session folder), with its name as the attachment's, ranges included (Starlette's
  FileResponse). A link whose file is gone (the run deleted, the session ended) or that was forgotten (past
  `max_links`, the oldest first) answers 404 with a line saying to make it again.
"""

from __future__ import annotations

import collections
import re
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, unquote

from starlette.responses import FileResponse, PlainTextResponse

PREFIX = "download"
ROUTE = re.compile(rf"/{PREFIX}/([A-Za-z0-9_-]{{16,64}})/([^/]+)$")


class Downloads:
    """The files the app offers for download, by token (at most `max_links`; the oldest forgotten first)."""

    def __init__(self, max_links: int = 20_000):
        self.max_links = max_links
        self.by_token: collections.OrderedDict[str, Path] = collections.OrderedDict()
        self.by_path: dict[Path, str] = {}
        self.lock = threading.Lock()

    def link(self, path: str | Path) -> str:
        """The link of the file at `path` (registered on first use): `download/<token>/<quoted name>`."""
        path = Path(path).resolve()
        with self.lock:
            token = self.by_path.get(path)
            if token is None:
                token = secrets.token_urlsafe(18)
                self.by_token[token], self.by_path[path] = path, token
                while len(self.by_token) > self.max_links:
                    _, old = self.by_token.popitem(last=False)
                    self.by_path.pop(old, None)
            else:
                self.by_token.move_to_end(token)
        return f"{PREFIX}/{token}/{quote(path.name)}"

    def file(self, token: str, name: str) -> Path | None:
        """The registered file of `token`, if its name is `name` and it still exists."""
        with self.lock:
            path = self.by_token.get(token)
        return path if path is not None and path.name == name and path.is_file() else None


class DownloadRoute:
    """ASGI middleware: GET/HEAD `…/download/<token>/<name>` served from `downloads`; everything else to `app`."""

    def __init__(self, app: Callable, downloads: Downloads):
        self.app, self.downloads = app, downloads

    async def __call__(self, scope, receive, send) -> None:
        match = ROUTE.search(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None or scope.get("method") not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        path = self.downloads.file(match.group(1), unquote(match.group(2)))
        if path is None:
            response = PlainTextResponse(
                "This download link has expired (its run or session is gone): make the file again on the page.",
                status_code=404,
            )
        else:
            response = FileResponse(path, filename=path.name, headers={"Cache-Control": "private, no-store"})
        await response(scope, receive, send)
