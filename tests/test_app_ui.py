"""The web app (app.py) as Gradio runs it: its handlers called through `build_demo(app).fns` as Gradio calls them
(no server), then the real server (`python app.py`) over HTTP and gradio_client: two clients, server-side limits
when the UI is bypassed, only the files it made are served, /config under load, runs stopped by /cancel and by a
disconnect (the upload quota: tests/test_abuse.py).

What the service does underneath is tested without Gradio in tests/test_explorer_*.py; here only what the UI
adds: messages instead of exceptions, components updated, the API's streams and sessions.

Attack review (what one anonymous visitor could do to the public server, and why they no longer can): each finding
is reproduced against the real thing, the launched app for what goes over HTTP (here), the service for the rest
(tests/test_explorer_*.py, marked "Attack review"); the engine-side findings (memory budget, `mirror train --out`,
numeric settings) with the engine: tests/test_mirror_memory.py, tests/test_mirror_cli.py.
"""

from __future__ import annotations

import dataclasses
import html
import inspect
import json
import os
import re
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import app as mx
from explorer import MirrorApp, Session, Settings
from explorer.tune.inputs import ADVANCED, MAX_QUERIES_TEXT, label
from mirror import MirrorConfig
from mirror.errors import MirrorError
from mirror.names import is_under
from tests.conftest import ENDLESS, ROOT, TINY, WORDS, inject_oom, train, tuned_session
from tests.server import Served, serve
from tests.upload_corpus import BAD_UPLOADS, write
from ui import render


@pytest.fixture(scope="module")
def ui(tmp_path_factory, tiny_bert) -> tuple[MirrorApp, dict]:
    """One app and its Gradio adapters (build_demo), built once for the module."""
    work = tmp_path_factory.mktemp("ui")
    a = MirrorApp(Settings(work_dir=work / "sessions", model_roots=(Path(tiny_bert).resolve(),), general_checks=False))
    return a, {f.name: f for f in mx.build_demo(a).fns.values()}


def quiet(fn, *args):
    """Call a Gradio adapter outside a request: its gr.Warning becomes a Python warning, silenced here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


def ui_train(fns: dict, session: Session, model, **overrides) -> list[dict]:
    """The UI's Launch handler (on_train), called as Gradio does: inputs as a {component: value} dict."""
    data = {}
    for comp in fns["on_train"].inputs:
        name = (comp.elem_id or "").removeprefix("mx-set-")
        value = {**TINY, **overrides, "mx-model": str(model)}.get(name, getattr(comp, "value", None))
        data[comp] = session if type(comp).__name__ == "State" else value
    return quiet(lambda: list(fns["on_train"].fn(data)))


def shown(update: dict, elem_id: str):
    return next(v for c, v in update.items() if getattr(c, "elem_id", None) == elem_id)


def linked(app: MirrorApp, html_value: str) -> Path | None:
    """The file a download's link (ui.handlers.download: `download/<token>/<name>`) serves, through the app's own
    registry; the link holds no path of the server's."""
    (href,) = re.findall(r'href="(download/[^"]+)"', html_value)
    _, token, name = href.split("/")
    assert "/" not in name and "tmp" not in href and str(app.settings.work_dir) not in html_value
    return app.downloads.file(token, name)


def upload(ui, session: Session | None, path: Path) -> tuple[str, Session]:
    """The UI's upload handler, as Gradio calls it: (markdown shown under the upload, session state)."""
    shown, _, session = upload_with_launch(ui, session, path)
    return shown, session


def upload_with_launch(ui, session: Session | None, path: Path) -> tuple[str, dict, Session]:
    """(markdown shown under the upload, the Launch button's update, session state)."""
    _, fns = ui
    defaults = [None] * len(ADVANCED)  # the Advanced fields: not used when loading
    path = path if isinstance(path, str) else str(path)  # a str as given: an upload's path may carry its orig_name
    out = quiet(fns["on_upload"].fn, path, None, [], "auto", "bundled", session, *defaults)
    return out[0], out[-2], out[-1]


# ---------------------------------------------------------------------------------------------- the module, wiring


def test_import_loads_nothing_heavy(tmp_path):
    code = "import sys; from pathlib import Path; import app;"
    code += "app.build_demo(app.MirrorApp(app.Settings(work_dir=Path(sys.argv[1]))));"
    code += (
        "heavy = [m for m in ('torch', 'faiss', 'transformers', 'mirror.train', 'index.store') if m in sys.modules];"
    )
    code += "print(heavy); sys.exit(1 if heavy else 0)"
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "work")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_cli_flags_default_to_gradio_env(monkeypatch):
    monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
    monkeypatch.delenv("GRADIO_SERVER_PORT", raising=False)
    args = mx.parse_args([])
    assert (args.host, args.port) == ("127.0.0.1", 7860)
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    monkeypatch.setenv("GRADIO_SERVER_PORT", "8123")
    assert (mx.parse_args([]).host, mx.parse_args([]).port) == ("0.0.0.0", 8123)
    assert mx.parse_args(["--port", "9000", "--host", "localhost"]).port == 9000


def test_demo_wires_named_api_endpoints_and_every_config_field(app):
    demo = mx.build_demo(app)
    info = demo.get_api_info()
    explore = {"/export", "/moved", "/neighbours", "/health", "/push", "/map"}
    runs = {"/train", "/search", "/cancel", "/serve_first"}
    assert set(info["named_endpoints"]) == runs | explore  # UI events are private
    params = {p["parameter_name"]: p for p in info["named_endpoints"]["/train"]["parameters"]}
    assert list(params) == ["texts", "file", "column", "model", "mode", "settings", "pair_column"]
    assert params["pair_column"]["parameter_default"] == ""  # issue 50: no partner unless asked
    assert params["model"]["parameter_default"] == "bundled"
    fields = {f.name for f in dataclasses.fields(MirrorConfig)} - {"mode", "model", "pairs"}  # pairs: the file says
    assert set(ADVANCED) == fields  # the Advanced accordion shows every engine setting
    by_fn = {fn.name: fn for fn in demo.fns.values()}
    # runs, blends and model uploads wait in the app's own training queue (one place per visitor), not Gradio's
    jobs = [by_fn[name] for name in ("on_train", "api_train", "on_blend", "on_remedy", "on_saved_zip")]
    assert {(fn.concurrency_id, fn.concurrency_limit) for fn in jobs} == {("jobs", None)}
    assert demo._queue.max_size == app.settings.queue_size  # Gradio's queue is bounded
    assert by_fn["on_search"].concurrency_limit is None and by_fn["api_search"].concurrency_limit is None


def test_every_text_input_but_the_strings_to_tune_on_has_a_length(app):
    """Issue 58: the server refuses a text longer than its field's max_length before any handler (ui.handlers
    .strict_inputs); a field without one took megabytes to its handler. Only the strings to tune on (the paste box,
    /train's texts: MIRROR_MAX_UPLOAD_MB) are long."""
    import gradio as gr

    demo = mx.build_demo(app)
    inputs = {id(c): c for fn in demo.fns.values() for c in fn.inputs if isinstance(c, gr.Textbox)}.values()
    long = sorted(c.elem_id or c.label for c in inputs if not c.max_length)
    assert long == ["mx-paste", "texts"], long
    queries = {c.elem_id or c.label: c.max_length for c in inputs if "quer" in (c.elem_id or c.label or "").lower()}
    assert set(queries.values()) == {MAX_QUERIES_TEXT} and len(queries) >= 2, queries


def test_gradios_queue_polls_gently_when_idle(app, monkeypatch):
    """Gradio's queue loop looks for work every 1 ms (~0.1 of a core with nothing to do, per server): the app's looks
    every 20 ms. Counted on the loop itself (it asks the queue's length once a turn) over 0.4 s of an empty queue:
    ~20 turns, where Gradio's default makes hundreds. And the monitoring summary is not redone after every event."""
    import asyncio

    from gradio import queueing

    monkeypatch.delenv("GRADIO_ANALYTICS_CACHE_FREQUENCY", raising=False)
    queue = mx.build_demo(app)._queue
    turns = []
    monkeypatch.setattr(queueing.Queue, "__len__", lambda self: turns.append(1) or 0)

    async def idle_for(seconds: float) -> None:
        loop = asyncio.ensure_future(queue.start_processing())
        await asyncio.sleep(seconds)
        queue.stopped = True
        await loop

    asyncio.run(idle_for(0.4))
    assert 0 < len(turns) <= 40, len(turns)
    assert queue.progress_update_sleep_when_free >= 0.05 and queue.ANAYLTICS_CACHE_FREQUENCY == 100
    monkeypatch.setenv("GRADIO_ANALYTICS_CACHE_FREQUENCY", "7")  # Gradio's own setting wins when it is set
    assert mx.build_demo(app)._queue.ANAYLTICS_CACHE_FREQUENCY == 7


