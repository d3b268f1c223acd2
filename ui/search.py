"""Tab ② Search: queries against the tuned and the base encoder side by side, and another corpus indexed with both."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from explorer import MirrorApp, Session
from explorer.tune.inputs import MAX_K, MAX_QUERIES, MAX_QUERIES_TEXT, MAX_QUERY_CHARS, MAX_SHORT_TEXT
from mirror.config import BUNDLED_MODEL
from ui import render
from ui.handlers import ENCODE_QUEUE, PRIVATE, call_service
from ui.numbers import Slider
from ui.uploads import NamedFile, given_name


def search_tab() -> SimpleNamespace:
    """Tab ②: queries against the tuned and the base encoder, and another corpus to search."""
    ui = SimpleNamespace()
    ui.served_md = gr.Markdown(render.served_md(None), elem_id="mx-served")
    with gr.Row():
        # lines=1 with room to grow: Enter searches (Gradio submits on Enter only when lines is 1), Shift+Enter
        # starts another query on a new line
        ui.queries = gr.Textbox(
            label="Queries",
            # the limits the search holds its queries to (explorer.tune.inputs.split_queries), said before a
            # pasted 2,000-character query is refused
            info=f"Enter searches · Shift+Enter adds another query on a new line (up to {MAX_QUERIES}, "
            f"{MAX_QUERY_CHARS} characters each)",
            lines=1,
            max_lines=8,
            placeholder="kitten",
            scale=4,
            elem_id="mx-queries",
            max_length=MAX_QUERIES_TEXT,
        )
        with gr.Column(scale=1):
            ui.k = Slider(1, MAX_K, value=10, step=1, label="Hits per query (k)")
            ui.corpus = gr.Radio([("Your strings", "main"), ("Other corpus", "extra")], value="main", label="Search in")
            ui.hide_query = gr.Checkbox(
                value=True,
                label="Hide the query itself",
                info="Drop the hit that is the query's own string",
                elem_id="mx-hide-query",
            )
    ui.search_btn = gr.Button("Search", variant="primary", elem_id="mx-search-btn")
    ui.results = gr.HTML("", elem_id="mx-search-results")
    with gr.Accordion("Search another corpus with your tuned encoder", open=False):
        ui.other = NamedFile(label="A .txt, .csv/.tsv or .jsonl file", type="filepath", height=150, elem_id="mx-other")
        ui.other_column = gr.Textbox(
            label="Text column (for .csv/.tsv/.jsonl; empty = detect)", max_length=MAX_SHORT_TEXT
        )
        ui.other_btn = gr.Button("Index it", elem_id="mx-other-btn")
        ui.other_md = gr.Markdown("")
    return ui


def wire_search(
    app: MirrorApp,
    state: gr.State,
    ui: SimpleNamespace,
    model: gr.components.Component,
    loaded: gr.components.Component | None = None,
) -> None:
    """Search (button or Enter; before any tuning with the base `model` chosen in tab ①) and indexing another
    corpus; the header redrawn after each load in tab ① (`loaded`: its load summary, changed by every load)."""

    def on_loaded(s):
        """The header after a load: a pairs file's columns named before any run (a newcomer's page kept the first
        header, 'No tuned model yet…', with no word of the columns, until a run ended)."""
        session = app.session(s)
        run = session.run
        return render.served_md(session, app.searcher.example(run) if run is not None else None)

    if loaded is not None:
        loaded.change(on_loaded, [state], [ui.served_md], show_progress="hidden", **PRIVATE)

    def on_search(q, k_value, corpus_value, s, hide=True, model_value=BUNDLED_MODEL, progress=gr.Progress()):  # noqa: B008
        def search(session: Session) -> str:
            if session.run is None:
                progress(None, desc="Searching with the base model (its first search embeds your strings)")
            found = app.searcher.search(session, q, k_value, corpus_value, bool(hide), model_value or BUNDLED_MODEL)
            base = session.run.base_model if session.run else (model_value or BUNDLED_MODEL)
            return render.render_results(found, base, served=render.tuned_side(session.run))

        return call_service(app, s, 1, search, lambda text: render.status_box(text, "error"))

    search_inputs = [ui.queries, ui.k, ui.corpus, state, ui.hide_query, model]
    # the Search button and Enter in the queries box: one handler
    gr.on(
        [ui.search_btn.click, ui.queries.submit],
        on_search,
        search_inputs,
        [ui.results, state],
        concurrency_limit=None,
        **PRIVATE,
    )

    def on_other(path, col, s, progress=gr.Progress()):  # noqa: B008
        def index(session: Session) -> tuple:
            progress(None, desc="Indexing with both encoders")
            text = app.searcher.index_corpus(session, path, (col or "").strip() or None, given_name(path))
            served = render.served_md(session, app.searcher.example(session.run))
            return render.message(text, "ok"), gr.update(value="extra"), served

        return call_service(app, s, 3, index)

    outputs = [ui.other_md, ui.corpus, ui.served_md, state]
    ui.other_btn.click(on_other, [ui.other, ui.other_column, state], outputs, **ENCODE_QUEUE, **PRIVATE)
