"""The named API endpoints for gradio_client (/train, /search, /cancel, /serve_first and the Explore tab's /map, /export, /moved,
/neighbours, /health, /push): their hidden components and handlers. Each Client is its own session; `run=<id>`
reaches any kept run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gradio as gr

from explorer import MirrorApp, Session
from explorer.errors import user_error
from explorer.tune.inputs import MAX_QUERIES_TEXT, MAX_SHORT_TEXT
from mirror.config import BUNDLED_MODEL
from mirror.errors import MirrorError
from ui import render
from ui.handlers import JOB_QUEUE, consume_request, drop_request_copies
from ui.numbers import Number, Text
from ui.web.served import ServedFiles

# The longest JSON the JSON inputs take, about (ui.handlers.json_size; strict_inputs checks it before any handler): a
# settings dict has some thirty short fields; an export's rows are row numbers, about a million of them at most; the
# page's own BrowserState (app.py) the ids of its last 50 runs, encrypted
MAX_SETTINGS_JSON = 10 * MAX_SHORT_TEXT
MAX_ROWS_JSON = 8_000_000
MAX_BROWSER_JSON = 64_000


def api_components() -> SimpleNamespace:
    """Hidden inputs and outputs of the named API endpoints (gradio_client)."""
    with gr.Column(visible=False):
        api = SimpleNamespace(
            texts=gr.Textbox(value="", label="texts"),
            file=gr.File(label="file", type="filepath"),
            column=gr.Textbox(value="", label="column", max_length=MAX_SHORT_TEXT),
            model=gr.Textbox(value=BUNDLED_MODEL, label="model", max_length=MAX_SHORT_TEXT),
            mode=gr.Textbox(value="auto", label="mode", max_length=MAX_SHORT_TEXT),
            settings=gr.JSON(value={}, label="settings"),
            pair_column=gr.Textbox(value="", label="pair_column", max_length=MAX_SHORT_TEXT),
            train_out=gr.JSON(label="run"),
            model_zip=gr.File(label="model zip"),
            index_zip=gr.File(label="index zip"),
            queries=Text(label="queries", max_length=MAX_QUERIES_TEXT),
            k=Number(value=10, precision=0, label="k"),
            run=gr.Textbox(value="", label="run", max_length=MAX_SHORT_TEXT),
            hide_query=gr.Checkbox(value=False, label="hide_query"),
            search_out=gr.JSON(label="results"),
            cancel_out=gr.Textbox(label="cancelled"),
            train_btn=gr.Button(),
            search_btn=gr.Button(),
            cancel_btn=gr.Button(),
            first_out=gr.Textbox(label="serve_first"),
            first_btn=gr.Button(),
            # the Explore tab's endpoints
            fmt=gr.Textbox(value="all", label="fmt", max_length=MAX_SHORT_TEXT),
            rows=gr.JSON(value=[], label="rows"),
            export_out=gr.File(label="export"),
            filter=gr.Textbox(value="", label="filter", max_length=MAX_SHORT_TEXT),
            limit=Number(value=500, precision=0, label="limit"),
            text=gr.Textbox(label="text", max_length=MAX_QUERIES_TEXT),
            rows_out=gr.JSON(label="rows"),
            health_out=gr.JSON(label="health"),
            repo=gr.Textbox(label="repo", max_length=MAX_SHORT_TEXT),
            token=gr.Textbox(label="token", type="password", max_length=MAX_SHORT_TEXT),
            private=gr.Checkbox(value=True, label="private"),
            push_out=gr.Textbox(label="url"),
            export_btn=gr.Button(),
            moved_btn=gr.Button(),
            neighbours_btn=gr.Button(),
            health_btn=gr.Button(),
            push_btn=gr.Button(),
            n=Number(value=0, precision=0, label="n"),
            map_queries=gr.Textbox(
                value="", label="queries", max_length=MAX_QUERIES_TEXT
            ),  # optional here, unlike /search's
            map_out=gr.JSON(label="map"),
            map_btn=gr.Button(),
        )
    api.settings.max_json, api.rows.max_json = MAX_SETTINGS_JSON, MAX_ROWS_JSON
    return api


def wire_api(app: MirrorApp, state: gr.State, api: SimpleNamespace) -> None:
    """Named endpoints for gradio_client: /train, /search, /cancel (each Client is its own session). The files they
    answer are put in Gradio's cache for as long as the run has them (ui.web.served)."""
    from gradio.utils import get_upload_folder

    train_queue = JOB_QUEUE
    served = ServedFiles(get_upload_folder)
    app.on_forget.append(served.forget)  # a run's (or session's) folder removed: its files' cached names go with it

    def api_train(
        texts: str = "",
        file: str | None = None,
        column: str = "",
        model: str = BUNDLED_MODEL,
        mode: str = "auto",
        settings: dict | None = None,
        pair_column: str = "",
        s: Session | None = None,
    ):
        """Mirror-tune on `texts` (one string per line) or an uploaded `file` (.txt/.csv/.tsv/.jsonl, text
        `column` optional); `model` is 'bundled' or a hub id, `mode` auto|words|sentences, `settings` any
        MirrorConfig fields (e.g. {"max_steps": 20}); `pair_column`: a column of the file whose text is each
        string's partner ("auto": the detected one; "": none), tuned as its positive, some rows held out to
        measure the gain (the summary's `pairs`). Returns the run summary, the model zip and the index zip.
        The tuned model then serves /search for this client's session."""
        session = app.session(s, shared=False)  # (its failed first call removes it)
        drop_request_copies()  # the request's bytes go before its text is read (issue 58)
        try:
            info = app.trainer.load_for_api(session, texts, file, column, settings, pair_column)
        except MirrorError as exc:
            if session is not s:  # a client's first call failed: its new session folder is never reused
                app.close_session(session)
            raise gr.Error(str(exc), print_exception=False) from None
        finally:
            # the strings are the session's now: no copy of the request (up to MIRROR_MAX_UPLOAD_MB) waits with the run
            del texts
            consume_request()
        yield from api_run(app, served.serve, session, s, info, model, mode, settings)

    def api_search(queries: str, k: float = 10, hide_query: bool = False, run: str = "", s: Session | None = None):
        """Top-k hits (k <= 50) per query (one per line) with the tuned and the base encoder of this client's
        last /train run, or of the kept run whose id is `run` (any client, after a restart too):
        [{query, tuned: [{rank, text, score, only_here, base_rank}], base: [{..., tuned_rank}], base_only}].
        `hide_query`: drop the hit that is the query's own string (off by default)."""
        session = app.session(s, shared=False)  # (its failed first call removes it)
        try:
            run_id = (run or "").strip() or None
            return app.searcher.search(session, queries, k, hide_query=bool(hide_query), run_id=run_id), session
        except Exception as exc:  # MirrorError, or a bug: a render.message either way
            if session is not s:  # a client's first call failed: its new session folder is never reused
                app.close_session(session)
            raise gr.Error(user_error(exc), print_exception=False) from None

    def api_cancel(s: Session | None = None):
        """Stop this client's run (from another call of the same Client while /train runs)."""
        if not isinstance(s, Session):
            return "Nothing is running.", s
        return app.trainer.cancel(s), s

    def api_first(s: Session | None = None):
        """While this client's run trains a second time, stop that training and serve the first's blend."""
        if not isinstance(s, Session):
            return "Nothing is running.", s
        return app.trainer.serve_first(s), s

    train_inputs = [api.texts, api.file, api.column, api.model, api.mode, api.settings, api.pair_column, state]
    train_outputs = [api.train_out, api.model_zip, api.index_zip, state]
    api.train_btn.click(api_train, train_inputs, train_outputs, api_name="train", **train_queue)
    search_io = ([api.queries, api.k, api.hide_query, api.run, state], [api.search_out, state])
    api.search_btn.click(api_search, *search_io, api_name="search", concurrency_limit=None)
    api.cancel_btn.click(api_cancel, [state], [api.cancel_out, state], api_name="cancel", queue=False)
    api.first_btn.click(api_first, [state], [api.first_out, state], api_name="serve_first", queue=False)
    wire_explore_api(app, state, api, served.serve)