def test_browser_test_skips_without_chromium_but_fails_on_ci(monkeypatch):
    import tests.test_browser as tb

    monkeypatch.setattr(tb, "CHROMIUM_PATHS", ("/nonexistent/chromium",))
    monkeypatch.setattr(tb, "ON_CI", False)
    with pytest.raises(pytest.skip.Exception, match="no chromium executable"):
        tb.chromium_or_skip()
    monkeypatch.setattr(tb, "ON_CI", True)
    with pytest.raises(pytest.fail.Exception, match="required on CI"):
        tb.chromium_or_skip()


# ---------------------------------------------------------------------------------------------- the page's handlers


@pytest.mark.checks
def test_gradio_adapters_stream_the_run_and_render_search(app, tiny_bert):
    """The Gradio wrappers in build_demo, called as Gradio would (inputs as a {component: value} dict)."""
    demo = mx.build_demo(app)
    fns = {f.name: f for f in demo.fns.values()}
    session = app.session()
    app.loader.load_pasted(session, "\n".join(WORDS))
    data = {}
    for comp in fns["on_train"].inputs:
        name = (comp.elem_id or "").removeprefix("mx-set-")
        value = {**TINY, "max_steps": 3, "mx-model": str(tiny_bert)}.get(name, getattr(comp, "value", None))
        data[comp] = session if comp.__class__.__name__ == "State" else value
        if comp.__class__.__name__ == "BrowserState":  # what Launch's first handler stores: the run it follows
            data[comp] = {"runs": [], "active": "a" * 32, "served": None}
    updates = list(fns["on_train"].fn(data))
    named = [{getattr(c, "elem_id", None) or type(c).__name__: v for c, v in u.items()} for u in updates]
    # served before its general checks: every panel switched then, the downloads and the checks' table at the end
    (at,) = [i for i, u in enumerate(named) if "Search and Explore use it now" in u.get("mx-status", "")]
    assert not named[at]["mx-model-zip"]["visible"] and "running now" in named[at]["mx-forgetting"]
    assert "Downloads follow with the general checks." in named[at]["mx-result"]
    # served, still followed: a reload during the checks reattaches to the run (and gets its end), until Done
    assert named[at]["BrowserState"]["active"] == "a" * 32 and named[-1]["BrowserState"]["active"] is None
    assert named[at]["BrowserState"]["served"] == named[-1]["BrowserState"]["served"] == session.run.folder.name
    assert named[at]["mx-cancel"]["interactive"] is False and "mx-search-results" not in named[-1]
    assert all("Search and Explore use it now" in u["mx-status"] for u in named[at:-1] if "mx-status" in u)
    last = {k: v for u in named for k, v in u.items()}  # what the page shows at the end
    assert "Tuned and indexed" in last["mx-status"] and "Done: your tuned model is served" in last["mx-result"]
    assert "searchable after" in last["mx-status"] and "| SimLex-999 |" in last["mx-forgetting"]
    assert "Downloads below." in last["mx-result"]
    assert last["mx-model-zip"]["visible"] and re.search(
        r'href="download/[\w-]+/mirror-tiny_bert\w*-[0-9a-f]{12}-model\.zip"', last["mx-model-zip"]["value"]
    )
    assert linked(app, last["mx-model-zip"]["value"]) == session.run.model_zip
    curve = last["mx-loss"]["value"]  # each step's loss and its moving average, steps 1..3 as integers
    assert last["mx-loss"]["visible"] and len(curve) == 6 and set(curve["series"]) == {"each step", "smoothed"}
    assert list(curve["step"][:3]) == [1, 2, 3]
    assert last["mx-launch"]["interactive"] is True  # Launch is enabled again
    assert "A new run is served" in last["mx-search-results"]  # no hits of an earlier run left on the Search tab
    # the Explore tab's empty map is worded for a served run (not "tune a model" while one is served)
    assert last["mx-twinmap"] == {"texts": [], "note": "No map yet: press Draw the maps to lay out this run's strings."}
    (twinmap,) = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "mx-twinmap"]
    assert "tune a model" in twinmap.props["placeholder"]  # before any run is served
    page, _ = fns["on_search"].fn("cat\ndog", 5, "main", session)
    assert page.count('class="mx-query"') == 2 and "Tuned (mirror)" in page
    # a bad query is a message, not an exception
    with pytest.warns(UserWarning, match="type a query"):  # gr.Warning, outside a request
        page, _ = fns["on_search"].fn("  ", 5, "main", session)
    assert "type a query" in page


def test_a_run_is_redrawn_once_a_second_and_a_hidden_progress_is_never_sent(app, monkeypatch):
    """Every streamed update costs the page's Gradio frontend ~0.1 s of a small machine's core: a run's steps (ten a
    second here) are drawn once a second, and Launch and a reattached page, which hide Gradio's progress (the status
    line is the bar), send none; a blend, which shows it on its own line, does."""
    from explorer.runs import follow
    from mirror.job import Step
    from ui import runs

    demo = mx.build_demo(app)
    fns = {f.name: f for f in demo.fns.values()}
    for name in ("on_train", "on_load"):
        assert fns[name].show_progress == "hidden" and not fns[name].tracks_progress, name
    assert fns["on_blend"].tracks_progress and fns["on_blend"].show_progress_on

    now = [1000.0]

    def steps():  # 3 s of steps, ten a second
        for i in range(30):
            now[0] = 1000.0 + i / 10
            yield Step(step=i + 1, total=30, loss=1.0, batch=8)

    told = []
    for progress in (None, lambda *a, **k: told.append(a)):
        now[0], view = 1000.0, runs.TrainView(progress)
        drawn = [(view.show(p), p.step.step)[1] for p in follow.progress(steps(), clock=lambda: now[0])]
        assert drawn == [11, 21]  # the page's one loop (explorer.runs.follow): a view a second
    assert len(told) == 2  # each view reaches a progress that is shown (a blend's line); a hidden one gets none


def test_upload_adapters_fill_the_column_picker_and_reuse_a_saved_zip(app, tuned, tmp_path):
    demo = mx.build_demo(app)
    fns = {f.name: f for f in demo.fns.values()}
    defaults = [c.value for c in fns["on_upload"].inputs[6:]]  # the Advanced fields, as the page holds them
    csv = tmp_path / "terms.csv"
    csv.write_text("id,term\n1,cat\n2,dog\n3,kitten\n")
    out = fns["on_upload"].fn(str(csv), None, [], "auto", "bundled", None, *defaults)
    summary, column, session = out[0], out[1], out[-1]
    assert "3 strings" in summary and "words preset" in summary
    assert column["visible"] and [c[1] for c in column["choices"]] == ["", "id", "term"]
    assert column["value"] == "term" and session.texts == ["cat", "dog", "kitten"]  # the column read is the one shown
    assert out[2]["visible"] and out[2]["value"] == ""  # paired with: (none), the other column being numbers
    out = fns["on_column"].fn(str(csv), "id", "", [], "auto", "bundled", session, *defaults)
    assert "3 strings" in out[0] and session.texts == ["1", "2", "3"]
    with pytest.warns(UserWarning, match="no column 'nope'"):
        out = fns["on_column"].fn(str(csv), "nope", "", [], "auto", "bundled", session, *defaults)
    assert "Error" in out[0] and session.texts == ["1", "2", "3"]  # a failed load keeps what was loaded...
    assert "Still loaded: **3 strings** from `terms.csv`" in out[0]  # ...and says so

    # the partner picker: a pick loads the pairs; a refused one (an empty column) keeps them, and the picker shows them
    pairs = tmp_path / "glossary.csv"
    pairs.write_text("term,definition,empty\n" + "".join(f"{w},the word {w} defined,\n" for w in WORDS[:6]))
    session = fns["on_upload"].fn(str(pairs), None, [], "auto", "bundled", None, *defaults)[-1]
    assert session.pairing.columns() == ("definition", "term")
    out = fns["on_pair"].fn(str(pairs), "definition", "", [], "auto", "bundled", session, *defaults)
    assert session.pairing is None and out[-1]["value"] == ""  # (none): the strings alone
    out = fns["on_pair"].fn(str(pairs), "definition", "term", [], "auto", "bundled", session, *defaults)
    assert session.pairing.columns() == ("definition", "term") and out[-1]["value"] == "term"
    with pytest.warns(UserWarning, match="the column 'empty' is empty"):
        out = fns["on_pair"].fn(str(pairs), "definition", "empty", [], "auto", "bundled", session, *defaults)
    assert "Still loaded: **6 strings** from `glossary.csv`, each with its `term`" in out[0]
    assert session.pairing.columns() == ("definition", "term") and out[-1]["value"] == "term"
    assert [t[1] for t in fns["on_pair"].targets] == ["select"]  # one event a pick (`input` fired twice)

    # a zip downloaded from an earlier run, uploaded in a session that has strings loaded
    app.loader.load_pasted(session, "\n".join(WORDS))
    updates = list(fns["on_saved_zip"].fn(str(tuned.run.model_zip), None, session))
    out = updates[-1]
    shown = {getattr(c, "elem_id", None) or type(c).__name__: v for c, v in out.items()}
    # Launch held while the zip loads and its checks run, armed again at its end (the session has strings)
    launch = [u[c]["interactive"] for u in updates for c in u if getattr(c, "elem_id", None) == "mx-launch"]
    assert launch == [False, True], launch
    result_md, model_file = shown["mx-result"], shown["mx-model-zip"]
    assert "Served: the model you uploaded" in result_md and model_file["visible"]
    assert any("Serving" in str(v) for v in out.values())  # the note under the upload
    assert shown["BrowserState"]["runs"] == [session.run.folder.name]  # it joins the browser's runs
    assert session.run is not None and session.run is not tuned.run


