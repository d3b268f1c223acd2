"""The handler pattern shared by every tab: call one service function, show its result, or its error as a message
and a toast, never a traceback; and the queue settings the handlers share."""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import gradio as gr

from explorer import MirrorApp, Session
from explorer.errors import user_error
from explorer.resources.accounts import Owner
from explorer.resources.models import release_memory
from mirror.data import fmt_size
from ui import render

PRIVATE = {"api_visibility": "private"}
ENCODE_QUEUE = {"concurrency_id": "encode", "concurrency_limit": 2}
# Runs, blends and model uploads wait in the app's own training queue (explorer.runs.jobs.TrainQueue: one place per
# visitor, cancellable, saying how many are ahead), not in Gradio's: these events start at once and hold nothing
# while they wait (in Gradio's queue a second event of one visitor held its place, and its request, behind the first).
JOB_QUEUE = {"concurrency_id": "jobs", "concurrency_limit": None}


def quiet_queue(demo: gr.Blocks) -> None:
    """Gradio's queue polls for work every 1 ms and for progress every 10 ms, and recomputes its monitoring summary
    (pandas over up to 10,000 past events) after every event: ~0.1 of a core with nothing to do, and more as events
    accumulate. Every 20 ms and 50 ms (an event starts at most 20 ms later; a page shows progress 20 times a second),
    and the summary (the operator's /monitoring page) every 100 events, or as GRADIO_ANALYTICS_CACHE_FREQUENCY says."""
    queue = demo._queue
    queue.sleep_when_free = max(queue.sleep_when_free, 0.02)
    queue.progress_update_sleep_when_free = max(queue.progress_update_sleep_when_free, 0.05)
    if "GRADIO_ANALYTICS_CACHE_FREQUENCY" not in os.environ:
        queue.ANAYLTICS_CACHE_FREQUENCY = 100


def strict_inputs(demo: gr.Blocks) -> None:
    """An event sent with fewer inputs than its handler takes gets a clear error back, and the log one short line:
    Gradio raised a ValueError whose message holds every input it got (a 19 MB string: 19 MB of log per event, issue
    58) and answered the visitor `{"error": null}` (show_error is off). Extra inputs Gradio ignores, as before.
    A text longer than its field's `max_length` (a short field's: explorer.tune.inputs.MAX_SHORT_TEXT, a queries
    box's MAX_QUERIES_TEXT) is refused here, before any handler copies, splits or encodes it: Gradio leaves that
    limit to the browser. So is a JSON input past its `max_json` (the API's settings and export rows, the page's
    BrowserState: ui.api). A file input naming a file of a blocked path (the work folder) gets a message."""

    def validate_inputs(block_fn: Any, inputs: list[Any]) -> None:
        if len(inputs) < len(block_fn.inputs):
            name = f" ({block_fn.name})" if block_fn.name and block_fn.name != "<lambda>" else ""
            text = f"This event{name} needs {len(block_fn.inputs)} input values, it was sent {len(inputs)}."
            raise gr.Error(text + " Reload the page, or check the API call.", print_exception=False)
        for component, value in zip(block_fn.inputs, inputs, strict=False):
            limit = getattr(component, "max_length", None)  # a short text field's (the browser's maxlength too)
            if limit and isinstance(value, str) and len(value) > limit:
                name = getattr(component, "label", None) or "a text field"
                raise gr.Error(
                    f"{name} is {len(value):,} characters long; this server takes at most {limit:,} there.",
                    print_exception=False,
                )
            most = getattr(component, "max_json", None)  # a JSON input's (the API's settings and rows)
            if most and json_size(value, most) > most:
                name = getattr(component, "label", None) or "a JSON input"
                raise gr.Error(
                    f"{name} is over about {most:,} characters of JSON; this server takes at most that there.",
                    print_exception=False,
                )
        if demo.blocked_paths and any(blocked(path, demo.blocked_paths) for path in file_paths(inputs)):
            # Gradio refuses it too, answering `{"error": null}`: say what to send instead (never the path)
            raise gr.Error(
                "A file input names a file on this server that was not uploaded to it: send the file to "
                "/gradio_api/upload (gradio_client does) and pass the path it answers.",
                print_exception=False,
            )

    demo.validate_inputs = validate_inputs  # type: ignore[method-assign]  # the instance's, called as self.validate_inputs


