"""The one exception type users see: a clear message, never a traceback."""

from __future__ import annotations

import re

# An absolute path of two parts or more inside a message (not the path part of a URL, not `org/name`, not 1/2).
ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~-])/[^\s/'\"`,;()\[\]]+/[^\s'\"`,;()\[\]]+")


class MirrorError(Exception):
    """Bad input, bad settings or an unreachable model: the message says what and how to fix it.

    The CLIs turn it into exit code 2; the web app shows the message.
    """


def without_paths(message: str) -> str:
    """`message` with every absolute path cut to its last part: what a visitor reads never shows where the server
    keeps its files (a run folder, the upload cache, a library's install)."""
    return ABSOLUTE_PATH.sub(lambda m: m.group(0).rstrip("/.").rsplit("/", 1)[-1] or "…", message)