def test_a_load_keeps_the_settings_changed_by_hand_and_says_so(app, tmp_path):
    """Mode Auto sets the preset's values on each load, except the settings this page's user changed by hand."""
    demo = mx.build_demo(app)
    fns = {f.name: f for f in demo.fns.values()}
    names = [getattr(c, "elem_id", "") for c in fns["on_paste"].inputs[5:]]
    vals = [c.value for c in fns["on_paste"].inputs[5:]]
    at = names.index("mx-set-batch_size")
    vals[at] = 37
    words = "\n".join(WORDS)
    out = fns["on_paste"].fn(words, ["batch_size"], "auto", "bundled", None, *vals)
    assert out[1 + at] == {"__type__": "update"}  # left as the user set it
    assert f"Kept your own settings: {label('batch_size').split(' (')[0]};" in out[0], out[0]
    others = [o for i, o in enumerate(out[1 : 1 + len(vals)]) if i != at]
    assert all("value" in o for o in others)  # the rest follow the preset
    out = fns["on_paste"].fn(words, [], "auto", "bundled", None, *vals)
    assert out[1 + at]["value"] != 37 and "Kept your own" not in out[0]  # nobody touched it: the preset's


def test_every_file_reaches_the_loader_and_is_reported_by_the_name_the_user_gave(ui, tmp_path):
    """A newcomer pass: a .bin was refused by the upload box's own file-type filter (a toast that faded, the page
    unchanged); a file named nul.csv was reported as "_nul.csv" (Gradio's cache prefixes Windows device names)."""
    from gradio.data_classes import FileData

    from ui.uploads import NamedFile

    app, fns = ui
    inputs = [b for b in fns["on_upload"].inputs + fns["on_other"].inputs if isinstance(b, NamedFile)]
    assert {b.elem_id for b in inputs} == {"mx-upload", "mx-other"} and not any(b.file_types for b in inputs)
    config = inputs[0].get_config()  # what the page draws: gr.File's front end, with the label and id given
    assert inputs[0].get_block_name() == "file" and config["elem_id"] and config["label"].startswith("A .txt")
    session = app.session()
    upload_with_launch(ui, session, write(tmp_path, "good.txt", b"cat\ndog\ncar\n"))
    shown, launch, _ = upload_with_launch(ui, session, write(tmp_path, "weights.bin", b"\x00\x01" * 50))
    assert shown.startswith(
        "> **Error:** weights.bin: unsupported file type '.bin'; use one of .txt, .csv, .tsv, .jsonl"
    )
    assert "Still loaded: **3 strings** from `good.txt`" in shown and launch["interactive"] is True

    (tmp_path / "cache").mkdir()
    cached = write(tmp_path / "cache", "_nul.csv", b"text\ncat\x00\x00\x00\x00dog\n" * 40)  # as Gradio stores nul.csv
    path = NamedFile(type="filepath").preprocess(FileData(path=str(cached), orig_name="nul.csv"))
    assert path == str(cached) and path.orig_name == "nul.csv"
    shown = upload_with_launch(ui, session, path)[0]
    assert "> **Error:** nul.csv: looks like a binary file" in shown and "_nul.csv" not in shown
    # a name the cache changed otherwise (characters a file name cannot hold, dropped) is shown as stored
    odd = NamedFile(type="filepath").preprocess(FileData(path=str(cached), orig_name="a<b>.csv"))
    assert "_nul.csv: looks like a binary file" in upload_with_launch(ui, session, odd)[0]


def test_clearing_the_upload_says_its_strings_stay_loaded_and_a_paste_after_it_is_left_alone(app, tmp_path):
    """Issue 60's newcomers: after the upload's ✕ the summary still said "3 strings loaded from terms.csv", a file
    the page no longer showed, and Launch tuned it. The strings stay loaded (a file is replaced by clearing it first,
    and a bad file after a good one keeps the good one: issue 28), and the page now says so where it said the file was
    loaded; strings pasted after the upload are not the file's: its summary stays."""
    demo = mx.build_demo(app)
    fns = {f.name: f for f in demo.fns.values()}
    upload = fns["on_upload"]
    defaults = [c.value for c in upload.inputs[6:]]
    csv = tmp_path / "terms.csv"
    csv.write_text("term\ncat\ndog\nkitten\n")
    session = upload.fn(str(csv), None, [], "auto", "bundled", None, *defaults)[-1]
    out = upload.fn(None, None, [], "auto", "bundled", session, *defaults)
    said = {getattr(c, "elem_id", None): v for c, v in zip(upload.outputs, out, strict=True)}
    assert (
        "The file was removed from the box; the **3 strings** from `terms.csv` stay loaded and Launch tunes them"
        in said["mx-input"]
    )
    assert session.texts == ["cat", "dog", "kitten"] and said["mx-launch"] == {"__type__": "update"}  # still armed
    upload.fn(str(csv), None, [], "auto", "bundled", session, *defaults)
    paste = fns["on_paste"]
    pasted = paste.fn("ant\nbee\nwasp", [], "auto", "bundled", session, *defaults)
    # the paste empties the upload box and hides its column pickers: picking a column there loaded the file again
    said = dict(zip(paste.outputs, pasted, strict=True))
    assert said[next(c for c in paste.outputs if getattr(c, "elem_id", None) == "mx-upload")]["value"] is None
    hidden = [v for c, v in said.items() if getattr(c, "elem_id", None) in ("mx-column", "mx-pair-column")]
    assert len(hidden) == 2 and all(v["visible"] is False for v in hidden)
    with pytest.warns(UserWarning, match="paste some strings first"):  # the refusal's toast
        refused = dict(zip(paste.outputs, paste.fn("", [], "auto", "bundled", session, *defaults), strict=True))
    assert all(refused[c] == {"__type__": "update"} for c in paste.outputs[-3:])  # refused: the box stays as it is
    out = upload.fn(None, None, [], "auto", "bundled", session, *defaults)
    assert session.texts == ["ant", "bee", "wasp"] and out[0] == {"__type__": "update"}  # the paste's summary stays


# The upload corpus (tests/upload_corpus.py) through the page's upload handler: a message, no traceback, and the
# strings loaded before stay loaded, Launch enabled, with a line saying which strings Launch would tune (issue 15
# unloaded them and disabled Launch; issue 28 found that a newcomer lost a good file to a bad one). (Through the
# service: tests/test_explorer_inputs.py; the CLI: tests/test_mirror_bad_inputs.py.)
@pytest.mark.parametrize("case", list(BAD_UPLOADS))
def test_bad_upload_is_a_clear_message_in_the_ui_and_keeps_what_was_loaded(ui, tmp_path, case):
    app, _ = ui
    name, content, says, _ = BAD_UPLOADS[case]
    session = app.session()
    good = write(tmp_path, "good.txt", b"cat\ndog\ncar\n")
    assert upload_with_launch(ui, session, good)[1]["interactive"] is True
    shown, launch, same = upload_with_launch(ui, session, write(tmp_path, name, content))
    assert same is session and shown.startswith("> **Error:** ")
    assert says in shown and name in shown, shown
    assert "something went wrong" not in shown and "Traceback" not in shown  # a known problem, not a bug
    assert session.texts == ["cat", "dog", "car"] and launch["interactive"] is True
    assert "Still loaded: **3 strings** from `good.txt`; Launch tunes those." in shown


