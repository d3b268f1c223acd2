"""Mirror Explorer web app: tune an encoder on your strings, then search, evaluate and map what changed.

`python app.py` serves on 127.0.0.1:7860 (--host/--port, or GRADIO_SERVER_NAME/GRADIO_SERVER_PORT); limits come
from MIRROR_* variables (explorer/settings.py). This file composes the tabs: each ui/ module (tune, runs, search,
evaluate, explore, api) declares its components and wires them to `explorer.MirrorApp` (plain values in and out);
build_demo lays the tabs out and calls their wiring in order. Progress is born as typed events in explorer/ and
drawn in ui/runs.py (`TrainView`, `RunView`). Importing this loads neither torch nor faiss.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import threading
from collections.abc import Sequence

import gradio as gr
from gradio.utils import get_upload_folder

from explorer import MirrorApp, Session, Settings
from explorer.settings import parse_proxies
from mirror.errors import MirrorError
from ui.api import MAX_BROWSER_JSON, api_components, wire_api
from ui.evaluate import evaluate_tab, wire_evaluate
from ui.explore import explore_tab, wire_explore
from ui.handlers import current_page, current_visitor, quiet_queue, strict_inputs
from ui.runs import RunView, wire_blend, wire_runs, wire_saved_zip, wire_training
from ui.search import search_tab, wire_search
from ui.tune import tune_tab, wire_bases, wire_inputs
from ui.web.connections import ConnectionGuard, default_total, on_a_space, raise_open_files
from ui.web.connections import install as install_guard
from ui.web.downloads import DownloadRoute
from ui.web.held import BODY_COST, HeldRequests
from ui.web.logbound import bound_output
from ui.web.quota import UploadQuota
from ui.web.served import blocked_paths
from ui.web.tabs import ServerWork, meter_events
from ui.web.tabs import install as charge_server_work

__all__ = ["MirrorApp", "Settings", "Session", "build_demo", "main"]

# Gradio's default theme declares its Source Sans Pro at weights 400 and 600, and the 600 file its wheel ships holds
# only a few glyphs (" AB" of ASCII, 55 in all; the 400 and the 700 files hold 1,615): every semibold or bold text
# (headings, <b>, buttons) drew its "B" in Source Sans and the rest in a fallback font (a newcomer's "lighter capital
# B"); its IBM Plex Mono's 600 file, 75 glyphs of 750. The same theme with the full bold faces for every weight above
# 400 (tests/test_browser.py: every face the page declares draws a heading's letters itself).
FONTS = (400, 700)


def theme() -> gr.themes.Base:
    body = gr.themes.LocalFont("Source Sans Pro", weights=FONTS)
    mono = gr.themes.LocalFont("IBM Plex Mono", weights=FONTS)
    return gr.themes.Default(
        font=[body, "ui-sans-serif", "system-ui", "sans-serif"],
        font_mono=[mono, "ui-monospace", "Consolas", "monospace"],
    )


CSS = """
#mx-header h1 {margin-bottom: 0}
.mx-step {font-weight: 600}
.mx-results table td, .mx-results table th {border: none; border-bottom: 1px solid var(--border-color-primary)}
/* Explore's tables (and a pairs run's blend table under its summary) on a phone: scroll sideways rather than wrap a character per line; numbers never break */
#mx-health table, #mx-forgetting table, #mx-result table {display: block; overflow-x: auto; max-width: 100%}
/* ...and say so: a shadow at the edge that has more (a newcomer's phone cut the run table mid-word, no hint it
   scrolls); the page's own colour covers it at an end that has nothing more (background-attachment: local) */
#mx-health table, #mx-forgetting table, #mx-result table {
  background:
    linear-gradient(to right, var(--background-fill-primary) 30%, transparent) left / 32px 100% no-repeat local,
    linear-gradient(to left, var(--background-fill-primary) 30%, transparent) right / 32px 100% no-repeat local,
    radial-gradient(farthest-side at 0 50%, rgba(0,0,0,0.22), transparent) left / 12px 100% no-repeat scroll,
    radial-gradient(farthest-side at 100% 50%, rgba(0,0,0,0.22), transparent) right / 12px 100% no-repeat scroll;
}
#mx-health th, #mx-health td, #mx-forgetting th, #mx-forgetting td, #mx-result th, #mx-result td {
  word-break: normal; overflow-wrap: normal}
