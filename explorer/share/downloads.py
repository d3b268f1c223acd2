"""Download links that say nothing of the server's folders: `download/<token>/<file name>`.

Gradio serves a file a handler returns at `/gradio_api/file=<its absolute path>` (after copying it into its cache): a
visitor reads the server's temp folder in every link, and a model zip costs its size twice on disk. The app's
downloads (the tuned model and index zips, Explore's exports, What moved's CSV) are links instead, made here:
`Downloads.link(path)` registers a file the app made and returns its link: an unguessable token (one per file, the
same link each time the file is offered again) and the file's own name, relative to the page (so it works under a
proxy's path prefix too). Nothing else can be fetched: a token names one registered file, and the name must match.

The registry is the service's state (MirrorApp.downloads: the links it handed out, each visitor's bounded apart);
answering a request for a link is the web layer's (ui.web.downloads.DownloadRoute).
"""

from __future__ import annotations

import collections
import secrets
import threading
from pathlib import Path
from urllib.parse import quote

PREFIX = "download"  # a link's first part (ui.web.downloads.ROUTE answers it)


class Downloads:
    """The files the app offers for download, by token (at most `max_links`; the oldest forgotten first)."""

    def __init__(self, max_links: int = 20_000, per_owner: int = 500):
        self.max_links, self.per_owner = max_links, per_owner
        self.by_token: collections.OrderedDict[str, Path] = collections.OrderedDict()
        self.by_path: dict[Path, str] = {}
        # each visitor's own links, oldest first: past `per_owner` a visitor's oldest goes, nobody else's (issue 58:
        # one page made 300 links in 33 s, and the shared registry would have pushed everyone's out in ~37 min)
        self.by_owner: dict[str, collections.OrderedDict[str, None]] = {}
        self.owner_of: dict[str, str] = {}
        self.lock = threading.Lock()

    def link(self, path: str | Path, owner: str | None = None) -> str:
        """The link of the file at `path` (registered on first use, for `owner`: a visitor, or None for the
        app's own): `download/<token>/<quoted name>`."""
        path = Path(path).resolve()
        with self.lock:
            token = self.by_path.get(path)
            if token is None:
                token = secrets.token_urlsafe(18)
                self.by_token[token], self.by_path[path] = path, token
                if owner is not None:
                    mine = self.by_owner.setdefault(owner, collections.OrderedDict())
                    mine[token], self.owner_of[token] = None, owner
                    while len(mine) > self.per_owner:
                        self._forget(next(iter(mine)))
                while len(self.by_token) > self.max_links:
                    self._forget(next(iter(self.by_token)))
            else:
                self.by_token.move_to_end(token)
                owned = self.owner_of.get(token)
                if owned is not None:
                    self.by_owner[owned].move_to_end(token)
        return f"{PREFIX}/{token}/{quote(path.name)}"

    def _forget(self, token: str) -> None:
        path = self.by_token.pop(token, None)
        if path is not None:
            self.by_path.pop(path, None)
        owner = self.owner_of.pop(token, None)
        if owner is not None:
            mine = self.by_owner[owner]
            mine.pop(token, None)
            if not mine:
                del self.by_owner[owner]

    def file(self, token: str, name: str) -> Path | None:
        """The registered file of `token`, if its name is `name` and it still exists."""
        with self.lock:
            path = self.by_token.get(token)
        return path if path is not None and path.name == name and path.is_file() else None