def wire_explore_api(app: MirrorApp, state: gr.State, api: SimpleNamespace, served: Callable[[Path], str]) -> None:
    """The Explore tab's endpoints: /map, /export, /moved, /neighbours, /health, /push. Each works on this client's
    last run, or on the kept run whose id is `run` (as /search does); `served`: the name a file is answered by."""
    import explorer.compare.maps as maps

    ex = app.explore

    def api_map(n: float = 0, queries: str = "", run: str = "", s: Session | None = None):
        """The run's twin maps: every string (or a seeded sample of `n`, 0 = all), laid out under the base and the
        tuned encoder, the tuned map aligned to the base one; `queries` (one per line) placed on both. Returns
        {ids, texts, base: [[x, y]], tuned: [[x, y]], base_cluster, tuned_cluster, moved, clusters: {base, tuned},
        queries, method, n_total, n_shown, note, seconds}: row j is the run's string number ids[j]."""

        def draw(session: Session) -> dict:
            data = ex.twin_map(session, (n or None), queries or "")
            return {**maps.map_json(data), "caption": render.run_caption(data["run"])}

        return explore_call(app, s, run, draw)

    def api_export(fmt: str = "all", rows: list | None = None, run: str = "", s: Session | None = None):
        """One export of the run's strings (all, or the row numbers in `rows`): fmt "projector" (a zip of Embedding
        Projector TSVs), "parquet" (text, both embeddings, map coordinates when drawn), "neighbours" (CSV) or
        "all" (a zip of the three with a README). Returns the file."""
        return explore_call(
            app, s, run, lambda session: served(ex.export(session, str(fmt or "").strip(), rows or None))
        )

    def api_moved(filter: str = "", limit: float = 500, run: str = "", s: Session | None = None):  # noqa: A002
        """The run's strings ranked by how much their 10 nearest neighbours changed with tuning (most first), those
        containing `filter` (any case), at most `limit`: [{i, text, moved, gained, lost, base_neighbours,
        tuned_neighbours}]."""

        def moved(session: Session) -> list[dict]:
            n = 500 if limit is None else int(limit)
            if not 1 <= n <= app.settings.max_strings:
                raise MirrorError(f"limit must be a whole number from 1 to {app.settings.max_strings}, not {limit}")
            return ex.moved(session, filter or "", n)

        return explore_call(app, s, run, moved)

    def api_neighbours(text: str, k: float = 10, run: str = "", s: Session | None = None):
        """The base and tuned neighbours of one string (its own hit left out), as /search returns them."""
        return explore_call(app, s, run, lambda session: ex.neighbours(session, text, k))

    def api_health(run: str = "", s: Session | None = None):
        """Space health of the run's strings under both encoders: mean cosine, alignment, uniformity, and what
        changed."""
        return explore_call(app, s, run, ex.health)

    def api_push(repo: str, token: str, private: bool = True, run: str = "", s: Session | None = None):
        """Push the run's tuned model, with its model card, to the Hugging Face Hub repository `repo` (made private
        unless `private` is false) with your write `token` (used for this push only, never kept). Returns its URL."""
        return explore_call(app, s, run, lambda session: ex.push(session, repo, token, bool(private)))

    encode = {"concurrency_id": "encode", "concurrency_limit": 2}
    api.export_btn.click(
        api_export, [api.fmt, api.rows, api.run, state], [api.export_out, state], api_name="export", **encode
    )
    api.moved_btn.click(
        api_moved, [api.filter, api.limit, api.run, state], [api.rows_out, state], api_name="moved", **encode
    )
    api.neighbours_btn.click(
        api_neighbours, [api.text, api.k, api.run, state], [api.search_out, state], api_name="neighbours", **encode
    )
    api.health_btn.click(api_health, [api.run, state], [api.health_out, state], api_name="health", **encode)
    map_in = [api.n, api.map_queries, api.run, state]
    api.map_btn.click(api_map, map_in, [api.map_out, state], api_name="map", **encode)
    push_in = [api.repo, api.token, api.private, api.run, state]
    api.push_btn.click(
        api_push, push_in, [api.push_out, state], api_name="push", concurrency_id="hub", concurrency_limit=2
    )


