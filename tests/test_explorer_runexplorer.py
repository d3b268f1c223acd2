"""RunExplorer, the Explore tab's service, over a served run of the tiny random BERT: twin maps with queries,
what moved (ranked, filtered, as CSV), space health, a point's neighbours, and the blend served as a new run
(α = 0 is the base exactly; a failed blend leaves the served run as it was). No Gradio.

A random tiny encoder's neighbour order means nothing, so these tests check the plumbing and the invariants
(every string once, sorted, α = 0 reproducing the base vectors), not which strings moved.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest

from explorer.compare.explore import vectors_of
from mirror.errors import MirrorError
from tests.conftest import WORDS, blend


def test_twin_map_places_typed_queries_on_both_maps(app, tuned):
    data = app.explore.twin_map(tuned, 10, "cat\nzebra crossing\n\n")
    assert [q["text"] for q in data["queries"]] == ["cat", "zebra crossing"]
    shown = {t: j for j, t in enumerate(data["texts"])}
    if "cat" in shown:  # a query that is one of the shown strings lands exactly on it
        assert data["queries"][0]["base"] == pytest.approx(data["base"][shown["cat"]], abs=1e-4)
        assert data["queries"][0]["tuned"] == pytest.approx(data["tuned"][shown["cat"]], abs=1e-4)
    for q in data["queries"]:
        assert len(q["base"]) == len(q["tuned"]) == 2 and all(np.isfinite(q["base"] + q["tuned"]))


def test_a_maps_queries_follow_the_search_rules(app, tuned):
    """Issue 58: a map placed the first 20 lines of whatever it was sent, each encoded however long (a 10 MB line:
    tokenized whole); now its queries are a search's (20 of 500 characters, a text past its length refused unread)."""
    with pytest.raises(MirrorError, match="search at most 20"):
        app.explore.twin_map(tuned, 10, "\n".join(f"query {i}" for i in range(21)))
    with pytest.raises(MirrorError, match="a query takes at most 500"):
        app.explore.twin_map(tuned, 10, "cat\n" + "zebra " * 100)
    with pytest.raises(MirrorError, match="characters in all"):
        app.explore.twin_map(tuned, 10, "kitten " * 1_500_000)
    assert app.explore.twin_map(tuned, 10, " \n\t")["queries"] == []  # none typed, none placed


