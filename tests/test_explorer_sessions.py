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


# Attack review, disk: one visitor (or many) cannot fill the server's disk.


def test_idle_sessions_are_evicted_oldest_first_past_the_disk_budget(tmp_path):
    app = MirrorApp(Settings(work_dir=tmp_path / "w", disk_bytes=3 * 100_000))
    folders = []
    now = time.time()
    for i in range(6):  # 100 kB each, idle for 1..6 hours but inside the TTL: only the budget removes them
        f = app.settings.work_dir / f"s{i}"
        (f / "runs").mkdir(parents=True)
        (f / "runs" / "blob").write_bytes(b"x" * 100_000)
        (f / ".last_used").touch()
        age = now - 600 * (i + 1)
        os.utime(f / ".last_used", (age, age))
        folders.append(f)
    app.sessions.running.add(folders[5])  # the oldest, but a job runs in it
    recent = folders[0]
    os.utime(recent / ".last_used", None)  # used just now
    removed = app.sweep(force=True)
    assert sorted(removed) == sorted(folders[2:5])  # the oldest idle ones, until the rest fits
    assert all(f.is_dir() for f in (folders[0], folders[1], folders[5]))


def test_a_session_over_its_disk_budget_cannot_start_another_job(app, tiny_bert):
    tight = MirrorApp(
        Settings(work_dir=app.settings.work_dir, model_roots=app.settings.model_roots, session_disk_bytes=10_000)
    )
    s = tight.session()
    tight.loader.load_pasted(s, "\n".join(WORDS))
    (s.folder / "blob").write_bytes(b"x" * 20_000)
    last = list(tight.trainer.train(s, str(tiny_bert), "auto", {**TINY, "batch_size": 4}))[-1]
    assert last.kind == "error" and "MIRROR_SESSION_DISK_MB" in last.text
