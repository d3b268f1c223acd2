"""Words the service says itself: a duration as a user reads it, and the one-line note box its Markdown answers use
(the plan, an estimate's refusal). Drawing pages is ui.render's."""

from __future__ import annotations


def fmt_seconds(s: float) -> str:
    if s < 1:
        return "under a second"
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def about(s: float) -> str:
    """An estimate's duration: "~2 min", and "under a second" without the "~" ("~under a second" read badly)."""
    return fmt_seconds(s) if s < 1 else "~" + fmt_seconds(s)


def message(text: str, kind: str = "error") -> str:
    """A Markdown box for the UI: a quoted line that says what happened, never a traceback."""
    prefix = {"error": "**Error:** ", "warning": "**Note:** ", "info": "", "ok": ""}[kind]
    return f"> {prefix}{text}"
