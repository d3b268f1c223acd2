"""A newcomer's pass on the Search tab: a pasted 2,000-character query was refused with "keep queries under 500"
while the box only said "(up to 20)" (and holds 20,000 characters); and a visitor with nothing loaded read "search
your loaded strings with the base model now", then "Nothing to search yet: load your strings" on Search. The box says
its per-query limit, and the first header does not claim strings are loaded (it is not redrawn by an upload)."""

from __future__ import annotations

import gradio as gr

from explorer.tune.inputs import MAX_QUERIES, MAX_QUERY_CHARS
from ui import render
from ui.search import search_tab


def test_the_queries_box_says_how_long_a_query_may_be():
    with gr.Blocks():
        ui = search_tab()
    assert f"up to {MAX_QUERIES}, {MAX_QUERY_CHARS} characters each" in ui.queries.info


def test_the_first_search_header_does_not_say_strings_are_loaded():
    first = render.served_md(None)
    assert "your loaded strings" not in first
    assert "load your strings in tab ①" in first


def test_the_search_header_is_redrawn_by_a_load_and_names_a_pairs_files_columns(tmp_path, tiny_bert):
    """A newcomer loaded a term/definition file and the Search tab kept its first header (no word of the columns)
    until a run ended: a load in tab ① now redraws it (the load summary's change), naming the column searched and
    what its partner is for."""
    import warnings
    from pathlib import Path

    import app as mx
    from explorer.service import MirrorApp
    from explorer.settings import Settings
    from explorer.tune.inputs import ADVANCED

    app = MirrorApp(Settings(work_dir=tmp_path / "w", model_roots=(Path(tiny_bert).resolve(),), general_checks=False))
    demo = mx.build_demo(app)
    fns = {f.name: f for f in demo.fns.values()}
    redraw = fns["on_loaded"]
    assert [c.elem_id for c in redraw.outputs] == ["mx-served"]
    loaded = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "mx-input")
    assert (loaded._id, "change") in [tuple(t) for t in redraw.targets]  # every load changes the load summary
    rows = [f"term {i},the definition of term number {i} in a few more words" for i in range(60)]
    path = tmp_path / "glossary.csv"
    path.write_text("term,definition\n" + "\n".join(rows) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fns["on_upload"].fn(str(path), None, [], "auto", "bundled", None, *([None] * len(ADVANCED)))
    session = out[-1]
    assert session.partners is not None
    header = redraw.fn(session)
    assert "Searching the `" in header and "column" in header and "No tuned model yet" in header
    # the strings loaded are named, not "load your strings in tab ①" (a second visitor with the example loaded)
    assert "your 60 strings from `glossary.csv` are searched here with the base model" in header
    assert "load your strings" not in header
