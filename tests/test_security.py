"""What one anonymous visitor could do to the public server, and why they no longer can.

Each test reproduces a finding of the attack review (issue: three ways to take the server down, and the holes
beside them) against the real thing: the launched app (`python app.py`) for what goes over HTTP, the app's own
handlers for the rest. The engine-side findings (memory budget, `mirror train --out`, numeric settings) are
tested with the engine: tests/test_mirror_memory.py, tests/test_mirror_cli.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import app as mx
from tests.server import ROOT, serve

WORDS = ["cat", "dog", "car", "bus", "red", "blue", "big", "small", "man", "woman", "sun", "moon", "tree", "rock"]
TINY = {"batch_size": 4, "lr": 1e-3, "device": "cpu"}


@pytest.fixture
def app(tmp_path, tiny_bert) -> mx.MirrorApp:
    settings = mx.Settings(work_dir=tmp_path / "sessions", model_roots=(Path(tiny_bert).resolve(),), max_steps=None)
    return mx.MirrorApp(settings)


def loaded_session(app: mx.MirrorApp, words=WORDS) -> mx.Session:
    s = app.session()
    app.load_pasted(s, "\n".join(words))
    return s


# ------------------------------------------------------------------------------------------ 1. /config flood


@pytest.mark.slow
def test_config_requests_cost_the_same_with_models_loaded(tmp_path):
    """Gradio deep-copies its config on every /config (each page load, each Client()); the copy used to walk
    into the loaded models through gr.State's delete callback: 0.7 s and +100 MB per request."""
    import httpx
    from gradio_client import Client

    with serve(tmp_path) as served:

        def flood() -> list[float]:
            def one(_: int) -> float:
                t = time.perf_counter()
                r = httpx.get(served.url + "config", timeout=60)
                assert r.status_code == 200
                return time.perf_counter() - t

            with ThreadPoolExecutor(20) as pool:
                return list(pool.map(one, range(20)))

        idle = flood()  # nothing loaded but what the warm-up loads
        client = Client(served.url, verbose=False)
        client.predict(texts="\n".join(WORDS), settings={"max_steps": 1, "device": "cpu"}, api_name="/train")
        client.predict(queries="cat", k=3, api_name="/search")  # base + tuned bundled models are now in memory
        before = served.rss()
        loaded = flood()
        grown = served.rss() - before
    assert sorted(loaded)[10] < max(0.5, 3 * sorted(idle)[10]), (idle, loaded)
    assert grown < 150 * 2**20, f"RSS grew {grown / 2**20:.0f} MB over 20 /config requests"


def test_the_app_is_never_deep_copied(app):
    import copy

    assert copy.deepcopy(app) is app
    assert copy.deepcopy({"cb": lambda s: app.close_session(s)})["cb"] is not None


# ------------------------------------------------------------------------------------------ 3. runs that never end


def test_the_step_cap_bounds_any_settings(app, tiny_bert):
    capped = mx.MirrorApp(mx.Settings(work_dir=app.settings.work_dir, model_roots=app.settings.model_roots))
    assert capped.settings.max_steps == 1000  # on by default
    capped = mx.MirrorApp(
        mx.Settings(work_dir=app.settings.work_dir, model_roots=app.settings.model_roots, max_steps=5)
    )
    s = loaded_session(capped)
    events = list(capped.train(s, str(tiny_bert), "auto", {**TINY, "epochs": 1000}))
    assert events[-1]["kind"] == "done" and s.run.stats["steps"] == 5
    assert any(e["kind"] == "note" and "caps a run at 5 steps" in e["text"] for e in events)


def test_the_wall_clock_cap_stops_a_run_and_keeps_the_previous_model(app, tiny_bert):
    s = loaded_session(app)
    assert list(app.train(s, str(tiny_bert), "auto", {**TINY, "max_steps": 2}))[-1]["kind"] == "done"
    previous = s.run
    timed = mx.MirrorApp(
        mx.Settings(
            work_dir=app.settings.work_dir, model_roots=app.settings.model_roots, max_steps=None, max_run_seconds=1.5
        )
    )
    t = time.monotonic()
    last = list(timed.train(s, str(tiny_bert), "auto", {**TINY, "epochs": 1000}))[-1]
    assert last["kind"] == "cancelled" and "stops a run after" in last["text"], last
    assert time.monotonic() - t < 30 and s.run is previous and (previous.folder / "model").is_dir()
    assert s.active is None


def test_a_consumer_that_goes_away_stops_its_run(app, tiny_bert, monkeypatch):
    """A closed tab or a disconnected API client stops pulling events: the job notices and stops."""
    monkeypatch.setattr(mx, "ABANDONED_S", 1.0)
    s = loaded_session(app)
    events = app.train(s, str(tiny_bert), "auto", {**TINY, "epochs": 1000})
    assert next(e for e in events if e["kind"] == "step")  # it runs; now nobody asks for the next event
    run = s.active.folder
    deadline = time.monotonic() + 30
    while not (run / mx.STOP_FILE).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (run / mx.STOP_FILE).read_text() == "abandoned"
    last = list(events)[-1]
    assert last["kind"] == "cancelled" and "went away" in last["text"]