def explore_call(app: MirrorApp, s: Session | None, run: str, call: Any) -> tuple:
    """`call(session)` on this client's session, or on a view of it that serves the kept run `run` (the client's own
    session keeps what it serves); errors as gr.Error with the message the page shows."""
    session = app.session(s, shared=False)  # (its failed first call removes it)
    try:
        run_id = str(run or "").strip()
        view = dataclasses.replace(session, run=app.saved.kept(run_id)) if run_id else session
        return call(view), session
    except Exception as exc:  # MirrorError, or a bug: a render.message either way
        if session is not s:  # a client's first call failed: its new session folder is never reused
            app.close_session(session)
        raise gr.Error(user_error(exc), print_exception=False) from None


def api_run(
    app: MirrorApp, served: Callable[[Path], str], session: Session, s: Session | None, *args: Any
) -> Iterator[tuple]:
    """The /train endpoint's stream (explorer's `train_stream`) with its errors as gr.Error, its files answered by
    the names `served` gives them; a client's failed first call leaves no session folder behind."""
    try:
        for progress, run in app.trainer.train_stream(session, *args):
            files = (served(run.model_zip), served(run.index_zip)) if run is not None else (None, None)
            yield progress, *files, session
    except MirrorError as exc:
        if session is not s:  # a client's first call failed: its new session folder is never reused
            app.close_session(session)
        raise gr.Error(str(exc), print_exception=False) from None
