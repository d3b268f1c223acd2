"""Download links answered: `DownloadRoute` (ASGI middleware in front of Gradio) serves GET and HEAD of a link the
service made (explorer.share.downloads: `download/<token>/<file name>`) from the file where it lies (the run folder,
the session folder), with its name as the attachment's, ranges included (Starlette's FileResponse). A link whose
file is gone (the run deleted, the session ended) or that was forgotten (past the registry's `max_links`, the oldest
first) answers 404 with a line saying to make it again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import unquote

from starlette.responses import FileResponse, PlainTextResponse

from explorer.share.downloads import PREFIX, Downloads

ROUTE = re.compile(rf"/{PREFIX}/([A-Za-z0-9_-]{{16,64}})/([^/]+)$")


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
