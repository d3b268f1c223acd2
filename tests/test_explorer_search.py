"""The Search tab: each hit's rank move between base and tuned, the query's own string hidden, the base-only
search before any tuning, strings merged case-insensitively at load, Enter wired to search, errors shown as HTML
(explorer.compare.search, ui.render, app.searcher.search, ui/search.py's adapters).

Ranking is checked on hand-made vectors with known neighbours (a real FAISS index over them); the tiny random
model only drives the service and the adapters, where no order is asserted."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import app as mx
from explorer.compare.search import search_both, without_query
from index.store import Hit, VectorIndex
from mirror.config import MirrorConfig
from mirror.data import clean_texts
from mirror.errors import MirrorError
from mirror.train import mirror_tune
from tests.conftest import WORDS
from ui.render import load_md, rank_move, render_results, toast_text

# Query "Whisk" points at angle 0; each string's angle from it, per encoder (smaller = more similar).
BASE_ANGLES = {"whisk": 0.0, "spoon": 0.1, "fork": 0.2, "beater": 0.3, "mixer": 0.4, "ladle": 1.0}
TUNED_ANGLES = {"whisk": 0.0, "beater": 0.05, "mixer": 0.1, "spoon": 0.3, "ladle": 0.35, "fork": 1.2}


class AngleIndex:
    """A FAISS index of 2-D unit vectors at the given angles; every query is the vector at angle 0."""

    def __init__(self, angles: dict[str, float]):
        texts = list(angles)
        vectors = np.array([[np.cos(angles[t]), np.sin(angles[t])] for t in texts], dtype=np.float32)
        self.index = VectorIndex.from_vectors(vectors, texts, gpu=False)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        return self.index.search_vectors(np.tile([1.0, 0.0], (len(queries), 1)).astype(np.float32), k)


def texts(hits: list[dict]) -> list[str]:
    return [h["text"] for h in hits]


def quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


# ---------------------------------------------------------------------------------------------- rank moves


def test_each_tuned_hit_carries_its_base_rank():
    [found] = search_both(AngleIndex(TUNED_ANGLES), AngleIndex(BASE_ANGLES), ["Whisk"], 3, hide_query=False)
    assert texts(found["tuned"]) == ["whisk", "beater", "mixer"] and texts(found["base"]) == ["whisk", "spoon", "fork"]
    assert [h["base_rank"] for h in found["tuned"]] == [1, None, None]
    assert [h["tuned_rank"] for h in found["base"]] == [1, None, None]
    assert [h["only_here"] for h in found["tuned"]] == [False, True, True] and found["base_only"] is False


def test_rank_move_marks():
    assert [rank_move(2, 5), rank_move(4, 2), rank_move(3, 3), rank_move(1, None)] == ["↑3", "↓2", "=", "new"]


def test_the_results_show_each_tuned_hits_move():
    [found] = search_both(AngleIndex(TUNED_ANGLES), AngleIndex(BASE_ANGLES), ["Whisk"], 4, hide_query=True)
    # base without whisk: spoon 1, fork 2, beater 3, mixer 4; tuned: beater 1, mixer 2, spoon 3, ladle 4
    assert [(h["text"], h["base_rank"]) for h in found["tuned"]] == [
        ("beater", 3),
        ("mixer", 4),
        ("spoon", 1),
        ("ladle", None),
    ]
    page = render_results([found], "bundled")
    moves = [cell.split(">")[1].split("<")[0] for cell in page.split('class="mx-move"')[1:]]
    assert moves == ["↑2", "↑2", "↓2", "new"]
    assert 'title="base rank 3"' in page and 'title="not in the base top k"' in page


def test_old_style_hits_without_base_rank_still_render():
    hit = {"rank": 1, "text": "a", "score": 0.5, "only_here": True}
    page = render_results([{"query": "q", "tuned": [hit], "base": [dict(hit)]}], "bundled")
    assert ">new<" in page and "1 of 1 tuned hits are new" in page


# ---------------------------------------------------------------------------------------------- the query's own string


def test_hiding_the_query_drops_its_own_string_whatever_its_case_and_keeps_k_hits():
    [shown] = search_both(AngleIndex(TUNED_ANGLES), AngleIndex(BASE_ANGLES), ["Whisk"], 3, hide_query=True)
    assert texts(shown["tuned"]) == ["beater", "mixer", "spoon"] and texts(shown["base"]) == ["spoon", "fork", "beater"]
    assert [h["rank"] for h in shown["tuned"]] == [1, 2, 3]  # renumbered: the next hit takes rank 1


def test_without_query_on_hand_made_hits():
    hits = [Hit("Cat", 0.99, 1, 0), Hit("kitten", 0.9, 2, 1), Hit("dog", 0.8, 3, 2), Hit("cat  food", 0.7, 4, 3)]
    assert [(h.text, h.rank) for h in without_query(hits, "cAT", 2)] == [("kitten", 1), ("dog", 2)]
    assert [h.text for h in without_query(hits, "cat food", 9)] == ["Cat", "kitten", "dog"]  # spacing ignored
    assert without_query(hits, "bird", 4) == hits  # nothing to hide: the same hits


def test_the_service_and_api_hide_the_query_on_request(app, tuned):
    kept = app.searcher.search(tuned, "cat", len(WORDS))[0]
    assert "cat" in texts(kept["tuned"]) and "cat" in texts(kept["base"])  # the API's default keeps it
    hidden = app.searcher.search(tuned, "CAT", 5, hide_query=True)[0]
    assert "cat" not in texts(hidden["tuned"]) + texts(hidden["base"])
    assert len(hidden["tuned"]) == len(hidden["base"]) == 5
    fns = {f.name: f.fn for f in mx.build_demo(app).fns.values()}
    results, session = fns["api_search"]("cat", 5, True, "", tuned)
    assert session is tuned and "cat" not in texts(results[0]["tuned"]) and len(results[0]["tuned"]) == 5
    assert all("base_rank" in h for h in results[0]["tuned"]) and all("tuned_rank" in h for h in results[0]["base"])


# ---------------------------------------------------------------------------------------------- base only, before tuning


def test_base_only_search_before_tuning(app, tiny_bert):
    s = app.session()
    with pytest.raises(MirrorError, match="Nothing to search yet: load your strings"):
        app.searcher.search(s, "cat", 3, base_model=str(tiny_bert))
    app.loader.load_pasted(s, "\n".join(WORDS))
    found = app.searcher.search(s, "cat\ndog", 3, base_model=str(tiny_bert))
    assert [r["query"] for r in found] == ["cat", "dog"]
    for r in found:
        assert r["base_only"] is True and r["tuned"] == [] and len(r["base"]) == 3
        assert set(texts(r["base"])) <= set(WORDS) and all(h["tuned_rank"] is None for h in r["base"])
    assert "cat" not in texts(app.searcher.search(s, "cat", 3, hide_query=True, base_model=str(tiny_bert))[0]["base"])
    assert len(app.base_indexes._indexes) == 1  # the strings were embedded once, then reused
    with pytest.raises(MirrorError, match="no other corpus"):
        app.searcher.search(s, "cat", 3, corpus="extra", base_model=str(tiny_bert))


def test_the_search_adapter_shows_base_only_hits_and_says_so(app, tiny_bert):
    fns = {f.name: f.fn for f in mx.build_demo(app).fns.values()}
    s = app.session()
    app.loader.load_pasted(s, "\n".join(WORDS))
    page, same = quiet(fns["on_search"], "cat", 3, "main", s, True, str(tiny_bert))
    assert same is s and 'class="mx-base-only"' in page and "No tuned model yet" in page
    assert "Tuned (mirror)" not in page and page.count("<tr") == 1 + 3  # header and three hits


def test_search_errors_are_html_in_the_page_and_plain_in_the_toast(app):
    fns = {f.name: f.fn for f in mx.build_demo(app).fns.values()}
    with pytest.warns(UserWarning) as toasts:
        page, _ = fns["on_search"]("cat", 3, "main", None, True, "bundled")
    assert page.startswith('<div class="mx-status-error"') and "Nothing to search yet" in page and "**" not in page
    assert "**" not in str(toasts[0].message) and ">" not in str(toasts[0].message)
    assert toast_text("`a <b>.txt` is **big**") == "a &lt;b&gt;.txt is big"


# ---------------------------------------------------------------------------------------------- Enter


def test_enter_in_the_queries_box_searches(app):
    demo = mx.build_demo(app)
    queries = next(c for c in demo.blocks.values() if getattr(c, "elem_id", None) == "mx-queries")
    button = next(c for c in demo.blocks.values() if getattr(c, "elem_id", None) == "mx-search-btn")
    [search] = [f for f in demo.fns.values() if f.name == "on_search"]
    assert (queries._id, "submit") in search.targets and (button._id, "click") in search.targets
    # Gradio submits on Enter only when lines is 1; max_lines above 1 keeps a textarea, so Shift+Enter adds
    # another query on a new line
    assert queries.lines == 1 and queries.max_lines > 1


# ---------------------------------------------------------------------------------------------- case-insensitive merge


def test_strings_differing_only_in_case_are_merged_and_counted():
    texts_, stats = clean_texts(["Whisk", "whisk", " WHISK ", "whisk", "Apple", "apple", "", "pear"])
    assert texts_ == ["Whisk", "Apple", "pear"]  # the first spelling is kept
    assert (stats.lines, stats.empty, stats.duplicates, stats.case_duplicates, stats.kept) == (8, 1, 1, 3, 3)
    assert "3 case variants merged" in stats.summary()
    assert "case variants" not in clean_texts(["a", "b", "a"])[1].summary()  # only when there are some


def test_the_load_message_counts_case_variants(app):
    s = app.session()
    info = app.loader.load_pasted(s, "Whisk\nwhisk\ncat\ncat\nCAT\ndog")
    assert s.texts == ["Whisk", "cat", "dog"]
    assert (info["stats"].duplicates, info["stats"].case_duplicates) == (1, 2)
    assert "1 duplicate removed, 2 case variants merged" in load_md(info)
    with pytest.raises(MirrorError, match="found 1 usable string .*2 duplicates"):
        app.loader.load_pasted(s, "Whisk\nwhisk\nWHISK")


def test_training_merges_case_variants_too(tiny_bert):
    """In a batch, "Cat" and "cat" would be each other's false negatives: mirror_tune cleans the same way."""
    config = MirrorConfig.preset("words", model=str(tiny_bert), device="cpu", batch_size=2, max_steps=1)
    assert mirror_tune(["Cat", "cat", "dog", "DOG", "car"], config).n_texts == 3
