"""Tab ④ Explore: what tuning changed for the served run. Linked twin maps (click a point for its neighbours,
lasso some to export them), the strings that moved most, space health, the general checks and the blend with
the base model, exports and the Hub push. Layout and thin handlers over `explorer.compare.explore.RunExplorer`."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import gradio as gr

from explorer import MirrorApp, Session
from explorer.resources.runfacts import blend_of
from explorer.tune.inputs import MAX_QUERIES_TEXT, MAX_SHORT_TEXT
from ui import render
from ui.handlers import ENCODE_QUEUE, PRIVATE, call_service, download
from ui.numbers import Slider
from ui.twinmap import TwinMap

EXPORTS = [
    ("Everything (zip)", "all"),
    ("Embedding Projector TSV", "projector"),
    ("Parquet (embedding-atlas)", "parquet"),
    ("Neighbours CSV", "neighbours"),
]
MOVED_COLUMNS = ["string", "moved", "gained", "lost"]
# a what-moved row's string typed into the map's "Locate a string" box: centred and ringed on both maps
LOCATE_JS = """(text) => {
  const box = document.querySelector('#mx-twinmap .tm-locate');
  if (box && text) { box.value = text; box.dispatchEvent(new Event('input', {bubbles: true})); }
  return [];
}"""


def explore_tab(max_points: int, allow_hub: bool) -> SimpleNamespace:
    """The Explore tab's components."""
    ui = SimpleNamespace()
    ui.caption = gr.Markdown(
        "Tune a model in tab ① (or open one of your runs) to explore what changed.", elem_id="mx-explore-caption"
    )
    ui.max_points = max_points  # the operator's cap (MIRROR_MAX_MAP_POINTS): a served run's slider stops at its strings
    with gr.Row():
        ui.n_points = Slider(
            10,
            max_points,
            value=max_points,
            step=1,
            label="Strings on the map",
            info="All of them by default; fewer: a seeded random sample",
            scale=2,
        )
        ui.queries = gr.Textbox(
            label="Place queries on the map",
            placeholder="one per line (optional)",
            lines=1,
            max_lines=4,
            scale=3,
            max_length=MAX_QUERIES_TEXT,
        )
        ui.map_btn = gr.Button("Draw the maps", variant="primary", elem_id="mx-map-btn", scale=1)
    ui.map_md = gr.Markdown("")
    ui.map = TwinMap(elem_id="mx-twinmap", placeholder=NO_RUN_MAP)
    ui.selection = gr.State([])  # the map's lassoed rows (the service's "i"), for "Export the selection"
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            ui.point_md = gr.Markdown(POINT_HINT, elem_id="mx-point-md")
            ui.point_results = gr.HTML("", elem_id="mx-point-results")
        with gr.Column(scale=2):
            ui.selection_md = gr.Markdown(SELECTION_HINT, elem_id="mx-selection-md")
            ui.export_fmt = gr.Dropdown(EXPORTS, value="all", label="Export format", elem_id="mx-export-fmt")
            with gr.Row():
                ui.export_sel_btn = gr.Button("Export the selection", elem_id="mx-export-sel-btn")
                ui.export_all_btn = gr.Button("Export all strings", elem_id="mx-export-all-btn")
            ui.export_file = gr.HTML("", visible=False, elem_id="mx-export-file")
    with gr.Accordion("What moved: your strings whose 10 nearest neighbours changed most", open=True):
        with gr.Row():
            ui.moved_filter = gr.Textbox(
                label="Filter", placeholder="part of a string", scale=3, max_length=MAX_SHORT_TEXT
            )
            ui.moved_btn = gr.Button("List", elem_id="mx-moved-btn", scale=1)
            ui.moved_csv_btn = gr.Button("Download CSV", elem_id="mx-moved-csv-btn", scale=1)
        ui.moved_md = gr.Markdown("", elem_id="mx-moved-md")
        ui.moved_table = gr.Dataframe(
            headers=MOVED_COLUMNS,
            interactive=False,
            wrap=True,
            max_height=420,
            column_widths=["22%", "12%", "33%", "33%"],  # "moved" whole, also on a phone (the table scrolls there;
            # app.py's CSS gives the rows, divs sized to the viewport by Gradio, these columns of its 560 px)
            elem_id="mx-moved-table",
        )
        ui.moved_file = gr.HTML("", visible=False, elem_id="mx-moved-file")
    with gr.Accordion("Space health and general checks (did tuning forget anything?)", open=True):
        ui.health_md = gr.Markdown("", elem_id="mx-health")
        ui.forget_md = gr.Markdown("", elem_id="mx-forgetting")
        # the remedy in one click, offered only when a check of the run as trained is worse (render.remedy_offered)
        ui.remedy_btn = gr.Button(
            f"Apply the suggested blend (α = {render.SUGGESTED_ALPHA:g}) and check again",
            variant="primary",
            visible=False,
            elem_id="mx-remedy-btn",
        )
        with gr.Row():
            ui.alpha = Slider(
                0,
                1,
                value=1,
                step=0.05,
                label="Blend with the base model (α: 0 = base, 1 = tuned)",
                info="Interpolates the weights, then re-encodes your strings with them (no retraining)",
                scale=3,
            )
            ui.blend_btn = gr.Button("Blend", elem_id="mx-blend-btn", scale=1)
        # a pairs run's own choice among blends (mirror/choose.py): another of them served in one click
        ui.choice = gr.Radio([], label="Serve another α (one click)", visible=False, elem_id="mx-choice")
        # room for the blend's progress on its own line (show_progress_on): an empty Markdown has no height, and
        # Gradio's progress text over it was in the page but drawn nowhere
        ui.blend_md = gr.Markdown("", min_height=56, elem_id="mx-blend-md")
    with gr.Accordion("Share on the Hugging Face Hub", open=False, visible=allow_hub):
        with gr.Row():
            ui.hub_repo = gr.Textbox(
                label="Repository", placeholder="your-name/my-mirror-model", scale=2, max_length=MAX_SHORT_TEXT
            )
            ui.hub_token = gr.Textbox(label="Token (write access)", type="password", scale=2, max_length=MAX_SHORT_TEXT)
            ui.hub_private = gr.Checkbox(value=True, label="Private", scale=1)
        ui.hub_btn = gr.Button("Push the tuned model", elem_id="mx-hub-btn")
        ui.hub_md = gr.Markdown("")
    return ui


