"""explorer.runs.store: finished runs kept by id under the work folder, for any session, after a restart, until the
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


def test_the_age_and_size_budgets_remove_old_runs_never_one_in_use(app, tiny_bert):
    sessions = [tuned_session(app, tiny_bert) for _ in range(4)]
    folders = [s.run.folder for s in sessions]
    now = time.time()
    for i, folder in enumerate(folders):  # run 0 unused for 10 days, run 1 for 2 days, runs 2-3 just used
        age = {0: 10 * 86400, 1: 2 * 86400}.get(i, 0)
        os.utime(folder / ".last_used", (now - age, now - age))
    app.models.runs.clear()  # nothing in memory: only the in-use rule below protects a run
    removed = app.runs.sweep(max_age=7 * 86400, max_bytes=10**12, keep={folders[3]}, min_idle=300)
    assert removed == [folders[0]] and all(f.is_dir() for f in folders[1:])  # the age budget
    one_run = max(sum(p.stat().st_size for p in f.rglob("*") if p.is_file()) for f in folders[1:])
    removed = app.runs.sweep(max_age=7 * 86400, max_bytes=one_run, keep={folders[3]}, min_idle=300)
    # the size budget: the least recently used goes first; run 2 was used minutes ago, run 3 is being served
    assert removed == [folders[1]] and folders[2].is_dir() and folders[3].is_dir()
    with pytest.raises(MirrorError, match="no run"):
        app.saved.open_run(app.session(), folders[0].name)


def test_the_app_sweep_keeps_runs_in_memory_and_in_progress(app, tiny_bert):
    s = tuned_session(app, tiny_bert)
    folder = s.run.folder
    old = time.time() - 30 * 86400
    os.utime(folder / ".last_used", (old, old))
    app.sweep(force=True)
    assert folder.is_dir()  # loaded in memory (being served): kept however old
    app.models.runs.clear()
    app.sweep(force=True)
    assert not folder.exists()


def test_the_browser_key_is_made_once_and_kept(app):
    key = app.secret
    assert len(key) == 64 and MirrorApp(app.settings).secret == key
    assert oct(Path(app.settings.work_dir / ".browser-secret").stat().st_mode & 0o777) == "0o600"


def test_a_blend_is_listed_and_captioned_as_a_blend_of_its_parent(app, tiny_bert):
    """Issue 28: a blend read exactly like its parent in the run list (only the time differed)."""
    from explorer import render

    s = tuned_session(app, tiny_bert)
    parent = s.run.folder.name
    assert list(app.saved.blend_run(s, 0.5))[-1].kind == "done"
    blend = s.run.folder.name
    labels = {r["id"]: r["label"] for r in app.saved.list_runs([parent, blend])}
    assert "blend" not in labels[parent] and f"strings from {s.run.corpus}" in labels[parent]
    assert f"blend α=0.5 of {len(WORDS)} strings from" in labels[blend] and f"(run {parent[:8]})" in labels[blend]
    assert f"blend α=0.5 of run `{parent[:8]}`" in render.run_caption(s.run)
    assert f"blend α=0.5 of run `{parent[:8]}`" in render.served_md(s)  # the Search tab's header says it too