def json_size(value: Any, most: int) -> int:
    """About how many characters `value` takes as JSON (its strings' lengths, and one for each item and key), counted
    until past `most` (a value of megabytes is not walked whole to be refused)."""
    size, stack = 0, [value]
    while stack and size <= most:
        item = stack.pop()
        size += 1
        if isinstance(item, str):
            size += len(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        else:
            size += 7  # a number, true, false or null
    return size


def file_paths(value: Any) -> Iterator[str]:
    """The paths of the file values (`{"path": str, ...}`) anywhere in an event's inputs."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("path"), str):
                yield item["path"]
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def blocked(path: str, blocked_paths: Sequence[str]) -> bool:
    """Whether `path` is at or under one of `blocked_paths`, as Gradio tells (utils.is_allowed_file)."""
    from gradio.utils import abspath, is_allowed_file

    try:
        return is_allowed_file(abspath(path), blocked_paths, [], [])[1] == "in_blocklist"
    except (OSError, ValueError):  # a path no file system takes (a NUL in it): Gradio refuses it anyway
        return False


def current_visitor() -> Owner | None:
    """Who sent the request a handler is serving: the visitor and address the server's middleware read from it
    (ui.web.quota.UploadQuota: a signed cookie, or the address's anonymous visitor), or None outside a
    request (or without the middleware). `MirrorApp.identify`: every session is charged to it."""
    from gradio.context import LocalContext

    request = LocalContext.request.get(None)
    raw = getattr(request, "request", None)  # the Starlette request behind gr.Request
    scope = getattr(raw, "scope", None) or {}
    state = scope.get("state") or {}
    visitor, address = state.get("mirror_visitor"), state.get("mirror_address")
    if not isinstance(visitor, str) or not visitor:
        return None
    return Owner(visitor=visitor, address=str(address or ""))


def current_page() -> str | None:
    """Which page sent the request a handler is serving: Gradio's session hash (one per page load), or None outside
    a request. `MirrorApp.page`: a page's events sent before it had a session share one."""
    from gradio.context import LocalContext

    page = getattr(LocalContext.request.get(None), "session_hash", None)
    return page if isinstance(page, str) and page else None


def drop_request_copies() -> None:
    """Drop the copies of this request Gradio keeps while its event lives: the request's raw body and parsed JSON,
    the event's large input values (the handler holds its own). A handler about to read a large paste calls it first:
    the 19 MB of the body's bytes are not kept beside what the paste is read into (issue 58)."""
    from gradio.context import LocalContext

    request = getattr(LocalContext.request.get(None), "request", None)  # the Starlette request behind gr.Request
    if request is not None:
        request.__dict__.pop("_body", None)
        request.__dict__.pop("_json", None)
    blocks, event_id = LocalContext.blocks.get(None), LocalContext.event_id.get(None)
    queue = getattr(blocks, "_queue", None)
    event = queue.event_ids_to_events.get(event_id) if queue is not None and event_id else None
    data = getattr(getattr(event, "data", None), "data", None)
    if isinstance(data, list):  # later steps of a generator do not read it again (Gradio keeps the iterator)
        data[:] = ["" if isinstance(v, str) and len(v) > 65536 else v for v in data]


def consume_request() -> None:
    """The handler serving this request has read its inputs (a large paste is the session's strings now): drop the
    copies Gradio keeps while the event lives (`drop_request_copies`) and give the body's bytes back to the server's
    account of held requests (ui.web.held). Without it a 20 MB /train body stayed in memory, three times over, for
    as long as its run waited and trained."""
    from gradio.context import LocalContext

    drop_request_copies()
    request = getattr(LocalContext.request.get(None), "request", None)
    release = ((getattr(request, "scope", None) or {}).get("state") or {}).get("mirror_release")
    if callable(release):  # a large body (ui.web.held): its parsing's garbage goes back to the OS too
        release()
        release_memory(collect=False)


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
        text = user_error(exc)
        gr.Warning(render.toast_text(text))
        return (shown(text), *(gr.update() for _ in range(n_outputs - 1)), session)
    return (*(out if isinstance(out, tuple) else (out,)), session)


def download(app: MirrorApp, path: Any, label: str) -> dict:
    """A download shown as its link (explorer.share.downloads: `download/<token>/<name>`, nothing of the server's
    folders), with its name and size; hidden when there is no file."""
    if not path or not Path(path).is_file():
        return gr.update(value="", visible=False)
    file = Path(path)
    visitor = current_visitor()  # each visitor's links are bounded apart (explorer.share.downloads)
    href, name = html.escape(app.downloads.link(file, visitor.visitor if visitor else None)), html.escape(file.name)
    return gr.update(
        value=f'<div class="mx-download"><span class="mx-download-label">{html.escape(label)}</span>'
        f'<a href="{href}" download="{name}">⬇ {name}</a> <span class="mx-download-size">'
        f"{fmt_size(file.stat().st_size)}</span></div>",
        visible=True,
    )
