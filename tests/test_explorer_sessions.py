"""explorer.resources.sessions through MirrorApp: one folder per session, isolated; idle sessions swept past the TTL; disk
budgets for all sessions (least recently used idle ones evicted) and for one session.

(Sessions expired by Gradio's own gr.State time_to_live: tests/test_app_ui.py.)
"""

from __future__ import annotations

import copy
import dataclasses
import os
import time
from pathlib import Path

import pytest

from explorer import MirrorApp, Settings
from mirror.errors import MirrorError
from tests.conftest import TINY, WORDS


def test_sessions_are_isolated_and_old_folders_are_swept(app, tuned):
    other = app.session()
    assert other.folder != tuned.folder and other.folder.is_dir()
    with pytest.raises(MirrorError, match="Nothing to search yet"):
        app.searcher.search(other, "cat")
    assert app.session(tuned) is tuned  # the same state comes back
    # an expired session: its folder goes, and its state yields a fresh session
    old = os.path.getmtime(tuned.folder / ".last_used") - app.settings.session_ttl - 10
    os.utime(tuned.folder / ".last_used", (old, old))
    removed = app.sweep(force=True)
    assert removed == [tuned.folder] and not tuned.folder.exists() and other.folder.is_dir()
    fresh = app.session(tuned)
    assert fresh is not tuned and fresh.run is None
    app.close_session(other)
    assert not other.folder.exists()


def test_a_pages_sessionless_events_share_one_session_for_its_owner_and_a_while(app, monkeypatch):
    """SessionStore.get(None, owner, page): the events a page sends before its session reached it share one (an
    upload's, and a plan's that ends after it); another page, another owner, an API call (no page) or the same page
    past PENDING_S get their own."""
    from explorer.resources import sessions as store_mod
    from explorer.resources.accounts import Owner

    store, alice, bob = app.sessions, Owner("alice", "10.0.0.1"), Owner("bob", "10.0.0.2")
    first = store.get(None, alice, "page-a")
    assert store.get(None, alice, "page-a") is first
    assert store.get(None, alice, "page-b") is not first  # another page
    assert store.get(None, bob, "page-a") is not first  # a forged hash with another visitor's cookie
    assert store.get(None, alice, "page-a") is first  # (and the page keeps its own)
    assert store.get(None, alice) is not first  # no page: an API call's own
    assert store.get(first, alice, "page-a") is first  # the state, once it landed
    clock = [time.monotonic()]
    monkeypatch.setattr(store_mod.time, "monotonic", lambda: clock[0])
    later = store.get(None, alice, "page-c")
    clock[0] += store_mod.PENDING_S + 1
    assert store.get(None, alice, "page-c") is not later  # past PENDING_S: a fresh one
    store.close(first)  # closed (its tab gone): not handed out again
    assert store.get(None, alice, "page-a") is not first


def test_session_state_survives_gradio_deepcopy(app):
    s = app.session()
    assert copy.deepcopy(s) is s


# Attack review, disk: one visitor (or many) cannot fill the server's disk, and nobody loses anything because someone
# else filled it (issue 37; the accounts themselves: tests/test_explorer_accounts.py).


def test_idle_sessions_go_by_their_ttl_only_and_a_full_disk_refuses_the_writer(tmp_path, tiny_bert):
    app = MirrorApp(
        Settings(
            work_dir=tmp_path / "w", disk_bytes=3 * 100_000, model_roots=(tiny_bert.resolve(),), general_checks=False
        )
    )
    folders = []
    now = time.time()
    for i in range(6):  # 100 kB each, idle for 10..60 minutes but inside the TTL
        f = app.settings.work_dir / f"s{i}"
        f.mkdir(parents=True)
        (f / "blob").write_bytes(b"x" * 100_000)
        (f / ".last_used").touch()
        age = now - 600 * (i + 1)
        os.utime(f / ".last_used", (age, age))
        folders.append(f)
    assert app.sweep(force=True) == [] and all(f.is_dir() for f in folders)  # 600 kB against 300: none goes
    s = app.session()
    app.loader.load_pasted(s, "\n".join(WORDS))
    last = list(app.trainer.train(s, str(tiny_bert), "auto", TINY))[-1]
    assert last.kind == "error" and "MIRROR_DISK_MB" in last.text, last
    assert all(f.is_dir() for f in folders) and s.run is None
    old = now - app.settings.session_ttl - 10
    os.utime(folders[0] / ".last_used", (old, old))
    assert app.sweep(force=True) == [folders[0]]  # past the TTL


