"""explorer.runs.sessions through MirrorApp: one folder per session, isolated; idle sessions swept past the TTL; disk
budgets for all sessions (least recently used idle ones evicted) and for one session.

(Sessions expired by Gradio's own gr.State time_to_live: tests/test_app_ui.py.)
"""

from __future__ import annotations

import copy
import os
import time

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