POINT_HINT = "Click a point (or a row of the table below) to see its neighbours."
# The empty map's words, by state: nothing served yet, or a run served (just tuned or opened) whose map is not drawn
NO_RUN_MAP = "No map yet: tune a model in tab ① (or open one of your runs), then press Draw the maps."
NO_MAP_YET = "No map yet: press Draw the maps to lay out this run's strings."
SELECTION_HINT = "Lasso some points (the lasso tool above the maps) to export just those."


def choice_update(run: Any) -> Any:
    """The one-click picker of a pairs run's blends: the α it measured, the served one selected; hidden otherwise."""
    from explorer.resources.runfacts import choice_alphas, served_alpha

    alphas = choice_alphas(run)
    if not alphas:
        return gr.update(choices=[], value=None, visible=False)
    served = served_alpha(run)
    choices = [(f"α {a:g}", a) for a in alphas]
    return gr.update(choices=choices, value=served if served in alphas else None, visible=True)


def explore_panels(ui: SimpleNamespace, run: Any) -> dict[Any, Any]:
    """The Explore tab switched to a newly served run: its name, its general checks and blend, and nothing of the
    run before (neighbours shown, what moved, exports, the selection); its health and what moved follow at once
    (`on_served`, on the caption's change), the maps on request."""
    most = max(10, min(ui.max_points, run.n_texts))  # a run of 14,257 strings: the slider's end is 14,257
    return {
        ui.caption: render.run_caption(run),
        ui.n_points: gr.update(maximum=most, value=most),
        ui.forget_md: render.forgetting_md(run),
        ui.remedy_btn: gr.update(visible=render.remedy_offered(run)),
        ui.alpha: gr.update(value=render.default_alpha(run), info=render.blend_info(run)),
        ui.choice: choice_update(run),
        # a blend's line under the Blend slider belongs to the blend: gone when another run is served
        ui.blend_md: render.message(render.blend_text(run), "ok") if blend_of(run) is not None else "",
        ui.map: {"texts": [], "note": NO_MAP_YET},  # the empty map, worded for a served run
        ui.map_md: "",  # the empty map itself says what to do
        ui.health_md: render.message("Measuring this run's space health…", "info"),
        ui.moved_md: "",
        ui.moved_filter: "",  # the list that follows is of every string
        ui.moved_table: moved_frame([]),
        ui.moved_file: gr.update(value="", visible=False),
        ui.point_md: POINT_HINT,
        ui.point_results: "",
        ui.export_file: gr.update(value="", visible=False),
        ui.selection_md: SELECTION_HINT,
        ui.selection: [],
    }