def test_a_visitor_over_its_disk_budget_cannot_start_another_job(app, tiny_bert):
    tight = MirrorApp(
        Settings(work_dir=app.settings.work_dir, model_roots=app.settings.model_roots, visitor_disk_bytes=10_000)
    )
    s = tight.session()
    tight.loader.load_pasted(s, "\n".join(WORDS))
    (s.folder / "blob").write_bytes(b"x" * 20_000)
    last = list(tight.trainer.train(s, str(tiny_bert), "auto", {**TINY, "batch_size": 4}))[-1]
    assert last.kind == "error" and "MIRROR_VISITOR_DISK_MB" in last.text
    # the older name of the setting still sets it
    assert Settings.from_env({"MIRROR_SESSION_DISK_MB": "300"}).visitor_disk_bytes == 300 * 2**20
    env = {"MIRROR_SESSION_DISK_MB": "300", "MIRROR_VISITOR_DISK_MB": "200"}
    assert Settings.from_env(env).visitor_disk_bytes == 200 * 2**20


# Issue 59 (High row): the settings a Launch runs are a plan the session holds, not the page's fields. A page reloaded
# during a run (a fresh session) shows the ones the run was launched with; after its end, or opened by its link, the
# run's own; never a preset's defaults.


def pairs_file(tmp_path: Path) -> Path:
    """A two-column file whose second column pairs with the first: the pairs preset applies."""
    from tests.conftest import VOCAB_WORDS

    rows = [f"{a} {b}-{i},{a} {b} is on the {c} and {VOCAB_WORDS[i % 14]}" for i, (a, b, c) in enumerate(TRIPLES)]
    path = tmp_path / "glossary.csv"
    path.write_text("name,summary\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


TRIPLES = [(a, b, c) for a in ("cat", "dog", "car", "bus") for b in ("red", "blue", "big") for c in ("man", "woman")]


def test_the_settings_a_launch_runs_are_held_by_the_session_and_restored_not_preset(app, tiny_bert, tmp_path):
    from explorer.tune.inputs import build_config, preset_overrides
    from mirror.data import AUTO

    s, model = app.session(), str(tiny_bert)
    shown = preset_overrides("words")  # a fresh page's fields: the words preset
    assert app.planner.hold(s, model, "auto", shown) is not None and s.tuning is None  # no strings: no plan held
    app.loader.load_file(s, str(pairs_file(tmp_path)), None, "glossary.csv", AUTO)
    assert s.partners is not None
    # a load (preset Auto): the pairs preset's values, but for the one changed by hand; held as the page shows them
    values, kept = app.planner.after_load(s, "auto", model, {**shown, "max_steps": 3, "device": "cpu"}, ["max_steps"])
    pairs = preset_overrides(s.detected_mode, pairs=True)
    assert values == {**pairs, "max_steps": 3} and kept == ["max_steps"]
    assert values["temperature"] == 0.05 and values["epochs"] == 1 and values["temperature"] != shown["temperature"]
    assert s.tuning is not None and dict(s.tuning.overrides) == values
    assert (s.tuning.mode, s.tuning.model) == ("auto", model)
    # a setting changed by hand is held too; Launch holds what it runs, for its run as well
    values = {**values, "device": "cpu", "batch_size": 8}
    app.planner.hold(s, model, "auto", values)
    assert dict(s.tuning.overrides) == values
    app.trainer.request_run(s)
    plan = app.planner.launch(s, model, "auto", values)
    assert plan == s.tuning
    events = list(app.trainer.train(s, plan.model, plan.mode, dict(plan.overrides)))
    assert events[-1].kind == "done", events[-1]
    run_id, config = s.run.folder.name, build_config(s.texts, model, "auto", values, pairs=True)[0]

    # a page reloaded during the run: a fresh session, which takes the launching session's settings
    during = app.session()
    restored, own = app.planner.restored(during, launched_by=s)
    assert restored == plan and during.tuning == plan
    assert own == [name for name in values if values[name] != pairs[name]] and "max_steps" in own  # the user's own
    # ...and after the run, by its link: the settings it was launched with, with its strings loaded again
    after = app.session()
    app.saved.open_run(after, run_id)
    app.loader.restore_texts(after)
    assert after.partners is not None
    restored, _ = app.planner.restored(after)
    assert restored == plan and after.tuning == plan
    # a session holding its own settings keeps them
    assert app.planner.restored(s)[0] == plan

    # another server process (nothing in memory): the run's recorded config, the same plan on the same strings
    other = MirrorApp(app.settings)
    opened = other.session()
    other.saved.open_run(opened, run_id)
    other.loader.restore_texts(opened)
    recorded, _ = other.planner.restored(opened)
    assert recorded.model == model and recorded.mode == "auto" and recorded.overrides["temperature"] == 0.05
    again = build_config(opened.texts, recorded.model, recorded.mode, dict(recorded.overrides), pairs=True)[0]
    assert again == dataclasses.replace(config, pooling=s.run.pooling)  # its pooling as resolved for the model
