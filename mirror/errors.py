"""The one exception type users see: a clear message, never a traceback."""

from __future__ import annotations


class MirrorError(Exception):
    """Bad input, bad settings or an unreachable model: the message says what and how to fix it.

    The CLIs turn it into exit code 2; the web app shows the message.
    """
