"""The named API endpoints for gradio_client (/train, /search, /cancel and the Explore tab's): their hidden
components and handlers. Each Client is its own session; `run=<id>` reaches any kept run."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import gradio as gr

from explorer import MirrorApp, Session, render
from mirror.config import BUNDLED_MODEL
from mirror.errors import MirrorError


def api_components() -> SimpleNamespace:
    """Hidden inputs and outputs of the named API endpoints (gradio_client)."""
    with gr.Column(visible=False):
        return SimpleNamespace(
            texts=gr.Textbox(value="", label="texts"),
            file=gr.File(label="file", type="filepath"),
            column=gr.Textbox(value="", label="column"),
            model=gr.Textbox(value=BUNDLED_MODEL, label="model"),
            mode=gr.Textbox(value="auto", label="mode"),
            settings=gr.JSON(value={}, label="settings"),
            train_out=gr.JSON(label="run"),
            model_zip=gr.File(label="model zip"),
            index_zip=gr.File(label="index zip"),
            queries=gr.Textbox(label="queries"),
            k=gr.Number(value=10, precision=0, label="k"),
            run=gr.Textbox(value="", label="run"),
            hide_query=gr.Checkbox(value=False, label="hide_query"),
            search_out=gr.JSON(label="results"),
            cancel_out=gr.Textbox(label="cancelled"),
            train_btn=gr.Button(),
            search_btn=gr.Button(),
            cancel_btn=gr.Button(),
        )


def wire_api(app: MirrorApp, state: gr.State, api: SimpleNamespace) -> None:
    """Named endpoints for gradio_client: /train, /search, /cancel (each Client is its own session)."""
    train_queue = {"concurrency_id": "train", "concurrency_limit": app.settings.train_concurrency}

    def api_train(
        texts: str = "",
        file: str | None = None,
        column: str = "",
        model: str = BUNDLED_MODEL,
        mode: str = "auto",
        settings: dict | None = None,
        s: Session | None = None,
    ):
        """Mirror-tune on `texts` (one string per line) or an uploaded `file` (.txt/.csv/.tsv/.jsonl, text
        `column` optional); `model` is 'bundled' or a hub id, `mode` auto|words|sentences, `settings` any
        MirrorConfig fields (e.g. {"max_steps": 20}). Returns the run summary, the model zip and the index zip.
        The tuned model then serves /search for this client's session."""
        session = app.session(s)
        yield from api_run(app, session, s, texts, file, column, model, mode, settings)

    def api_search(queries: str, k: float = 10, hide_query: bool = False, run: str = "", s: Session | None = None):
        """Top-k hits (k <= 50) per query (one per line) with the tuned and the base encoder of this client's
        last /train run, or of the kept run whose id is `run` (any client, after a restart too):
        [{query, tuned: [{rank, text, score, only_here, base_rank}], base: [{..., tuned_rank}], base_only}].
        `hide_query`: drop the hit that is the query's own string (off by default)."""
        session = app.session(s)
        try:
            run_id = (run or "").strip() or None
            return app.search(session, queries, k, hide_query=bool(hide_query), run_id=run_id), session
        except Exception as exc:  # MirrorError, or a bug: a render.message either way
            if session is not s:  # a client's first call failed: its new session folder is never reused
                app.close_session(session)
            raise gr.Error(render.user_error(exc)) from None

    def api_cancel(s: Session | None = None):
        """Stop this client's run (from another call of the same Client while /train runs)."""
        if not isinstance(s, Session):
            return "Nothing is running.", s
        return app.cancel(s), s

    train_inputs = [api.texts, api.file, api.column, api.model, api.mode, api.settings, state]
    train_outputs = [api.train_out, api.model_zip, api.index_zip, state]
    api.train_btn.click(api_train, train_inputs, train_outputs, api_name="train", **train_queue)
    search_io = ([api.queries, api.k, api.hide_query, api.run, state], [api.search_out, state])
    api.search_btn.click(api_search, *search_io, api_name="search", concurrency_limit=None)
    api.cancel_btn.click(api_cancel, [state], [api.cancel_out, state], api_name="cancel", queue=False)


def api_run(app: MirrorApp, session: Session, s: Session | None, *args: Any) -> Iterator[tuple]:
    """The /train endpoint's stream (explorer's `train_stream`) with its errors as gr.Error; a client's failed
    first call leaves no session folder behind."""
    try:
        for progress, run in app.train_stream(session, *args):
            files = (str(run.model_zip), str(run.index_zip)) if run is not None else (None, None)
            yield progress, *files, session
    except MirrorError as exc:
        if session is not s:  # a client's first call failed: its new session folder is never reused
            app.close_session(session)
        raise gr.Error(str(exc)) from None