def explore_outputs(ui: SimpleNamespace) -> list[Any]:
    """The components `explore_panels` sets (outputs of every handler that serves a run)."""
    names = [
        "caption",
        "n_points",
        "forget_md",
        "remedy_btn",
        "alpha",
        "choice",
        "blend_md",
        "map",
        "map_md",
        "health_md",
        "moved_md",
        "moved_filter",
        "moved_table",
    ]
    names += ["moved_file"]
    names += ["point_md", "point_results", "export_file", "selection_md", "selection"]
    return [getattr(ui, name) for name in names]


SHOWN_NEIGHBOURS = 5  # per cell of the what-moved table; its CSV has them all


CELL_CHARS = 60  # of each neighbour in a cell: a sentence's neighbours are sentences (its CSV has them whole)


def first_names(names: list[str], n: int = SHOWN_NEIGHBOURS) -> str:
    """The first `n` neighbours, each cut to CELL_CHARS, then how many more there are (the table shows 5 of up to 10):
    whole definitions made rows a screen tall, their first cells blank in view (a newcomer's pass, issue 50)."""
    more = len(names) - n
    cut = [name if len(name) <= CELL_CHARS else name[: CELL_CHARS - 1].rstrip() + "…" for name in names[:n]]
    return " · ".join(cut) + (f" · … +{more} more" if more > 0 else "")


MOVED_SHOWN = 500  # rows of the what-moved table (its CSV has every string)


def moved_head(shown: int, total: int, text_filter: str = "") -> str:
    """What the what-moved table lists: every string (matching the filter), or the `shown` most moved of `total`
    ("The 500 most moved of your 12,640 strings", never "500 strings" of a run of 12,640)."""
    # a long filter quoted whole made a paragraph of it (a pasted 1,000 characters): its first CELL_CHARS
    shown_filter = text_filter if len(text_filter) <= CELL_CHARS else text_filter[: CELL_CHARS - 1].rstrip() + "…"
    matching = f" matching “{shown_filter}”" if text_filter else ""
    if shown >= total:
        return f"{render.count(total, 'string')}{matching}, most moved first."
    return f"The {shown:,} most moved of your {total:,} strings{matching}, most moved first (the CSV has them all)."


