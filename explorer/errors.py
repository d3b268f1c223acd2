"""What the user reads of an error: a MirrorError's own message (without the server's paths), or for a bug a short
code they may quote, its traceback logged once under it (issue 58). Used by every handler, run and job."""

from __future__ import annotations

import contextlib
import logging
import secrets

from mirror.errors import MirrorError, without_paths

log = logging.getLogger("mirror.app")


def incident(exc: BaseException, what: str = "unexpected error in a handler") -> str:
    """A short code for an unexpected error, its traceback logged once under it: what the user reads and may quote
    instead of the error's type and text (which can name the server's classes and paths: issue 58)."""
    ref = getattr(exc, "_mx_ref", None)
    if ref is None:
        ref = secrets.token_hex(3)
        log.error("%s [error %s]", what, ref, exc_info=exc)
        with contextlib.suppress(AttributeError):
            exc._mx_ref = ref  # type: ignore[attr-defined]
    return ref


def user_error(exc: BaseException) -> str:
    """What the user reads: a MirrorError's own message, or a short note for a bug (whose traceback is logged)."""
    if isinstance(exc, MirrorError):
        return without_paths(str(exc))
    return (
        f"something went wrong on the server (error {incident(exc)} in its log). Your previous results are kept; "
        "please report this with that code."
    )