def test_draw_the_maps_with_no_run_is_a_message_with_one_value_per_output(ui):
    """The error path of a handler returns exactly its outputs (Gradio warned and dropped the extra one before)."""
    app, fns = ui
    draw = fns["on_map"]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = draw.fn(500, "", app.session())
    assert len(out) == len(draw.outputs)
    assert "tune a model" in out[0].lower() and any("tune a model" in str(w.message).lower() for w in seen)


def test_blend_with_no_run_says_so_on_its_own_line_not_in_tab_one(ui):
    app, fns = ui
    blend = fns["on_blend"]
    updates = quiet(lambda: list(blend.fn(0.5, {"runs": []}, app.session())))
    ids = {getattr(c, "elem_id", None) for u in updates for c in u}
    assert "mx-status" not in ids  # tab ①'s run status keeps what it said
    assert len(updates) == 1 and len(updates[0]) == 1  # one line: the blend's own, under its button
    assert "Nothing to blend yet" in next(iter(updates[0].values()))


@pytest.mark.checks  # served before its checks, then done: the path a server with checks on takes
def test_a_served_blend_reads_as_a_blend_in_tab_one_and_on_the_explore_tab(app, tiny_bert, tmp_path):
    """After a blend, tab ① said "Done: your tuned model is served" and "Tuned and indexed in <the parent's seconds>",
    the Explore tab's health called the blend "tuned" and tab ③ headed its moved pairs "with tuning": each now names
    the blend."""
    fns = {f.name: f for f in mx.build_demo(app).fns.values()}
    session = tuned_session(app, tiny_bert)
    parent = session.run.folder.name
    updates = quiet(lambda: list(fns["on_blend"].fn(0.5, {"runs": [parent]}, session)))
    last = {getattr(c, "elem_id", None) or type(c).__name__: v for u in updates for c, v in u.items()}
    blend = session.run.folder.name
    assert blend != parent and "Blended and indexed in" in last["mx-status"]
    assert last["mx-result"].startswith(f"### Served: a blend (run `{blend[:8]}`), α = 0.5 of run `{parent[:8]}`")
    assert "Done: your tuned model" not in last["mx-result"]
    assert "blend α=0.5" in last["mx-explore-caption"]
    health = fns["on_served"].fn(session)[0]  # what the caption's change draws next
    assert "| base | blend α=0.5 |" in health and "The blend " in health and "Tuning" not in health
    # tab ③'s heading over the moved pairs follows the served run, and each evaluation of it
    assert last["mx-eval-moved-head"].startswith(
        f"**Pairs whose rank moved most with the blend (α = 0.5 of run `{parent[:8]}`)"
    )
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("cat dog 9\ncar bus 7\ncat car 2\ndog bus 1\n")
    shown = quiet(fns["on_eval"].fn, [], str(pairs), session)
    assert any(
        isinstance(v, str) and v.startswith("**Pairs whose rank moved most with the blend (α = 0.5") for v in shown
    )


def test_a_blend_never_sends_the_loss_curve_a_frame_without_rows(app, tiny_bert):
    """Pressing Blend on the Explore tab printed Vega-Lite's "Infinite extent for field "step"" (and "loss") warnings
    in the browser console: the blend's redraws of tab ①'s loss curve sent it a frame without rows (a blend has no
    steps of its own; None fares no better: Gradio hands the drawn chart no rows). Until it has two points the curve
    is hidden with its value left alone; at the end, the parent's curve."""
    fns = {f.name: f for f in mx.build_demo(app).fns.values()}
    session = tuned_session(app, tiny_bert)
    parent = session.run
    updates = quiet(lambda: list(fns["on_blend"].fn(0.5, {"runs": [parent.folder.name]}, session)))
    curves = [v for u in updates for c, v in u.items() if getattr(c, "elem_id", None) == "mx-loss"]
    assert len(curves) >= 2  # redrawn while the blend works (the first event is always drawn), then at its end
    assert all("value" not in c or (c["value"] is not None and len(c["value"]) > 0) for c in curves), curves
    assert curves[0] == {"__type__": "update", "visible": False}
    assert curves[-1]["visible"] and len(curves[-1]["value"]) == 2 * len(parent.losses)  # each step and smoothed


def test_a_reused_model_zip_says_it_was_loaded_now_and_trained_earlier(app, tiny_bert):
    """A newcomer pass: a model zip reused under "Reuse a model you tuned here before" left tab ① saying "Tuned and
    indexed in <the earlier run's seconds> s" over "Done: your tuned model is served", as if it had been trained now:
    the status gives this visit's own seconds (loading and indexing) and names the training as done earlier."""
    fns = {f.name: f for f in mx.build_demo(app).fns.values()}
    trained = tuned_session(app, tiny_bert).run
    session = app.session()
    app.loader.load_pasted(session, "\n".join(WORDS))
    out = quiet(lambda *a: list(fns["on_saved_zip"].fn(*a))[-1], str(trained.model_zip), None, session)
    shown = {getattr(c, "elem_id", None) or type(c).__name__: v for c, v in out.items()}
    run = session.run
    assert run is not None and run is not trained
    took, earlier = run.stats["load_seconds"], trained.stats["seconds"]
    said = f"Loaded and indexed in {render.fmt_seconds(took)}; trained earlier in {render.fmt_seconds(earlier)}."
    assert said in shown["mx-status"]
    assert "Tuned and indexed" not in shown["mx-status"]
    zip_name = trained.model_zip.name
    assert shown["mx-result"].startswith(
        f"### Served: the model you uploaded (`{zip_name}`, run `{run.folder.name[:8]}`)"
    )
    assert "Trained earlier, not now" in shown["mx-result"] and "Done: your tuned model" not in shown["mx-result"]
    assert (
        f"| Loss (raw InfoNCE) | {trained.stats['final_loss']:.4f} (last step; first step: " in shown["mx-result"]
    )  # not "n/a"


def test_what_moved_says_when_a_string_has_more_neighbours_than_its_cell_shows():
    """The table showed the first 5 of up to 10 gained or lost neighbours with no sign that more exist."""
    from ui.explore import moved_frame

    rows = [{"text": "cat", "moved": 0.7, "gained": [f"g{i}" for i in range(7)], "lost": ["l0", "l1"]}]
    frame = moved_frame(rows)
    assert frame.loc[0, "gained"] == "g0 · g1 · g2 · g3 · g4 · … +2 more"
    assert frame.loc[0, "lost"] == "l0 · l1"  # all shown: nothing added
    # a sentence's neighbours are sentences (with commas): each cut to a line's worth, the CSV keeps them whole
    long = "A programming language, designed in 1972, whose compiler ran on every machine of its day and most since"
    cell = moved_frame([{"text": "C", "moved": 0.5, "gained": [long, "B"], "lost": []}]).loc[0, "gained"]
    assert cell == long[:59].rstrip() + "… · B" and len(cell) < 70


def test_a_bad_setting_in_the_ui_ends_the_run_with_a_message(ui, tiny_bert):
    app, fns = ui
    session = app.session()
    app.loader.load_pasted(session, "\n".join(WORDS))
    last = ui_train(fns, session, tiny_bert, epochs=0)[-1]
    status = shown(last, "mx-status")
    assert "mx-status-error" in status and "epochs must be &gt;= 1" in status
    assert shown(last, "mx-launch")["interactive"] is True  # the Launch button comes back
    assert session.run is None and app.registry.of(session) is None


def test_the_search_adapter_shows_bad_queries_as_a_message(ui, tiny_bert):
    app, fns = ui
    s = tuned_session(app, tiny_bert)
    for q in ["", "x" * 100_000]:
        page, same = quiet(fns["on_search"].fn, q, 5, "main", s)
        # an HTML box (the results are a gr.HTML), not raw Markdown
        assert page.startswith('<div class="mx-status-error"') and same is s and "something went wrong" not in page


def test_out_of_memory_at_every_batch_size_ends_with_a_message_not_a_hang(ui, tiny_bert, monkeypatch):
    app, fns = ui
    inject_oom(monkeypatch, first_n=10**9)
    session = app.session()
    app.loader.load_pasted(session, "\n".join(WORDS))
    result: list = []
    worker = threading.Thread(target=lambda: result.extend(ui_train(fns, session, tiny_bert)))
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the UI handler hung"
    status = shown(result[-1], "mx-status")
    assert "mx-status-error" in status and "out of memory even at batch size 2" in status, status
    assert app.registry.of(session) is None and session.run is None
    assert app.train_queue.free == app.settings.train_concurrency  # the slot was given back