def test_an_api_run_is_cancellable_from_its_first_event(app, tiny_bert):
    """The /train endpoint hands its session (and the run id) out with its first event, so /cancel reaches it."""
    fns = {f.name: f.fn for f in mx.build_demo(app).fns.values()}
    stream = fns["api_train"]("\n".join(WORDS), None, "", str(tiny_bert), "auto", {**TINY, "epochs": 1000}, None)
    progress, model_zip, _, session = next(stream)
    assert progress["status"] == "running" and len(progress["run_id"]) == 12 and model_zip is None
    assert session.active is not None and session.active.id == progress["run_id"]
    assert "Stopping" in fns["api_cancel"](session)[0]
    import gradio as gr

    with pytest.raises(gr.Error, match="Cancelled after"):
        list(stream)
    assert session.active is None and session.run is None


@pytest.mark.slow
def test_api_runs_stop_on_cancel_and_on_disconnect(tmp_path, tiny_bert):
    """Against the real server with one training slot: a client's endless run is stopped by its own /cancel, and
    by killing the client outright; each time the slot frees and another client's run goes through."""
    from gradio_client import Client

    env = {"MIRROR_MODEL_ROOTS": str(tiny_bert), "MIRROR_MAX_STEPS": "0", "MIRROR_TRAIN_CONCURRENCY": "1"}
    endless = {**TINY, "epochs": 1000}
    with serve(tmp_path, env) as served:
        client = Client(served.url, verbose=False)
        job = client.submit(texts="\n".join(WORDS), model=str(tiny_bert), settings=endless, api_name="/train")
        wait_for(lambda: any((tmp_path / "sessions").glob("*/runs/*/base_index")), "the run to start")
        assert "Stopping" in client.predict(api_name="/cancel")
        with pytest.raises(Exception, match="Cancelled after"):
            job.result(timeout=60)

        script = (
            "import sys; from gradio_client import Client\n"
            "c = Client(sys.argv[1], verbose=False)\n"
            f"c.predict(texts={chr(10).join(WORDS)!r}, model=sys.argv[2], settings={endless!r}, api_name='/train')\n"
        )
        killed = subprocess.Popen([sys.executable, "-c", script, served.url, str(tiny_bert)], cwd=ROOT)
        wait_for(lambda: any((tmp_path / "sessions").glob("*/runs/*/base_index")), "the second run to start")
        killed.kill()
        killed.wait()
        other = Client(served.url, verbose=False)
        t = time.monotonic()
        summary = other.predict(
            texts="\n".join(WORDS), model=str(tiny_bert), settings=TINY | {"max_steps": 2}, api_name="/train"
        )[0]
        # one training slot: this run could only start once the killed client's endless run had stopped
        assert summary["steps"] == 2 and time.monotonic() - t < 90


