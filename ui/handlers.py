"""The handler pattern shared by every tab: call one service function, show its result, or its error as a message
and a toast, never a traceback; and the queue settings the handlers share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from explorer import MirrorApp, Session, render

PRIVATE = {"api_visibility": "private"}
ENCODE_QUEUE = {"concurrency_id": "encode", "concurrency_limit": 2}


def call_service(
    app: MirrorApp,
    state: Session | None,
    n_outputs: int,
    call: Callable[[Session], Any],
    shown: Callable[[str], str] = render.message,
) -> tuple:
    """The handler pattern "call the service, show its error": `call(session)` gives the outputs (one value or a
    tuple), returned with the session last; a MirrorError (or a bug) becomes a toast (plain text) and the render.message
    in the first output (`shown(text)`: Markdown, or HTML for an HTML output), the other outputs unchanged.
    Never a traceback."""
    session = app.session(state)
    try:
        out = call(session)
    except Exception as exc:  # MirrorError, or a bug: a render.message, never a traceback
        text = render.user_error(exc)
        gr.Warning(render.toast_text(text))
        return (shown(text), *(gr.update() for _ in range(n_outputs - 1)), session)
    return (*(out if isinstance(out, tuple) else (out,)), session)