def test_many_short_sessions_leave_only_the_live_ones_on_disk(tmp_path, tiny_bert, monkeypatch, request):
    """50 sessions through Gradio's own session-state expiry (gr.State time_to_live -> close_session), 20 orphaned
    folders for the periodic sweep, and a session closed while its run goes on: afterwards the work dir holds
    exactly the live sessions.

    On a clock of the test's own (Gradio's state expiry, the sweep's now and each session's last use): the TTL passes
    when the test says so, never because a loaded machine was slow to set up (sized from measured times and real
    sleeps, it failed at random with the setup past the TTL under a load of 13)."""
    import datetime as real_datetime
    from types import SimpleNamespace

    import gradio as gr
    import gradio.state_holder
    from gradio.state_holder import StateHolder

    import explorer.resources.sessions as sessions_mod

    now = [time.time()]

    class Clock(real_datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return real_datetime.datetime.fromtimestamp(now[0], tz)

    def touch(self) -> None:  # a session's last use, on the test's clock
        self.folder.mkdir(parents=True, exist_ok=True)
        marker = self.folder / ".last_used"
        marker.touch()
        os.utime(marker, (now[0], now[0]))

    monkeypatch.setattr(gradio.state_holder, "datetime", SimpleNamespace(datetime=Clock))
    monkeypatch.setattr(sessions_mod, "time", SimpleNamespace(time=lambda: now[0]))
    monkeypatch.setattr(sessions_mod.Session, "touch", touch)
    ttl = 600.0
    app = MirrorApp(
        Settings(
            work_dir=tmp_path / "w",
            session_ttl=ttl,
            model_roots=(Path(tiny_bert),),
            max_steps=None,
            general_checks=False,
        )
    )
    demo = mx.build_demo(app)
    state = next(b for b in demo.blocks.values() if isinstance(b, gr.State))
    assert state.time_to_live == ttl and not inspect.ismethod(state.delete_callback)  # not deep-copied with /config
    holder = StateHolder()
    holder.set_blocks(demo)
    sessions = []
    for i in range(50):
        s = app.session()
        app.loader.load_pasted(s, "\n".join(WORDS))
        if i in (0, 40):  # one expired and one live session with a tuned model, zips and indexes on disk
            assert train(app, s, tiny_bert)[-1].kind == "done"
        holder[f"client{i}"][state._id] = s
        sessions.append(s)
    monkeypatch.setattr("explorer.runs.jobs.ABANDONED_S", 600.0)  # its page stays open: only Gradio's expiry acts
    busy = sessions[1]  # closed while a run goes on: cleaned up when the run ends
    # a run goes on in its own thread, whether its page pulls events or not: this one runs until cancelled below. On
    # the 14 WORDS its 1000 epochs were ~4,000 tiny steps, which could end before the sleeps below (sized by the TTL)
    # did, and the session went with its run (seen failing at random); 196 strings make it ~49,000 steps
    app.loader.load_pasted(busy, "\n".join(f"{a} {b}" for a in WORDS for b in WORDS))
    # and it waits 50 ms a step: it goes on through the sleeps below without spinning a core the other tests need
    import mirror.train

    step = mirror.train._train_step
    monkeypatch.setattr(mirror.train, "_train_step", lambda *a, **k: (time.sleep(0.05), step(*a, **k))[1])
    running = app.trainer.train(
        busy, str(tiny_bert), "auto", {**TINY, "batch_size": 4, "max_steps": None, "epochs": 1000}
    )
    # should this test fail below, its run must not go on in this process (a later test's injected fault would hit
    # it instead): cancelled, and waited for to its last event
    request.addfinalizer(lambda: (app.trainer.cancel(busy), list(running)))
    assert next(e for e in running if e.kind == "step")
    orphans = [app.settings.work_dir / f"orphan{i}" for i in range(20)]  # e.g. evicted from Gradio's state
    for folder in orphans:
        (folder / "runs").mkdir(parents=True)
        (folder / "runs" / "blob").write_bytes(b"x" * 10_000)
    assert len(session_folders(app)) == 70 and du(app.settings.work_dir) > 200_000

    now[0] += 0.7 * ttl
    live = sessions[40:]
    for i, s in enumerate(live, 40):  # these clients keep using the app
        holder[f"client{i}"][state._id] = app.session(s)
    now[0] += 0.5 * ttl
    holder.delete_all_expired_state()  # what Gradio runs every second
    old = now[0] - 10 * ttl
    for folder in orphans:
        os.utime(folder, (old, old))
    removed = app.sweep(force=True)
    assert sorted(removed) == sorted(orphans)
    assert (
        busy.folder.is_dir() and app.settings.work_dir / busy.folder.name in app.registry.session_folders()
    )  # not while it runs
    app.trainer.cancel(busy)
    assert list(running)[-1].kind == "cancelled"  # the run ends ...
    assert not busy.folder.exists()  # ... and its closed session goes with it
    assert sorted(p.name for p in session_folders(app)) == sorted(s.folder.name for s in live)
    assert sum(du(f) for f in session_folders(app)) == sum(du(s.folder) for s in live)
    # the runs they made are durable (kept by id for their links, removed by MIRROR_RUN_TTL and the disk budget);
    # in memory: only runs that still exist, within the LRU's count
    assert all(Path(key).is_dir() for key in app.models.runs) and len(app.models.runs) <= app.settings.loaded_runs


def session_folders(app) -> list[Path]:
    """The work folder's session folders (not the run store, not the key file)."""
    return [p for p in app.settings.work_dir.iterdir() if p.is_dir() and p != app.runs.root]


def du(folder: Path) -> int:
    """Bytes under `folder`; files that a running job renames or removes during the walk are skipped."""
    total = 0
    for root, _, files in os.walk(folder):  # os.walk skips folders that vanish; Path.rglob raises
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total


def test_downloads_are_files_of_the_sessions_own_run(ui, tiny_bert):  # was ..._inside_the_session_folder
    app, fns = ui
    session = app.session()
    app.loader.load_pasted(session, "\n".join(WORDS))
    last = ui_train(fns, session, tiny_bert)[-1]
    files = [linked(app, shown(last, "mx-model-zip")["value"]), linked(app, shown(last, "mx-index-zip")["value"])]
    for f in files:  # the run's own files, in its folder of the run store
        assert is_under(Path(f), app.runs.root / session.run_ids[-1]) and Path(f).is_file()
    fns_api = fns["api_train"].fn
    summary, model_zip, index_zip, same = list(
        fns_api("\n".join(WORDS), None, "", str(tiny_bert), "auto", TINY, "", session)
    )[-1]
    assert same is session
    for answered, own in ((model_zip, session.run.model_zip), (index_zip, session.run.index_zip)):
        # the API answers the run's files as Gradio's cache holds them (ui.web.served: no path of the work folder)
        assert not is_under(Path(answered), app.settings.work_dir) and Path(answered).read_bytes() == own.read_bytes()
    assert Path(files[0]).exists()  # the previous run stays downloadable: its link still opens it


# ---------------------------------------------------------------------------------------------- the API's handlers


def test_out_of_memory_note_reaches_the_api_summary(app, tiny_bert, monkeypatch):
    """The /train API reports the batch halved after an out-of-memory error in its summary's notes. (Split from
    tests/test_explorer_service.py::test_out_of_memory_halves_the_batch_and_says_so, which checks the run.)"""
    calls = inject_oom(monkeypatch, first_n=1)
    fns = {f.name: f.fn for f in mx.build_demo(app).fns.values()}
    summary, model_zip, _, _ = list(fns["api_train"]("\n".join(WORDS), None, "", str(tiny_bert), "auto", TINY, None))[
        -1
    ]
    assert calls["oom"] == 1 and Path(model_zip).is_file()
    assert "out of memory at step 1: continued with batch size 4" in summary["notes"]


def test_an_api_clients_failed_first_call_leaves_no_folder(app):
    import gradio as gr

    fns = {f.name: f.fn for f in mx.build_demo(app).fns.values()}
    for _ in range(5):
        with pytest.raises(gr.Error, match="Nothing to search yet"):
            fns["api_search"]("cat", 3, False, "", None)
        with pytest.raises(gr.Error, match="paste some strings first"):
            list(fns["api_train"]("", None, "", "bundled", "auto", {}, None))
    assert [p.name for p in app.settings.work_dir.iterdir() if p.is_dir()] == []  # (a key file: .browser-secret)


def test_every_status_the_page_shows_comes_from_the_registry(ui, tiny_bert, tmp_path):
    """Issue 51: a run's status lives on its Run, in the app's one registry. Moved through its life by the registry's
    own calls and nothing else (no thread, no job), every status the page and the API show follows it: a reloaded
    tab reattaching, Launch armed or not, Cancel's and /cancel's answer, the pending checks and downloads in the
    run's summary and its checks panel, the push refused while they run."""
    from explorer.events import Done
    from explorer.runs.live import Run

    app, fns = ui
    served = tuned_session(app, tiny_bert).run  # a run's files and record, to serve
    session = app.session()
    app.loader.load_pasted(session, "\n".join(WORDS))
    words = tmp_path / "words.txt"
    words.write_text("\n".join(WORDS))
    run = Run(session)
    pending = render.message(render.CHECKS_PENDING, "info")

    def page(memory_run: str) -> dict:
        """What the page shows at this moment: a reloaded tab, Launch after a load, Cancel, the run's panels."""
        reloaded = quiet(lambda: next(fns["on_load"].fn({"runs": [], "active": memory_run}, app.session(), None)))
        armed = upload_with_launch(ui, session, words)[1]["interactive"]
        return {
            "reattached": "Reattached to your run" in str(shown(reloaded, "mx-status")),
            "launch": armed,
            "cancel": fns["api_cancel"].fn(session)[0],
            "pending": render.forgetting_md(served) == pending,
            "downloads later": "Downloads follow with the general checks." in render.run_md(served),
        }

    def cancel_says(text: str) -> str:
        return next(
            k for k in ("Nothing is running", "Cancelled before it started", "Stopping", "served already") if k in text
        )

    idle = page(run.id)
    assert not idle["reattached"] and idle["launch"] and cancel_says(idle["cancel"]) == "Nothing is running"
    assert not idle["pending"] and not idle["downloads later"]

    assert app.trainer.request_run(session) is not run  # Launch clicked: asked for, not begun
    asked = app.registry.of(session)
    assert asked.status == "queued" and not app.registry.get(asked.id)
    assert not page(asked.id)["launch"]  # Launch waits for the run it asked for
    app.registry.asked(session)  # (taken, as a start would)

    assert app.registry.begin(run) and run.status == "queued"  # waiting for a slot
    shown_queued = page(run.id)
    assert shown_queued["reattached"] and not shown_queued["launch"]
    assert cancel_says(shown_queued["cancel"]) == "Stopping" and run.stop_reason == "cancel"

    run.admit()
    shown_running = page(run.id)
    assert run.status == "running" and shown_running["reattached"] and not shown_running["launch"]
    assert cancel_says(shown_running["cancel"]) == "Stopping" and not shown_running["pending"]

    run.serving(served)
    shown_checking = page(run.id)
    assert run.status == "checking" and shown_checking["reattached"] and not shown_checking["launch"]
    assert cancel_says(shown_checking["cancel"]) == "served already"
    assert shown_checking["pending"] and shown_checking["downloads later"]
    with pytest.raises(MirrorError, match="still running"):
        app.explore.push(served_session(app, served), "me/run", "hf_x")

    run.publish(Done(served))
    app.registry.end(run)
    run.end()
    done = page(run.id)
    assert run.status == "done" and not done["reattached"] and done["launch"]
    assert cancel_says(done["cancel"]) == "Nothing is running" and not done["pending"] and not done["downloads later"]


def served_session(app: MirrorApp, run) -> Session:
    """A session that serves `run`."""
    s = app.session()
    s.run = run
    return s


# Attack review, runs that never end: an API client's run can be stopped from its first event.
def test_an_api_run_is_cancellable_from_its_first_event(app, tiny_bert):
    """The /train endpoint hands its session (and the run id) out with its first event, so /cancel reaches it."""
    import gradio as gr

    fns = {f.name: f.fn for f in mx.build_demo(app).fns.values()}
    stream = fns["api_train"]("\n".join(WORDS), None, "", str(tiny_bert), "auto", ENDLESS, None)
    progress, model_zip, _, session = next(stream)
    assert progress["status"] == "running" and len(progress["run_id"]) == 32 and model_zip is None
    assert app.registry.of(session) is not None and app.registry.of(session).id == progress["run_id"]
    assert "Stopping" in fns["api_cancel"](session)[0]
    # stopped where the stop finds it: between two steps, or before its first (every kind of run checks its stop
    # between its phases, explorer.runs.execute)
    with pytest.raises(gr.Error, match="Cancelled (after|before it was served)"):
        list(stream)
    assert app.registry.of(session) is None and session.run is None


# ---------------------------------------------------------------------------------------------- the real server

API_TINY = {"max_steps": 2, "batch_size": 4, "device": "cpu"}


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_bert) -> Iterator[Served]:
    """`python app.py` with the tiny model allowed, at most 40 strings, uploads up to 0.01 MB, one training slot: the
    server of this file's HTTP tests (one start, ~12 s of CPU on 2 AVX2 cores)."""
    env = {
        "MIRROR_MODEL_ROOTS": str(tiny_bert),
        "MIRROR_MAX_STRINGS": "40",
        "MIRROR_MAX_UPLOAD_MB": "0.01",
        "MIRROR_TRAIN_CONCURRENCY": "1",
        "MIRROR_GENERAL_CHECKS": "0",  # nothing here reads them (~2 s of CPU a run on the tiny BERT)
    }
    with serve(tmp_path_factory.mktemp("hardening_app"), env) as running:
        yield running