def test_what_moved_ranks_every_string_once_filters_and_downloads(app, tuned):
    rows = app.explore.moved(tuned)
    assert sorted(r["text"] for r in rows) == sorted(WORDS)
    scores = [r["moved"] for r in rows]
    assert scores == sorted(scores, reverse=True) and all(0.0 <= m <= 1.0 for m in scores)
    for r in rows:  # gained and lost are the two sides of the neighbourhood change
        assert set(r["gained"]) == set(r["tuned_neighbours"]) - set(r["base_neighbours"])
        assert set(r["lost"]) == set(r["base_neighbours"]) - set(r["tuned_neighbours"])
        assert r["text"] not in r["base_neighbours"] + r["tuned_neighbours"]
    assert [r["text"] for r in app.explore.moved(tuned, "O")] == [r["text"] for r in rows if "o" in r["text"]]
    path = app.explore.moved_csv(tuned, "")
    assert path.is_relative_to(tuned.run.folder)
    with path.open(encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    assert [t["string"] for t in table] == [r["text"] for r in rows]


def test_a_what_moved_download_never_changes_under_its_owner(app, tuned):
    """Issue 36's High row: two pages on one run (its owner and a link's opener), each downloading What moved with its
    own filter. Each link keeps serving the rows it was made for; its name says the filter; the same request again
    is the same file."""
    other = app.session()
    app.saved.open_run(other, tuned.run.folder.name)  # the run's link, opened in another browser
    everything = app.explore.moved_csv(tuned, "")
    before = everything.read_bytes()
    matching = app.explore.moved_csv(other, "o")  # page B, filtered, after page A's download
    assert matching != everything and matching.parent != everything.parent  # another file, another link
    assert everything.read_bytes() == before  # page A's link still serves every string

    def strings(path):
        with path.open(encoding="utf-8") as f:
            return [row["string"] for row in csv.DictReader(f)]

    assert sorted(strings(everything)) == sorted(WORDS)
    assert strings(matching) == [r["text"] for r in app.explore.moved(tuned, "o")] != strings(everything)
    assert everything.name.endswith("-moved-all.csv") and matching.name.endswith("-moved-matching-o.csv")
    assert app.explore.moved_csv(tuned, "O") == matching  # the same rows again: the same file
    assert app.explore.moved_csv(other, "") == everything


def test_an_export_of_a_selection_is_named_as_one(app, tuned):
    """A selection's export and the whole run's are never named alike (both were `mirror-<id>-all.zip`)."""
    whole = app.explore.export(tuned, "all")
    picked = app.explore.export(tuned, "all", [0, 2, 3])
    other = app.explore.export(tuned, "all", [1, 2, 3])
    assert whole.name == f"mirror-{tuned.run.folder.name[:12]}-all.zip"
    assert "-selection-3-" in picked.name and picked.name.endswith("-all.zip")
    assert len({whole.name, picked.name, other.name}) == 3 and len({whole.parent, picked.parent, other.parent}) == 3


def test_health_and_neighbours_of_the_served_run(app, tuned):
    health = app.explore.health(tuned)
    for side in ("base", "tuned"):
        assert {"mean_cosine", "uniformity", "alignment"} <= set(health[side])
        assert -1.0 <= health[side]["mean_cosine"] <= 1.0 and health[side]["uniformity"] <= 0.0
    assert "mean cosine" in health["summary"]
    found = app.explore.neighbours(tuned, "cat", k=3)
    assert found[0]["query"] == "cat" and "cat" not in [h["text"] for h in found[0]["tuned"]]
    with pytest.raises(MirrorError, match="click a point"):
        app.explore.neighbours(tuned, "  ")


def test_nothing_to_explore_before_a_run(app):
    s = app.session()
    for call in (lambda: app.explore.moved(s), lambda: app.explore.health(s), lambda: app.explore.twin_map(s, 50)):
        with pytest.raises(MirrorError, match="Nothing to explore yet"):
            call()


@pytest.mark.checks
def test_blend_at_alpha_zero_serves_the_base_as_a_new_run_and_keeps_the_tuned_one(app, tuned):
    parent, _, blended = blend(app, tuned, 0)
    assert blended is not parent and blended.stats["blend_alpha"] == 0.0
    assert blended.stats["blended_from"] == parent.folder.name and parent.folder.is_dir()
    loaded = app.models.loaded(blended)
    base_vecs, blend_vecs = vectors_of(loaded.main.base), vectors_of(loaded.main.tuned)
    # α = 0: the base model's own vectors (as close as two bf16 inference passes get: cosine 0.999+)
    assert (np.sum(blend_vecs * base_vecs, axis=1) > 0.999).all()
    assert "forgetting" in blended.stats
    assert app.explore.health(tuned)["summary"].startswith("The blend ")
    # the blend of a blend starts from the unblended tuned weights: α = 1 gives the tuned run's vectors back
    events = list(app.saved.blend_run(tuned, 1))
    assert events[-1].kind == "done"
    # α 1 is the run as trained, not "a blend" (issue 60's newcomer): named so as it goes and once served
    assert tuned.run.summary == f"as trained α=1 of {parent.summary}", tuned.run.summary
    said = [e.text for e in events if e.kind == "phase"]
    assert "Serving the tuned weights as trained (α 1)" in said and not any("Blending" in t for t in said), said
    assert app.explore.health(tuned)["summary"].startswith("Tuning ")
    tuned_vecs = vectors_of(app.models.loaded(parent).main.tuned)
    assert (np.sum(vectors_of(app.models.loaded(tuned.run).main.tuned) * tuned_vecs, axis=1) > 0.999).all()


def test_a_bad_or_failed_blend_leaves_the_served_run(app, tuned, monkeypatch):
    served = tuned.run
    for alpha in (1.5, "x", float("nan")):
        events = list(app.saved.blend_run(tuned, alpha))
        assert events[-1].kind == "error" and "α" in events[-1].text
        assert tuned.run is served

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("mirror.blend.blend_folder", broken)
    runs_before = set(p.name for p in app.runs.root.iterdir())
    events = list(app.saved.blend_run(tuned, 0.5))
    assert events[-1].kind == "error" and "previous model stays served" in events[-1].text
    assert tuned.run is served and set(p.name for p in app.runs.root.iterdir()) == runs_before
    assert list(app.saved.blend_run(app.session(), 0.5))[-1].kind == "error"  # nothing served: nothing to blend


def test_a_run_says_how_much_its_strings_neighbours_changed_and_a_blend_its_own(app, tuned):
    """Issue 40: the figure the page words is the mean of what "what moved" ranks, for the run and, measured again,
    for a blend of it (α = 0: the base's own neighbours, nothing changed); kept in run.json."""
    from ui import render

    rows = app.explore.moved(tuned)
    share = tuned.run.stats["neighbours_changed"]
    assert share == pytest.approx(np.mean([r["moved"] for r in rows]), abs=1e-4)
    said = render.change_sentence(tuned.run)
    assert f"{100 * share:.0f}% of your strings' nearest neighbours changed" in said
    assert app.runs.load(tuned.run.folder.name).stats["neighbours_changed"] == share
    assert list(app.saved.blend_run(tuned, 0))[-1].kind == "done"
    assert tuned.run.stats["neighbours_changed"] < 0.05  # two bf16 passes of the same weights: a tie may flip
    assert "the served model is a blend, α = 0" in render.change_sentence(tuned.run)
