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