def moved_frame(rows: list[dict[str, Any]]) -> Any:
    """The what-moved rows as a table: string, moved (0-1), neighbours gained and lost (the first five of each)."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "string": r["text"],
                "moved": round(float(r["moved"]), 2),
                "gained": first_names(r["gained"]),
                "lost": first_names(r["lost"]),
            }
            for r in rows
        ],
        columns=MOVED_COLUMNS,
    )


def wire_explore(app: MirrorApp, state: gr.State, ui: SimpleNamespace, search: SimpleNamespace) -> None:
    """Handlers of the Explore tab; `search`: the Search tab (a what-moved row fills its query box)."""
    ex = app.explore

    def on_map(n_value, queries, s, progress=gr.Progress()):  # noqa: B008
        def draw(session: Session) -> tuple:
            progress(None, desc="Laying out both spaces (the first map of a run takes longest)")
            data = ex.twin_map(session, n_value, queries)
            shown = f"All {data['n_total']:,} strings"
            if data["n_shown"] < data["n_total"]:
                shown = f"{data['n_shown']:,} of {data['n_total']:,} strings"
            note = f"{shown} · {data['method'].upper()} · laid out in {data['seconds']:.1f} s. {data['note']}"
            return render.message(note.strip(), "ok"), data, render.run_caption(data["run"]), *panels(session)

        return call_service(app, s, 6, draw)

    def panels(session: Session) -> tuple:
        """Health and general checks of the served run, drawn with the map."""
        return (
            render.health_md(ex.health(session), session.run),
            render.forgetting_md(session.run),
            gr.update(value=render.default_alpha(session.run)),
        )

    def on_served(s):
        """A newly served run (the caption names it): its space health and what moved, without a button press."""
        session = app.session(s)
        if session.run is None:
            return "", gr.update(), gr.update(), session

        def figures(session: Session) -> tuple:
            every = ex.moved(session, limit=None)  # ranked once per run (kept): the table shows its first
            rows = every[:MOVED_SHOWN]
            head = moved_head(len(rows), len(every)) + " Filter them, or select a row to see its neighbours."
            return render.health_md(ex.health(session), session.run), render.message(head, "info"), moved_frame(rows)

        return call_service(app, s, 3, figures)

    # hidden progress: the rest of the tab stays usable while these two are measured
    served_out = [ui.health_md, ui.moved_md, ui.moved_table, state]
    ui.caption.change(on_served, [state], served_out, show_progress="hidden", **ENCODE_QUEUE, **PRIVATE)

    map_out = [ui.map_md, ui.map, ui.caption, ui.health_md, ui.forget_md, ui.alpha, state]
    # the progress on the maps only: the rest of the tab stays usable while they are laid out
    map_kw = {"show_progress_on": [ui.map], **ENCODE_QUEUE, **PRIVATE}
    ui.map_btn.click(on_map, [ui.n_points, ui.queries, state], map_out, **map_kw)

    def on_point(text, s):
        def show(session: Session) -> tuple:
            found = ex.neighbours(session, text)
            base = session.run.base_model if session.run else ""
            return render.message(f"Neighbours of **{text}**", "info"), render.render_results(
                found, base, "mx-point-hits", render.tuned_side(session.run)
            )

        return call_service(app, s, 2, show)

    def on_click(s, evt: gr.EventData):
        return on_point(str(getattr(evt, "text", "") or ""), s)

    ui.map.click(on_click, [state], [ui.point_md, ui.point_results, state], **ENCODE_QUEUE, **PRIVATE)

    def on_select(evt: gr.SelectData):
        rows = [int(i) for i in (evt.index or [])] if evt.selected else []
        text = f"**{len(rows):,} strings selected** on the map." if rows else "Nothing selected."
        return text, rows

    ui.map.select(on_select, None, [ui.selection_md, ui.selection], **PRIVATE)

    def on_export(fmt, s, rows=None):
        if rows is not None and not rows:
            gr.Warning("Nothing selected: lasso some points on a map first.")
            return gr.update(), app.session(s)

        def export(session: Session) -> Any:
            return download(app, ex.export(session, fmt, rows), "Export")

        return call_service(app, s, 1, export)

    ui.export_all_btn.click(on_export, [ui.export_fmt, state], [ui.export_file, state], **PRIVATE)
    ui.export_sel_btn.click(on_export, [ui.export_fmt, state, ui.selection], [ui.export_file, state], **PRIVATE)

    def on_moved(text_filter, s):
        def listed(session: Session) -> tuple:
            every = ex.moved(session, text_filter, limit=None)
            rows = every[:MOVED_SHOWN]
            head = moved_head(len(rows), len(every), text_filter) + " Select a row to see its neighbours."
            return render.message(head, "info"), moved_frame(rows)

        return call_service(app, s, 2, listed)

    moved_in, moved_out = [ui.moved_filter, state], [ui.moved_md, ui.moved_table, state]
    gr.on([ui.moved_btn.click, ui.moved_filter.submit], on_moved, moved_in, moved_out, **ENCODE_QUEUE, **PRIVATE)

    def on_moved_csv(text_filter, s):
        return call_service(
            app, s, 1, lambda session: download(app, ex.moved_csv(session, text_filter), "What moved (CSV)")
        )

    ui.moved_csv_btn.click(on_moved_csv, moved_in, [ui.moved_file, state], **ENCODE_QUEUE, **PRIVATE)

    def on_moved_row(evt: gr.SelectData, s):
        text = str(evt.row_value[0]) if evt.row_value else ""
        return (*on_point(text, s)[:2], text, s)

    moved_row = ui.moved_table.select(
        on_moved_row, [state], [ui.point_md, ui.point_results, search.queries, state], **PRIVATE
    )
    moved_row.then(None, [search.queries], None, js=LOCATE_JS)  # and located on the maps, when they are drawn

    def on_push(repo, token, private, s, progress=gr.Progress()):  # noqa: B008
        def push(session: Session) -> str:
            progress(None, desc="Uploading to the Hub")
            url = ex.push(session, repo, token, bool(private))
            return render.message(f"Pushed to [{url}]({url}) ({'private' if private else 'public'}).", "ok")

        return call_service(app, s, 1, push)

    ui.hub_btn.click(on_push, [ui.hub_repo, ui.hub_token, ui.hub_private, state], [ui.hub_md, state], **PRIVATE)


def dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False)