@pytest.fixture(scope="module")
def server(served) -> tuple[str, Path]:
    """(the URL of `served`, its sessions folder)."""
    return served.url, served.log.parent / "sessions"


def call_raw(url: str, api: str, data: list) -> tuple[str, object]:
    """POST /gradio_api/call/<api> without gradio_client (so nothing is uploaded or checked client-side)."""
    import httpx

    r = httpx.post(f"{url}gradio_api/call/{api}", json={"data": data}, timeout=60)
    r.raise_for_status()
    with httpx.stream("GET", f"{url}gradio_api/call/{api}/{r.json()['event_id']}", timeout=300) as resp:
        text = "".join(resp.iter_text())
    event = re.findall(r"^event: (\w+)$", text, re.M)[-1]
    payload = re.findall(r"^data: (.*)$", text, re.M)[-1]
    return event, json.loads(payload)


def wait_for(condition, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.slow
def test_two_clients_tuning_different_lists_see_only_their_own_results(server, tiny_bert):
    from gradio_client import Client

    url, _ = server
    lists = {
        "animals": ["cat", "dog", "kitten", "puppy", "horse", "cow", "sheep", "goat"],
        "vehicles": ["car", "bus", "truck", "bike", "train", "plane", "boat", "tram"],
    }
    clients = {name: Client(url, verbose=False) for name in lists}
    settings = {**API_TINY, "max_steps": 12, "epochs": 10}  # long enough that the two submissions overlap
    jobs = {
        name: clients[name].submit(texts="\n".join(words), model=str(tiny_bert), settings=settings, api_name="/train")
        for name, words in lists.items()
    }
    summaries = {name: job.result(timeout=300)[0] for name, job in jobs.items()}
    for name, words in lists.items():
        assert summaries[name]["strings"] == 8 and summaries[name]["steps"] == 12
        results = clients[name].predict(queries="\n".join(words[:3]), k=8, api_name="/search")
        for r in results:
            assert {h["text"] for h in r["tuned"]} == {h["text"] for h in r["base"]} == set(words), name
    a, b = summaries.values()  # one training slot: the two runs never overlapped
    assert a["finished_at"] <= b["started_at"] or b["finished_at"] <= a["started_at"], (a, b)


@pytest.mark.slow
def test_server_side_limits_hold_when_the_ui_is_bypassed(server, tiny_bert, tmp_path):
    from gradio_client import Client, handle_file

    url, sessions = server
    client = Client(url, verbose=False)
    words = [f"term{i}" for i in range(60)]
    summary, _, _ = client.predict(texts="\n".join(words), model=str(tiny_bert), settings=API_TINY, api_name="/train")
    assert summary["strings"] == 40 and any("kept the first 40 of 60 strings" in n for n in summary["notes"])
    big = tmp_path / "big.txt"
    big.write_text("word\n" * 4000)  # 20 KB: the server takes 0.01 MB
    for kwargs, says in [
        ({"file": handle_file(str(big))}, "big.txt: 19.6 KiB is over the limit of 10.2 KiB"),
        ({"texts": "x\n" * 6000}, "the pasted text is over 10.2 KiB"),
        ({"texts": "a\nb", "model": "/etc"}, "only accepted under the allowed directories"),
        ({"texts": "a\nb", "model": "https://example.com/m"}, "is not a model name"),
        ({"texts": "a\nb", "settings": {"epochs": "inf"}}, "Epochs must be a finite number"),
    ]:
        with pytest.raises(Exception, match=re.escape(says)):
            client.predict(**{"model": str(tiny_bert), "settings": API_TINY, **kwargs}, api_name="/train")
    assert client.predict(queries="term1", k=1, api_name="/search")[0]["tuned"][0]["text"] == "term1"  # still served
    # files the client did not upload are refused before the app sees them: a server path, a URL to the server
    before = sorted(p.name for p in sessions.iterdir())
    for path in [str(ROOT / "examples" / "small_words.txt"), f"{url}gradio_api/info"]:
        event, _ = call_raw(
            url, "train", ["", {"path": path, "meta": {"_type": "gradio.FileData"}}, "", "", "", {}, ""]
        )
        assert event == "error", path
    assert sorted(p.name for p in sessions.iterdir()) == before


@pytest.mark.slow
def test_the_server_serves_only_the_files_it_made_for_a_session(server, tiny_bert, tmp_path):
    import httpx
    from gradio_client import Client, handle_file

    url, sessions = server
    event, (summary, model_zip, index_zip, _) = call_raw(
        url, "train", ["cat\ndog\ncar\nbus", None, "", str(tiny_bert), "auto", API_TINY, ""]
    )
    assert event == "complete" and summary["strings"] == 4
    for served in (model_zip, index_zip):  # a copy in Gradio's cache: the session folder's path is never sent
        assert not is_under(Path(served["path"]), sessions)
        r = httpx.get(served["url"])
        assert r.status_code == 200 and r.content[:2] == b"PK"
    inside = next(sessions.glob("runs/*/tuned_index/texts.json"))  # a run in the run store
    model_zip_on_disk = next(inside.parent.parent.glob("mirror-*-model.zip"))  # named for the base and the run
    for path in [inside, model_zip_on_disk, ROOT / "app.py", Path("/etc/passwd")]:
        assert path.exists()
        r = httpx.get(f"{url}gradio_api/file={path}")
        assert r.status_code == 403, path
    # an uploaded file's name never becomes part of a path on the server
    hostile = tmp_path / "..evil name;$(touch pwned)&<b>.txt"
    hostile.write_text("cat\ndog\ncar\n")
    client = Client(url, verbose=False)
    summary, _, _ = client.predict(
        file=handle_file(str(hostile)), model=str(tiny_bert), settings=API_TINY, api_name="/train"
    )
    assert summary["strings"] == 3
    assert not [p for p in sessions.rglob("*") if "evil" in p.name or "pwned" in p.name]
    assert not (ROOT / "pwned").exists() and not (tmp_path / "pwned").exists()


# Attack review, /config flood: each page load and each Client() asks for /config.
@pytest.mark.slow
def test_config_requests_cost_the_same_with_models_loaded(served):
    """Gradio deep-copies its config on every /config (each page load, each Client()); the copy used to walk
    into the loaded models through gr.State's delete callback: 0.7 s and +100 MB per request. On this file's server
    (the checks off: they load nothing /config could copy), with the bundled model, whose copies would show."""
    import httpx
    from gradio_client import Client

    def flood() -> list[float]:
        def one(_: int) -> float:
            t = time.perf_counter()
            r = httpx.get(served.url + "config", timeout=60)
            assert r.status_code == 200
            return time.perf_counter() - t

        with ThreadPoolExecutor(20) as pool:
            return list(pool.map(one, range(20)))

    client = Client(served.url, verbose=False)
    client.predict(texts="\n".join(WORDS), settings={"max_steps": 1, "device": "cpu"}, api_name="/train")
    client.predict(queries="cat", k=3, api_name="/search")  # base + tuned bundled models are now in memory
    before = served.rss()
    flood()
    grown = served.rss() - before
    # behaviour, not time (issue 49: a latency ratio here failed on a busy machine): the copies hold no model
    assert grown < 150 * 2**20, f"RSS grew {grown / 2**20:.0f} MB over 20 /config requests"


def test_the_config_gradio_copies_reaches_no_loaded_model(app, tuned, monkeypatch):
    """What /config deep-copies (utils.safe_deepcopy of the Blocks config) never walks into a session, the app or a
    loaded encoder: a copy of one is refused here, as it would cost 0.7 s and +100 MB a request."""
    from gradio import utils

    from mirror.encoder import Encoder

    demo = mx.build_demo(app)
    app.models.loaded(tuned.run)  # a tuned run and its base in memory

    def refuse(self, memo):
        raise AssertionError(f"{type(self).__name__} deep-copied by /config")

    monkeypatch.setattr(Encoder, "__deepcopy__", refuse, raising=False)
    copied = utils.safe_deepcopy(demo.config)
    assert copied["components"] and copied is not demo.config


# Attack review, runs that never end: an endless run is stopped by its client's /cancel, and by a disconnect.
@pytest.mark.slow
def test_api_runs_stop_on_cancel_and_on_disconnect(tmp_path, tiny_bert):
    """Against the real server with one training slot: a client's endless run is stopped by its own /cancel, and
    by killing the client outright; each time the slot frees and another client's run goes through."""
    from gradio_client import Client

    # a killed client's run stops 5 s after its last event was asked for (MIRROR_ABANDONED_S; 20 by default), not
    # spinning a core for 20 s before the other client's run can start
    env = {
        "MIRROR_MODEL_ROOTS": str(tiny_bert),
        "MIRROR_MAX_STEPS": "0",
        "MIRROR_TRAIN_CONCURRENCY": "1",
        "MIRROR_ABANDONED_S": "5",
        "MIRROR_GENERAL_CHECKS": "0",
    }
    with serve(tmp_path, env) as served:
        client = Client(served.url, verbose=False)
        job = client.submit(texts="\n".join(WORDS), model=str(tiny_bert), settings=ENDLESS, api_name="/train")
        wait_for(lambda: any((tmp_path / "sessions").glob("runs/*/base_index")), "the run to start")
        assert "Stopping" in client.predict(api_name="/cancel")
        with pytest.raises(Exception, match="Cancelled after"):
            job.result(timeout=60)

        script = (
            "import sys; from gradio_client import Client\n"
            "c = Client(sys.argv[1], verbose=False)\n"
            f"c.predict(texts={chr(10).join(WORDS)!r}, model=sys.argv[2], settings={ENDLESS!r}, api_name='/train')\n"
        )
        killed = subprocess.Popen([sys.executable, "-c", script, served.url, str(tiny_bert)], cwd=ROOT)
        wait_for(lambda: any((tmp_path / "sessions").glob("runs/*/base_index")), "the second run to start")
        killed.kill()
        killed.wait()
        other = Client(served.url, verbose=False)
        t = time.monotonic()
        summary = other.predict(
            texts="\n".join(WORDS), model=str(tiny_bert), settings={**ENDLESS, "max_steps": 2}, api_name="/train"
        )[0]
        # one training slot: this run could only start once the killed client's endless run had stopped
        assert summary["steps"] == 2 and time.monotonic() - t < 300  # it ran at all: the endless one stopped


# Attack review, disk: the upload quota over HTTP (chunked, spoofed, a NAT's visitors): tests/test_abuse.py.


def test_a_pairs_run_cancelled_after_a_reload_gives_back_its_strings_and_their_partners(ui, tmp_path):
    """Issue 50: a page reloaded during a pairs run, which then stops without being served, loads the run's strings
    again with each one's partner (and the pairing's columns): Launch tunes the same pairs, not the strings alone."""
    from explorer.events import Cancelled
    from explorer.runs.live import Run

    app, fns = ui
    session = app.session()
    terms = tmp_path / "terms.csv"
    terms.write_text("term,definition\n" + "".join(f"{w},the word {w} as a definition of itself\n" for w in WORDS))
    upload(ui, session, terms)
    assert session.partners is not None and session.pairing.columns() == ("definition", "term")
    run = app.registry.asked(session) or Run(session)
    run.strings, run.texts = (len(session.texts), session.source), tuple(session.texts)
    run.partners, run.pair_columns = tuple(session.partners), session.pairing.columns()
    assert app.registry.begin(run)
    run.admit()
    reloaded = app.session()  # the reloaded page: a new session, no strings yet
    shown_all = fns["on_load"].fn({"runs": [], "active": run.id}, reloaded, None)
    first = next(shown_all)
    assert "Reattached to your run" in str(shown(first, "mx-status"))
    run.publish(Cancelled("Cancelled at step 1."))
    app.registry.end(run)
    run.end()
    with warnings.catch_warnings():  # the end's toast (gr.Warning) outside a request warns instead
        warnings.simplefilter("ignore")
        last = list(shown_all)[-1]
    assert "loaded again" in str(shown(last, "mx-input")) and reloaded.texts == session.texts
    assert reloaded.partners == session.partners and reloaded.pairing.columns() == ("definition", "term")


def test_the_loss_curve_spans_every_step_of_the_run():
    """The chart keeps an x_lim until it is given another: the 1-10 of a run's first steps clipped a 130-step run's
    curve to its first 10 steps (seen in Chromium on a FOLDOC run). Every update names the span of its steps."""
    from ui.runs import TrainView

    few, many = TrainView.plot([1.0, 0.9, 0.8]), TrainView.plot([1.0 - i / 200 for i in range(130)])
    assert few["x_lim"] == [1, 10] and many["x_lim"] == [1, 130]
    assert max(many["value"]["step"]) == 130 and TrainView.plot([1.0])["visible"] is False
    # a live run's axis spans its planned steps from its first ones (a newcomer's 60-step run drew 1-10, then grew)
    from explorer.runs.follow import Progress
    from mirror.job import Step

    view, now = TrainView(None), Progress()
    for step in (1, 2, 3):
        now.take(Step(step=step, total=60, loss=1.0 - step / 10, eta=30.0, batch=8))
    shown = view.show(now)
    assert shown["curve"]["x_lim"] == [1, 60] and "<b>Training</b> · step 3 / 60" in shown["status"]
    # a pairs run's second training (mirror.job._train_again) is named so, and draws its own curve from its step 1
    for step in (1, 2):
        now.take(Step(step=step, total=60, loss=0.95, eta=30.0, batch=8, training=2))
    shown = view.show(now)
    assert "<b>Training again (general text held near the base)</b> · step 2 / 60" in shown["status"]
    assert max(shown["curve"]["value"]["step"]) == 2 and view.losses == [0.95, 0.95]


def test_a_setting_changed_while_the_last_one_is_planned_is_planned_after_it(ui):
    """Two settings typed quickly (batch 16, then max_steps 3): Gradio's default trigger mode ("once") dropped the
    second while the first one's plan was being made, and the plan kept 8 steps (a fresh clone's browser test failed
    on a loaded machine). The plan's events run the last trigger after the one running."""
    _, fns = ui
    assert fns["on_settings"].trigger_mode == "always_last"
    assert fns["on_model"].trigger_mode == "always_last"


def test_a_pages_events_sent_before_it_had_a_session_share_one(ui, tiny_bert, tmp_path, monkeypatch):
    """A model typed, then a file uploaded at once: the model's plan event, sent before the page had a session,
    ended after the upload made one, and sent back a fresh empty session over the upload's: the page showed the
    strings loaded, its plan said "Planning the run…" for good and Launch found no strings (a fresh clone's browser
    test, once). A page's events sent before it had a session get one session between them (SessionStore.get, by
    Gradio's session hash), so whichever ends last sends back the session holding the strings."""
    app, fns = ui
    page = ["page-1"]
    monkeypatch.setattr(app, "page", lambda: page[0])
    defaults = [c.value for c in fns["on_upload"].inputs[6:]]
    path = tmp_path / "terms.csv"
    path.write_text("term\n" + "".join(f"{w}\n" for w in WORDS[:8]), encoding="utf-8")
    model = str(tiny_bert)
    loaded = quiet(fns["on_upload"].fn, str(path), None, [], "auto", model, None, *defaults)[-1]
    assert isinstance(loaded, Session) and len(loaded.texts) == 8
    # the late events, carrying the page's state as it was when they were sent: none
    text, state = quiet(fns["on_model"].fn, "auto", model, None, *defaults)
    assert state is loaded and "Plan:" in text  # the upload's session, planned with the model typed
    assert loaded.tuning is not None and loaded.tuning.model == model  # and the model held for Launch
    out = quiet(fns["on_search"].fn, "cat", 5, "yours", None, True, model)  # any service call (call_service)
    assert out[-1] is loaded
    page[0] = "page-2"  # another page: its own session
    other = quiet(fns["on_mode"].fn, "words", model, None, *defaults)[-2]
    assert isinstance(other, Session) and other is not loaded and not other.texts
    page[0] = "page-1"
    app.close_session(loaded)  # the page's state closed (tab gone): never handed out again
    again = quiet(fns["on_mode"].fn, "words", model, None, *defaults)[-2]
    assert again is not loaded


def test_json_size_counts_a_value_until_past_its_limit():
    """ui.handlers.json_size: what strict_inputs holds a JSON input to (the API's settings and export rows)."""
    from ui.handlers import json_size

    assert json_size({"lr": 0.001, "mode": "words"}, 1_000) < 40
    assert json_size({"lr": "x" * 5_000}, 1_000) > 1_000
    huge = list(range(10**6))
    assert 1_000 < json_size(huge, 1_000) < 1_100  # stops once past: not the whole million walked
    assert json_size([[["a" * 10]]], 100) == 14


def test_a_link_whose_run_id_is_cut_short_is_said_to_be_no_run_id(ui):
    """A newcomer's pass: `?run=acde33` (the page shows 8 characters of an id) said "your last run (acde33…) is no
    longer on this server", untrue twice: the run exists, and it was never this fresh browser's last run."""
    from types import SimpleNamespace

    app, fns = ui
    for asked, said in (
        ("acde33", "the run this page's link names is not a run id (<code>acde33</code>; a run's id is 32 letters"),
        ("ab" * 16, "the run this page's link names (abababab…) is no longer on this server"),
    ):
        request = SimpleNamespace(query_params={"run": asked})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            shown = list(fns["on_load"].fn({"runs": [], "active": None}, app.session(), request))
        status = str(shown[-1].get(next(c for c in shown[-1] if getattr(c, "elem_id", None) == "mx-status")))
        status = html.unescape(status)
        assert said in status and "your last run" not in status, status


def test_a_bad_file_after_a_good_one_keeps_the_good_ones_column_pickers(ui, tmp_path):
    """A newcomer's pass: an empty CSV after a good pairs file said "Still loaded: … Launch tunes those" (right) and
    hid *Text column* and *Paired with* (the pairing that trains, no longer shown). The pickers stay as they were."""
    import gradio as gr

    _, fns = ui
    defaults = [c.value for c in fns["on_upload"].inputs[6:]]
    good = tmp_path / "glossary.csv"
    good.write_text("term,definition\n" + "".join(f"{w},the word {w} defined\n" for w in WORDS[:8]), encoding="utf-8")
    out = quiet(fns["on_upload"].fn, str(good), None, [], "auto", "bundled", None, *defaults)
    session = out[-1]
    assert out[1]["visible"] and out[2]["visible"]  # both pickers shown for the good file
    empty = tmp_path / "empty.csv"
    empty.write_text("", encoding="utf-8")
    out = quiet(fns["on_upload"].fn, str(empty), None, [], "auto", "bundled", session, *defaults)
    assert "Still loaded: **8 strings** from `glossary.csv`" in out[0]
    assert out[1] == gr.update() and out[2] == gr.update()  # not hidden: the loaded file's pairing stays in view


def test_a_pairs_file_whose_strings_repeat_with_other_partners_says_how_to_search_every_partner(app, tmp_path):
    """A newcomer's man pages (command, description): 1,660 commands shared a description with an earlier row, were
    removed with it, and could never be found; the page said so, not how to keep them. It now says to pick the
    other column as the text column when many go."""
    demo = mx.build_demo(app)
    fns = {f.name: f for f in demo.fns.values()}
    upload = fns["on_upload"]
    defaults = [c.value for c in upload.inputs[6:]]
    rows = [f"cmd{i},prints the value number {i} of a table" for i in range(80)]
    rows += [f"xlib{i},X FreeType interface library" for i in range(40)]  # 40 commands, one description
    shared = tmp_path / "commands.csv"
    shared.write_text("command,description\n" + "\n".join(rows) + "\n")
    said = upload.fn(str(shared), None, [], "auto", "bundled", None, *defaults)[0]
    assert "39 duplicate strings removed (case variants too) had another partner" in said, said
    assert "To search every `command`, pick it as the *Text column*" in said
    few = tmp_path / "few.csv"
    few.write_text("command,description\n" + "\n".join(rows[:82]) + "\n")  # 1 repeat: no such advice
    assert "To search every" not in upload.fn(str(few), None, [], "auto", "bundled", None, *defaults)[0]
