"""explorer.resources.store: finished runs kept by id under the work folder, for any session, after a restart, until the
operator's age or size budget removes them (never one in use)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from explorer import MirrorApp
from mirror.errors import MirrorError
from tests.conftest import WORDS, tuned_session


def test_a_run_outlives_its_session_and_the_server_process(app, tiny_bert):
    s = tuned_session(app, tiny_bert)
    run_id = s.run.folder.name
    assert len(run_id) == 32 and (s.run.folder / "run.json").is_file()
    app.close_session(s)  # the tab went away: its session folder goes, the run stays
    assert not s.folder.exists() and s.run.folder.is_dir()
    restarted = MirrorApp(app.settings)  # a new process on the same work folder
    other = restarted.session()
    info = restarted.saved.open_run(other, run_id)
    assert info.n_texts == len(WORDS) and info.losses == s.run.losses and info.model_zip.is_file()
    hits = restarted.searcher.search(other, "cat", 3)[0]
    assert hits["tuned"][0]["text"] and hits["base"]
    # any client, without making it its own run: the API's run=<id>
    third = restarted.session()
    assert restarted.searcher.search(third, "dog", 2, run_id=run_id)[0]["tuned"] and third.run is None
    assert [r["id"] for r in restarted.saved.list_runs(["f" * 32, run_id, "not an id"])] == [run_id]


def test_opening_a_run_in_a_session_without_strings_loads_the_runs_strings_again(app, tiny_bert):
    s = tuned_session(app, tiny_bert)
    run_id = s.run.folder.name
    fresh = app.session()  # a reloaded page, or the link opened in another browser: nothing loaded
    app.saved.open_run(fresh, run_id)
    info = app.loader.restore_texts(fresh)
    assert fresh.texts == s.texts and info["strings"] == len(WORDS)
    assert run_id[:8] in fresh.source and "loaded again" in info["notes"][0]
    assert app.loader.restore_texts(fresh) is None  # once it has strings, they are never replaced
    other = app.session()
    app.loader.load_pasted(other, "apple\npear\nplum")
    app.saved.open_run(other, run_id)
    assert app.loader.restore_texts(other) is None and other.texts == ["apple", "pear", "plum"]


@pytest.mark.parametrize("bad", ["", "../../etc", "0" * 31, "g" * 32, "/" + "a" * 32, "A" * 32])
def test_only_run_ids_name_runs(app, bad):
    s = app.session()
    with pytest.raises(MirrorError, match="not a run id"):
        app.saved.open_run(s, bad)
    with pytest.raises(MirrorError, match="no run"):
        app.saved.open_run(s, "a" * 32)  # well formed, but there is no such run
    assert s.run is None


def test_the_age_budget_removes_old_runs_never_one_being_made(app, tiny_bert):
    sessions = [tuned_session(app, tiny_bert) for _ in range(4)]
    folders = [s.run.folder for s in sessions]
    now = time.time()
    for i, folder in enumerate(folders):  # run 0 unused for 10 days, runs 1 and 3 for 8, run 2 just used
        age = {0: 10 * 86400, 1: 8 * 86400, 3: 8 * 86400}.get(i, 0)
        os.utime(folder / ".last_used", (now - age, now - age))
    removed = app.runs.sweep(max_age=7 * 86400, keep={folders[3]}, unfinished_age=3600)
    assert sorted(removed) == sorted(folders[:2]) and folders[2].is_dir() and folders[3].is_dir()
    with pytest.raises(MirrorError, match="no run"):
        app.saved.open_run(app.session(), folders[0].name)
    # a folder without run.json is a run being made, or one a restart cut short: gone once untouched for long
    cut = app.runs.root / ("c" * 32)
    (cut / "model").mkdir(parents=True)
    assert app.runs.sweep(7 * 86400, {folders[3]}, unfinished_age=3600) == [] and cut.is_dir()
    for path in (cut / "model", cut):
        os.utime(path, (now - 7200, now - 7200))
    assert app.runs.sweep(7 * 86400, {folders[3]}, unfinished_age=3600) == [cut] and not cut.exists()


def test_a_run_in_memory_still_ages_and_listing_a_run_is_not_using_it(app, tiny_bert):
    """Issue 37: a run in memory was never removed, and a page listing its runs (on every load) kept them all
    alive: 44 runs survived a restart and the runs folder grew ~21 GB/h."""
    s = tuned_session(app, tiny_bert)
    folder = s.run.folder
    old = time.time() - 30 * 86400
    os.utime(folder / ".last_used", (old, old))
    assert [r["id"] for r in app.saved.list_runs([folder.name])] == [folder.name]  # listed: not a use
    assert os.path.getmtime(folder / ".last_used") == pytest.approx(old)
    assert str(folder) in app.models.runs  # in memory, served to `s`
    app.sweep(force=True)
    assert not folder.exists() and str(folder) not in app.models.runs  # removed from disk and memory alike
    with pytest.raises(MirrorError, match="no run"):
        app.saved.open_run(app.session(), folder.name)


def test_the_browser_key_is_made_once_and_kept(app):
    key = app.secret
    assert len(key) == 64 and MirrorApp(app.settings).secret == key
    assert oct(Path(app.settings.work_dir / ".browser-secret").stat().st_mode & 0o777) == "0o600"
    # the visitor cookie's key is another one: Gradio sends the browser key to every page
    assert len(app.visitor_key) == 32 and app.visitor_key.hex() != key
    assert MirrorApp(app.settings).visitor_key == app.visitor_key


def test_a_blend_is_listed_and_captioned_as_a_blend_of_its_parent(app, tiny_bert):
    """Issue 28: a blend read exactly like its parent in the run list (only the time differed)."""
    from ui import render

    s = tuned_session(app, tiny_bert)
    parent = s.run.folder.name
    assert list(app.saved.blend_run(s, 0.5))[-1].kind == "done"
    blend = s.run.folder.name
    labels = {r["id"]: r["label"] for r in app.saved.list_runs([parent, blend])}
    assert "blend" not in labels[parent] and f"strings from {s.run.corpus}" in labels[parent]
    assert f"blend α=0.5 of {len(WORDS)} strings from" in labels[blend] and f"(run {parent[:8]})" in labels[blend]
    assert f"blend α=0.5 of run `{parent[:8]}`" in render.run_caption(s.run)
    assert f"blend α=0.5 of run `{parent[:8]}`" in render.served_md(s)  # the Search tab's header says it too