def wait_for(condition, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


# ------------------------------------------------------------------------------------------ 4. uploaded model zips


def tuned_model_zip(app: mx.MirrorApp, tiny_bert, tmp_path: Path) -> tuple[mx.Session, Path]:
    s = loaded_session(app)
    assert list(app.train(s, str(tiny_bert), "auto", {**TINY, "max_steps": 2}))[-1]["kind"] == "done"
    return s, s.run.model_zip


def rewrite_zip(src: Path, dst: Path, edit) -> Path:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            out = edit(info.filename, data)
            if out is not None:
                zout.writestr(info.filename, out)
    return dst


@pytest.mark.parametrize("where", ["absolute", "escaping"])
def test_a_module_path_outside_the_zip_is_refused(app, tiny_bert, tmp_path, where):
    """modules.json used to be followed anywhere: an uploaded zip loaded another session's tuned model."""
    victim, zip_path = tuned_model_zip(app, tiny_bert, tmp_path)
    target = str(victim.run.folder / "model") if where == "absolute" else "../../../" + victim.id + "/x"

    def edit(name: str, data: bytes):
        if name.endswith("modules.json"):
            modules = json.loads(data)
            modules[0]["path"] = target
            return json.dumps(modules)
        return data

    evil = rewrite_zip(zip_path, tmp_path / f"{where}.zip", edit)
    attacker = loaded_session(app)
    last = list(app.use_saved_model(attacker, str(evil)))[-1]
    assert last["kind"] == "error" and "outside" in last["text"], last
    assert str(app.settings.work_dir) not in last["text"] and attacker.run is None


def test_a_zip_bomb_under_the_header_limit_is_refused(app, tmp_path):
    small = mx.MirrorApp(mx.Settings(work_dir=app.settings.work_dir, max_model_bytes=10 * 2**20))
    s = loaded_session(small)
    for name, size in (("over.zip", 12 * 2**20), ("padded.zip", 5 * 2**20)):  # over the limit; 1000x inflation
        path = tmp_path / name
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("m/config.json", "{}")
            zf.writestr("m/model.safetensors", b"\0" * size)
        assert path.stat().st_size < 100_000
        last = list(small.use_saved_model(s, str(path)))[-1]
        assert last["kind"] == "error" and ("unpacks to" in last["text"] or "inflates" in last["text"]), last
    assert not any((s.folder / "runs").glob("*/*"))


def test_the_base_model_named_in_a_zip_gets_the_hub_size_check(app, tiny_bert, tmp_path, monkeypatch):
    from mirror import encoder

    _, zip_path = tuned_model_zip(app, tiny_bert, tmp_path)

    def edit(name: str, data: bytes):
        if name.endswith("mirror_config.json"):
            info = json.loads(data)
            info["config"]["model"] = "big-org/huge-model"
            return json.dumps(info)
        return data

    named = rewrite_zip(zip_path, tmp_path / "named.zip", edit)
    asked = []
    monkeypatch.setattr(encoder, "hub_download_bytes", lambda model: asked.append(model) or 50 * 2**30)
    s = loaded_session(app)
    events = list(app.use_saved_model(s, str(named)))
    assert asked == ["big-org/huge-model"], events[-1]
    assert events[-1]["kind"] == "done", events[-1]
    assert any("MIRROR_MAX_HUB_MB" in n for n in events[-1]["notes"])
    assert s.run.base_model == "bundled"  # compared with the bundled model instead; nothing was downloaded


# ------------------------------------------------------------------------------------------ 5. disk


def test_idle_sessions_are_evicted_oldest_first_past_the_disk_budget(tmp_path):
    app = mx.MirrorApp(mx.Settings(work_dir=tmp_path / "w", disk_bytes=3 * 100_000))
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
    app._running.add(folders[5])  # the oldest, but a job runs in it
    recent = folders[0]
    os.utime(recent / ".last_used", None)  # used just now
    removed = app.sweep(force=True)
    assert sorted(removed) == sorted(folders[2:5])  # the oldest idle ones, until the rest fits
    assert all(f.is_dir() for f in (folders[0], folders[1], folders[5]))


def test_a_session_over_its_disk_budget_cannot_start_another_job(app, tiny_bert):
    tight = mx.MirrorApp(
        mx.Settings(work_dir=app.settings.work_dir, model_roots=app.settings.model_roots, session_disk_bytes=10_000)
    )
    s = loaded_session(tight)
    (s.folder / "blob").write_bytes(b"x" * 20_000)
    last = list(tight.train(s, str(tiny_bert), "auto", {**TINY, "max_steps": 2}))[-1]
    assert last["kind"] == "error" and "MIRROR_SESSION_DISK_MB" in last["text"]


def test_the_served_zips_live_in_gradios_upload_folder_by_default(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "g"))
    assert (
        mx.Settings.from_env({"GRADIO_TEMP_DIR": str(tmp_path / "g")}).work_dir
        == (tmp_path / "g" / "mirror-explorer").resolve()
    )


@pytest.mark.slow
def test_uploads_beyond_the_hourly_quota_are_refused(tmp_path):
    import httpx

    with serve(tmp_path, {"MIRROR_UPLOAD_QUOTA_MB": "1"}) as served:
        codes = []
        for i in range(3):
            files = {"files": (f"f{i}.txt", b"word\n" * 80_000)}  # 0.4 MB each
            codes.append(httpx.post(served.url + "gradio_api/upload", files=files, timeout=60).status_code)
        assert codes == [200, 200, 429], codes
        other = httpx.post(
            served.url + "gradio_api/upload",
            files={"files": ("g.txt", b"x\n")},
            headers={"X-Forwarded-For": "10.1.2.3"},
            timeout=60,
        )
        assert other.status_code == 200  # per client


def test_upload_quota_counts_per_client_and_forgets_after_the_window():
    import asyncio

    calls = []

    async def inner(scope, receive, send):
        calls.append(scope["path"])

    quota = mx.UploadQuota(inner, quota=1000, window=0.2)
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    def post(length: int, client: str = "1.1.1.1") -> None:
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/gradio_api/upload",
            "headers": [(b"content-length", str(length).encode())],
            "client": (client, 1),
        }
        asyncio.run(quota(scope, None, send))

    post(600)
    post(600)  # over 1000 for this client
    post(600, "2.2.2.2")
    assert len(calls) == 2 and sent[0]["status"] == 429
    time.sleep(0.3)
    post(600)
    assert len(calls) == 3