#mx-health td:not(:first-child), #mx-forgetting td:not(:first-child), #mx-result td:not(:first-child) {
  white-space: nowrap}
#mx-health th, #mx-forgetting th, #mx-result th {min-width: 4.5em}
#mx-health td:first-child, #mx-forgetting td:first-child, #mx-result td:first-child {min-width: 9em}
#mx-moved-table table {min-width: 560px}
#mx-moved-table th {white-space: nowrap}
/* ...and its rows, which Gradio's virtual table draws as divs sized to the viewport: the columns of the 560 px header
   (22/12/33/33%), words kept whole, the number and the headers on one line */
#mx-moved-table .virtual-body {min-width: 560px}
#mx-moved-table .body-cell:nth-child(1) {min-width: 123.2px}
#mx-moved-table .body-cell:nth-child(2) {min-width: 67.2px}
#mx-moved-table .body-cell:nth-child(3), #mx-moved-table .body-cell:nth-child(4) {min-width: 184.8px}
#mx-moved-table .body-cell .text {word-break: normal !important; overflow-wrap: normal !important}
#mx-moved-table .body-cell:nth-child(2) .text, #mx-moved-table th .text {white-space: nowrap}
#mx-moved-table th .text {word-break: normal !important; overflow-wrap: normal !important}
/* the bases box's table: its headers (and the time column) never break inside a word ("ti/me" at 1400 px) */
#mx-bases th, #mx-bases td:last-child {white-space: nowrap; word-break: normal; overflow-wrap: normal}
/* the downloads (ui.handlers.download): a label above the file's link and size, boxed like Gradio's file component */
#mx-downloads {flex-wrap: wrap !important}
#mx-downloads > * {min-width: min(100%, 320px) !important}
.mx-download {border: 1px solid var(--border-color-primary); border-radius: var(--radius-lg); padding: 8px 12px}
.mx-download-label {display: block; font-size: var(--text-sm); color: var(--body-text-color-subdued)}
.mx-download a {font-weight: 600; overflow-wrap: anywhere}
.mx-download-size {color: var(--body-text-color-subdued); white-space: nowrap}
"""

# The address bar names the run the page serves (?run=<id>), so a reload, a bookmark or a shared address gives that
# run: the served run's summary (#mx-result) holds its link; the address follows it whenever it changes (a run, a
# blend, an opened run). ui/runs.py calls mirrorSyncRunUrl(true) once a page load is done: no link then, no ?run.
HEAD = """<script>
window.mirrorSyncRunUrl = (dropMissing) => {
  const link = document.querySelector('#mx-result a[href^="?run="]');
  const id = link ? new URL(link.getAttribute("href"), location.href).searchParams.get("run") : null;
  const url = new URL(location.href);
  if (id === url.searchParams.get("run") || (!id && !dropMissing)) return;
  if (id) url.searchParams.set("run", id); else url.searchParams.delete("run");
  history.replaceState(history.state, "", url);
};
new MutationObserver(() => window.mirrorSyncRunUrl(false)).observe(document.documentElement, {childList: true, subtree: true});
</script>"""

INTRO = """# Mirror Explorer
Mirror-fine-tune a sentence encoder on **your own strings** — no labels needed (MirrorBERT) — then see what changed:
**① Tune** → **② Search** your strings with the tuned and the base encoder side by side → **③ Evaluate** on word and
sentence similarity benchmarks → **④ Explore** what changed: linked maps, the strings that moved, general checks. Runs on the bundled offline model by default."""


def build_demo(app: MirrorApp | None = None) -> gr.Blocks:
    """The four-tab UI plus the /train, /search and /cancel API endpoints; `app` defaults to one from the env."""
    app = app or MirrorApp()
    app.identify = current_visitor  # every session is charged to the visitor the middleware names
    app.page = current_page  # a page's events sent before it had a session share one (SessionStore.get)
    # the Hub parts (a dataset as input, the push) only where they can work: allowed, and this server is online
    hub = app.settings.allow_hub and os.environ.get("HF_HUB_OFFLINE", "").strip().lower() not in ("1", "true", "yes")
    with gr.Blocks(title="Mirror Explorer", delete_cache=(3600, int(app.settings.session_ttl))) as demo:
        # A plain function, not the bound method: Gradio deep-copies the config (on every /config request), and a
        # bound method's copy walks into the app and its loaded models (0.7 s and +100 MB per request).
        state = gr.State(None, time_to_live=app.settings.session_ttl, delete_callback=lambda s: app.close_session(s))
        # this browser's runs (ids) and the run it has going, kept across reloads and tabs (localStorage)
        browser = gr.BrowserState({"runs": [], "active": None}, storage_key="mirror-explorer", secret=app.secret)
        browser.max_json = MAX_BROWSER_JSON  # sent back by the page: the ids of its last 50 runs, a few KB
        gr.Markdown(INTRO, elem_id="mx-header")
        with gr.Tabs(overflow_behavior="wrap"):  # a phone shows all four tabs, not two and a "•••" menu
            with gr.Tab("① Tune", id="tune"):
                tune = tune_tab(hub)
            with gr.Tab("② Search", id="search"):
                search = search_tab()
            with gr.Tab("③ Evaluate", id="evaluate"):
                evaluate = evaluate_tab()
            with gr.Tab("④ Explore", id="explore"):
                explore = explore_tab(min(app.settings.max_map_points, app.settings.max_strings), hub)
        api = api_components()
        wire_inputs(app, state, tune)
        wire_bases(app, state, tune)
        view = RunView(app, state, browser, tune, search, evaluate, explore)
        wire_training(app, view)
        wire_saved_zip(app, view)
        wire_search(app, state, search, tune.model, tune.input_md)
        wire_evaluate(app, state, evaluate)
        wire_explore(app, state, explore, search)
        wire_blend(app, view, explore)
        wire_api(app, state, api)
        wire_runs(app, view, demo)
    demo.queue(default_concurrency_limit=2, max_size=app.settings.queue_size)
    quiet_queue(demo)
    return demo


# ----------------------------------------------------------------------------------------------- main


def loopback(host: str) -> bool:
    """Whether the server listens on this machine's loopback only ("127.0.0.1", "localhost", "::1")."""
    return host.strip("[]").lower() in ("localhost", "::1") or host.startswith("127.")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Serve the Mirror Explorer web app.")
    host, port = os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"), os.environ.get("GRADIO_SERVER_PORT", "7860")
    parser.add_argument("--host", default=host, help="default: $GRADIO_SERVER_NAME or 127.0.0.1")
    parser.add_argument("--port", type=int, default=int(port), help="default: $GRADIO_SERVER_PORT or 7860")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    import os

    from starlette.middleware import Middleware

    args = parse_args(argv)
    try:
        settings = Settings.from_env()
    except MirrorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # what a visitor sends never reaches the log unbounded: every write cut, so much a minute (before the handlers)
    bound_output(cut=4096, budget=settings.log_bytes_minute)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # faiss tries its AVX-512 and AVX2 builds first and logs each missing one as a ModuleNotFoundError (faiss-gpu's
    # wheel has neither) before the generic build loads: news to nobody, alarming in a log
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    try:
        # Gradio serves (and takes as inputs) any file under its upload folder, where the work folder is by default:
        # none of it (ui.web.served.blocked_paths)
        blocked = blocked_paths(settings.work_dir, get_upload_folder(), os.environ)
        app = MirrorApp(settings)
    except MirrorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # the machine's own user (served on loopback, no proxy believed): its oldest runs make room at its address
    app.accounts.local_room = loopback(args.host) and not settings.trusted_proxies
    app.sweep(force=True)
    demo = build_demo(app)
    strict_inputs(demo)
    # What is alive now (gradio, torch, the page) lives as long as the server: kept out of the garbage collector's
    # full passes, which every run ends with (release_memory) and which scanned all of it each time.
    gc.collect()
    gc.freeze()
    # Warm the bundled model in the background: the page is served at once, the first run starts sooner.
    threading.Thread(target=app.warm_up, name="mirror-warm-up", daemon=True).start()
    # Gradio has one upload size limit for every input; it must admit a model zip, so what one client may send
    # in an hour is bounded separately (UploadQuota). Gradio serves the files handlers return (the API's: links in
    # its cache, ui.web.served), nothing of the work folder (blocked).
    limit = max(app.settings.max_upload_bytes, app.settings.max_model_bytes)
    max_request = 2 * app.settings.max_upload_bytes + 2**20
    queue = demo._queue  # Gradio's own queue (private attributes: checked by tests/test_abuse)
    # the server's own work for a request (the queue, the stream, the file put in Gradio's cache and served) is
    # charged to the visitor who sent it, not shared by the runs going meanwhile (ui.web.tabs)
    charge_server_work()
    meter_events(queue, app.cpu)
    # large request bodies held in memory (a paste sent to /train) until their handler read them, each charged what
    # it costs while Gradio reads it (ui.web.held.BODY_COST times its size, more for wide characters): one largest
    # request per visitor, two per address, MIRROR_REQUEST_MEMORY_MB in all; refused before they are read past it
    total = app.settings.request_memory_bytes
    largest = BODY_COST * max_request
    held = HeldRequests(
        min(largest, total),
        min(2 * largest, total),
        total,
        live=lambda e: e in queue.event_ids_to_events,
        factor=BODY_COST,
    )
    quota = Middleware(
        UploadQuota,
        quota=app.settings.upload_quota_bytes,
        address_quota=app.settings.upload_address_bytes,
        total_quota=app.settings.upload_disk_bytes,
        trusted=app.settings.trusted_proxies,
        max_body=limit + 2**20,  # the file and its multipart framing
        # any other request (an event joining the queue, an API call): a paste of MIRROR_MAX_UPLOAD_MB as JSON (a
        # line break is two characters there), read whole and refused past this before the app sees it
        max_request=max_request,
        key=app.visitor_key,  # the visitor cookie's signature
        known_session=lambda session: session in queue.pending_messages_per_session,  # whom the queue streams to
        held=held,
        min_rate=app.settings.min_body_bytes_s or None,  # a stalled body is dropped and its reservation released
        grace=app.settings.header_timeout_s,
        max_in_flight=4 * app.settings.max_connections_per_address,  # behind a trusted proxy: per client
    )
    # open connections: at most so many per address and in all, a deadline for a request's headers (uvicorn's
    # protocol; Gradio builds uvicorn's config, so the guarded protocol is put where uvicorn looks it up)
    files = raise_open_files()
    install_guard(
        ConnectionGuard(
            per_address=app.settings.max_connections_per_address,
            total=app.settings.max_connections or default_total(files),
            header_timeout=app.settings.header_timeout_s,
            exempt=parse_proxies(app.settings.trusted_proxies),
            exempt_private=on_a_space() and not app.settings.trusted_proxies,  # HF's proxy, not yet trusted
        )
    )
    # uvicorn believes X-Forwarded-For from FORWARDED_ALLOW_IPS (127.0.0.1 unless set): only from our proxies
    os.environ["FORWARDED_ALLOW_IPS"] = ",".join(app.settings.trusted_proxies)
    demo.launch(
        server_name=args.host,
        server_port=args.port,
        max_file_size=limit,
        css=CSS,
        head=HEAD,
        theme=theme(),
        show_error=False,
        blocked_paths=blocked,
        # every request's server work charged to its visitor (ui.web.tabs); the app's download links
        # (ui.web.downloads), answered before the quota's accounting
        app_kwargs={
            "middleware": [
                Middleware(ServerWork, accounts=app.cpu, key=app.visitor_key, trusted=app.settings.trusted_proxies),
                Middleware(DownloadRoute, downloads=app.downloads),
                quota,
            ]
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
