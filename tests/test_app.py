"""app.py handlers called directly (no server), on the tiny random BERT from conftest.py."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import app as mx
from mirror import MirrorConfig
from mirror.errors import MirrorError

ROOT = Path(__file__).resolve().parents[1]
WORDS = [
    "cat",
    "dog",
    "car",
    "bus",
    "red",
    "blue",
    "big",
    "small",
    "man",
    "woman",
    "sun",
    "moon",
    "tree",
    "rock",
    "the",
    "a",
]
TINY = {"batch_size": 8, "max_steps": 3, "lr": 1e-3, "device": "cpu"}


@pytest.fixture
def app(tmp_path, tiny_bert) -> mx.MirrorApp:
    settings = mx.Settings(work_dir=tmp_path / "sessions", model_roots=(Path(tiny_bert).resolve(),), max_strings=1000)
    return mx.MirrorApp(settings)


def train(app: mx.MirrorApp, session: mx.Session, model, **overrides) -> list[dict]:
    return list(app.train(session, str(model), "auto", {**TINY, **overrides}))


@pytest.fixture
def tuned(app, tiny_bert) -> mx.Session:
    """A session with the tiny model tuned on WORDS (3 steps) and indexed."""
    session = app.session()
    app.load_pasted(session, "\n".join(WORDS))
    events = train(app, session, tiny_bert)
    assert events[-1]["kind"] == "done", events[-1]
    return session


# ---------------------------------------------------------------------------------------------- import, settings


def test_import_loads_nothing_heavy(tmp_path):
    code = "import sys, app; app.build_demo(app.MirrorApp(app.Settings(work_dir=app.Path(sys.argv[1]))));"
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


def test_settings_from_env(tmp_path):
    s = mx.Settings.from_env({})
    assert s.max_upload_bytes == 20 * 1024 * 1024 and s.max_strings == 20_000
    assert s.max_steps == 1000 and s.max_run_seconds == 1800 and s.train_memory_bytes is None  # public-Space caps
    assert mx.Settings.from_env({"MIRROR_MAX_STEPS": "0", "MIRROR_MAX_RUN_SECONDS": "0"}).max_steps is None
    assert s.train_concurrency == 1 and s.allow_hub and s.model_roots == ()
    env = {
        "MIRROR_WORK_DIR": str(tmp_path),
        "MIRROR_SESSION_TTL": "120",
        "MIRROR_MAX_UPLOAD_MB": "1.5",
        "MIRROR_MAX_STRINGS": "50",
        "MIRROR_MAX_STEPS": "7",
        "MIRROR_MODEL_ROOTS": os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]),
        "MIRROR_ALLOW_HUB": "0",
        "MIRROR_TRAIN_CONCURRENCY": "2",
    }
    s = mx.Settings.from_env(env)
    assert s.work_dir == tmp_path.resolve() and s.session_ttl == 120 and s.max_upload_bytes == int(1.5 * 1024 * 1024)
    assert s.max_strings == 50 and s.max_steps == 7 and len(s.model_roots) == 2 and not s.allow_hub
    assert s.train_concurrency == 2
    with pytest.raises(MirrorError, match="MIRROR_MAX_STRINGS"):
        mx.Settings.from_env({"MIRROR_MAX_STRINGS": "lots"})
    with pytest.raises(MirrorError, match="MIRROR_SESSION_TTL must be >= 60"):
        mx.Settings.from_env({"MIRROR_SESSION_TTL": "5"})


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
    assert set(info["named_endpoints"]) == {"/train", "/search", "/cancel"}  # UI events are private
    params = {p["parameter_name"]: p for p in info["named_endpoints"]["/train"]["parameters"]}
    assert list(params) == ["texts", "file", "column", "model", "mode", "settings"]
    assert params["model"]["parameter_default"] == "bundled"
    fields = {f.name for f in dataclasses.fields(MirrorConfig)} - {"mode", "model"}
    assert set(mx.ADVANCED) == fields  # the Advanced accordion shows every engine setting
    by_fn = {fn.name: fn for fn in demo.fns.values()}
    assert by_fn["on_train"].concurrency_id == by_fn["api_train"].concurrency_id == "train"
    assert by_fn["on_train"].concurrency_limit == app.settings.train_concurrency
    assert by_fn["on_search"].concurrency_limit is None and by_fn["api_search"].concurrency_limit is None


# ---------------------------------------------------------------------------------------------- input


def test_load_txt_csv_jsonl_paste_and_examples(app, tmp_path):
    s = app.session()
    txt = tmp_path / "words.txt"
    txt.write_text("cat\n\ndog\ncat\n  \nkitten\n")
    info = app.load_file(s, str(txt))
    assert (info["strings"], info["stats"].empty, info["stats"].duplicates, info["mode"]) == (3, 2, 1, "words")
    assert s.texts == ["cat", "dog", "kitten"] and s.source == "words.txt" and info["columns"] == []

    csv = tmp_path / "t.csv"
    csv.write_text("id,sentence,label\n1,a man is riding a horse today,3\n2,the cat sleeps on the warm mat,1\n")
    info = app.load_file(s, str(csv))
    assert info["columns"] == ["id", "sentence", "label"] and info["mode"] == "sentences"
    assert app.load_file(s, str(csv), "label")["strings"] == 2 and s.texts == ["3", "1"]
    with pytest.raises(MirrorError, match="no column 'nope'") as exc:
        app.load_file(s, str(csv), "nope")
    assert exc.value.columns == ["id", "sentence", "label"]  # the UI still offers the picker

    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"term": "cat", "n": 1}\n{"term": "dog", "n": 2}\n')
    with pytest.raises(MirrorError, match="no string field 'text'") as exc:
        app.load_file(s, str(jsonl))
    assert exc.value.columns == ["term"]
    assert app.load_file(s, str(jsonl), "term")["strings"] == 2

    assert app.load_pasted(s, "a\nb\nb\n")["strings"] == 2
    for key in mx.EXAMPLES:
        assert app.load_example(s, key)["strings"] > 400
    assert app.load_example(s, "sentences10k")["mode"] == "sentences"
    assert app.load_example(s, "words10k")["mode"] == "words"


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("notes.pdf", b"%PDF", "unsupported file type .pdf"),
        ("bin.txt", b"\x00\x01\x02abc", "binary"),
        ("latin.txt", "café\n".encode("latin-1"), "not UTF-8"),
        ("empty.txt", b"\n\n  \n", "found 0 usable strings"),
        ("one.txt", b"cat\ncat\n", "needs at least 2 distinct strings"),
        ("bad.jsonl", b'{"text": "a"}\nnot json\n', "line 2 is not valid JSON"),
    ],
)
def test_bad_uploads_give_clear_messages(app, tmp_path, name, content, match):
    path = tmp_path / name
    path.write_bytes(content)
    s = app.session()
    s.texts = ["kept", "strings"]
    with pytest.raises(MirrorError, match=match):
        app.load_file(s, str(path))
    assert s.texts == ["kept", "strings"]  # a bad upload does not wipe what was loaded


def test_upload_and_string_limits_are_enforced(app, tmp_path):
    small = dataclasses.replace(app.settings, max_upload_bytes=300, max_strings=5)
    a = mx.MirrorApp(small)
    big = tmp_path / "big.txt"
    big.write_text("word\n" * 100)
    with pytest.raises(MirrorError, match="accepts files up to"):
        a.load_file(a.session(), str(big))
    with pytest.raises(MirrorError, match="pasted text is over"):
        a.load_pasted(a.session(), "x\n" * 400)
    info = a.load_pasted(a.session(), "\n".join(f"w{i}" for i in range(40)))
    assert info["strings"] == 5 and "MIRROR_MAX_STRINGS" in info["notes"][0]
    with pytest.raises(MirrorError, match="paste some strings"):
        a.load_pasted(a.session(), "   \n")


def test_estimate_and_server_step_cap(app):
    app = mx.MirrorApp(dataclasses.replace(app.settings, max_strings=20_000))
    s = app.session()
    assert "Load some strings" in app.estimate(s, "bundled", "auto", {})
    app.load_example(s, "words10k")
    text = app.estimate(s, "bundled", "auto", {})
    assert "100 steps" in text and "words preset" in text and "estimated" in text
    steps, train_s, index_s = mx.estimate_seconds(s.texts, MirrorConfig.preset("words"), "cpu", 2)
    assert steps == 100 and 20 < train_s < 200 and index_s > 0  # bench: ~45 s on 2 cores
    assert "max steps must be >= 1" in app.estimate(s, "bundled", "auto", {"max_steps": -3})
    capped = mx.MirrorApp(dataclasses.replace(app.settings, max_steps=10))
    s2 = capped.session()
    capped.load_example(s2, "words10k")
    assert "caps a run at 10 steps" in capped.estimate(s2, "bundled", "auto", {})
    config, notes = mx.build_config(s2.texts, "bundled", "auto", {"epochs": 3.0, "max_steps": 0}, 10)
    assert config.max_steps == 10 and config.epochs == 3 and isinstance(config.epochs, int) and notes


def test_overrides_are_validated():
    assert mx.coerce_overrides({"epochs": 2.0, "lr": "0.001", "max_steps": 0, "pooling": "cls", "seed": None}) == {
        "epochs": 2,
        "lr": 0.001,
        "pooling": "cls",
    }
    with pytest.raises(MirrorError, match="whole number"):
        mx.coerce_overrides({"epochs": 1.5})
    with pytest.raises(MirrorError, match="not a number"):
        mx.coerce_overrides({"lr": "fast"})
    with pytest.raises(MirrorError, match="unknown setting 'learning_rate'"):
        mx.coerce_overrides({"learning_rate": 1})


# ---------------------------------------------------------------------------------------------- training


def test_train_streams_progress_then_serves_model_index_and_downloads(app, tiny_bert):
    s = app.session()
    app.load_pasted(s, "\n".join(WORDS))
    events = train(app, s, tiny_bert)
    kinds = [e["kind"] for e in events]
    steps = [e for e in events if e["kind"] == "step"]
    assert [e["step"] for e in steps] == [1, 2, 3] and all(e["total"] == 3 for e in steps)
    assert steps[-1]["eta"] == 0 and kinds[-1] == "done"
    assert any(e["kind"] == "phase" and "base encoder" in e["text"] for e in events)
    run = s.run
    assert run is events[-1]["run"] and run.n_texts == len(WORDS) and len(run.losses) == 3
    assert run.stats["steps"] == 3 and "cpu" in run.stats["device"] and s.active is None
    assert run.folder.parent == s.folder / "runs"
    with zipfile.ZipFile(run.model_zip) as zf:
        names = zf.namelist()
    assert "mirror-model/modules.json" in names and "mirror-model/1_Pooling/config.json" in names
    assert any(n.endswith(".safetensors") for n in names)
    with zipfile.ZipFile(run.index_zip) as zf:
        assert {"mirror-index/index.faiss", "mirror-index/texts.json", "mirror-index/meta.json"} <= set(zf.namelist())

    found = app.search(s, "cat\n\ndog", 5)
    assert [r["query"] for r in found] == ["cat", "dog"]
    for r in found:
        assert len(r["tuned"]) == len(r["base"]) == 5
        assert [h["rank"] for h in r["tuned"]] == [1, 2, 3, 4, 5]
        tuned, base = {h["text"] for h in r["tuned"]}, {h["text"] for h in r["base"]}
        assert all(h["only_here"] == (h["text"] not in base) for h in r["tuned"])
        assert all(h["only_here"] == (h["text"] not in tuned) for h in r["base"])
        assert all(-1.001 <= h["score"] <= 1.001 for h in r["tuned"] + r["base"])


def test_second_run_swaps_only_on_success_and_reuses_the_base_index(app, tuned, tiny_bert):
    first = tuned.run
    # bad settings: an error event, the first run still served and downloadable
    events = train(app, tuned, tiny_bert, lr=-1)
    assert events[-1]["kind"] == "error" and "learning rate must be > 0" in events[-1]["text"]
    assert tuned.run is first and first.model_zip.is_file()
    assert [p.name for p in (tuned.folder / "runs").iterdir()] == [first.folder.name]
    # a model that cannot be loaded: same
    events = train(app, tuned, "/etc")
    assert events[-1]["kind"] == "error" and "allowed directories" in events[-1]["text"]
    assert tuned.run is first
    # a good second run replaces the first and deletes its folder; same strings + base: base index reused
    events = train(app, tuned, tiny_bert, seed=7)
    assert events[-1]["kind"] == "done"
    assert not any(e["kind"] == "phase" and "base encoder" in e["text"] for e in events)
    assert tuned.run is not first and not first.folder.exists() and tuned.run.model_zip.is_file()
    assert app.search(tuned, "cat", 3)[0]["tuned"]


def test_cancel_stops_between_steps_and_keeps_the_previous_model(app, tuned, tiny_bert):
    first = tuned.run
    gen = app.train(tuned, str(tiny_bert), "auto", {**TINY, "max_steps": 50, "batch_size": 4, "epochs": 20})
    seen = []
    for ev in gen:
        seen.append(ev)
        if ev["kind"] == "step" and ev["step"] == 2:
            assert "Stopping" in app.cancel(tuned)
    last = seen[-1]
    assert last["kind"] == "cancelled" and "nothing was saved" in last["text"], last
    assert 2 <= sum(e["kind"] == "step" for e in seen) < 10  # stopped long before step 50
    assert tuned.run is first and first.model_zip.is_file() and tuned.active is None
    assert [p.name for p in (tuned.folder / "runs").iterdir()] == [first.folder.name]
    assert app.search(tuned, "cat", 2)[0]["tuned"]


def test_cancel_while_queued_cancels_that_run_only(app, tiny_bert):
    s = app.session()
    app.load_pasted(s, "\n".join(WORDS))
    app.request_run(s)
    assert "Cancelled before it started" in app.cancel(s)
    assert [e["kind"] for e in train(app, s, tiny_bert)] == ["cancelled"]
    app.request_run(s)  # the next Launch click starts normally
    assert train(app, s, tiny_bert)[-1]["kind"] == "done"


def test_a_cancel_while_idle_does_not_poison_the_next_run(app, tiny_bert):
    s = app.session()
    app.load_pasted(s, "\n".join(WORDS))
    assert "Nothing is running" in app.cancel(s)
    assert train(app, s, tiny_bert)[-1]["kind"] == "done"  # an API call: no Launch click, no stale cancel
    assert "Nothing is running" in app.cancel(s)
    app.request_run(s)
    assert train(app, s, tiny_bert)[-1]["kind"] == "done"


def test_train_without_strings_or_with_an_unreachable_hub_model(app, monkeypatch):
    s = app.session()
    assert train(app, s, "bundled")[-1] == {"kind": "error", "text": "Load at least 2 strings first (step 1 above)."}
    app.load_pasted(s, "\n".join(WORDS))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    last = train(app, s, "some-org/not-downloaded-model")[-1]
    assert last["kind"] == "error" and "offline" in last["text"]
    no_hub = mx.MirrorApp(dataclasses.replace(app.settings, allow_hub=False))
    s2 = no_hub.session()
    no_hub.load_pasted(s2, "\n".join(WORDS))
    assert "only offers the bundled model" in train(no_hub, s2, "bert-base-uncased")[-1]["text"]
    assert s.run is None and not any((s.folder / "runs").glob("*"))


# ---------------------------------------------------------------------------------------------- sessions


def test_sessions_are_isolated_and_old_folders_are_swept(app, tuned):
    other = app.session()
    assert other.folder != tuned.folder and other.folder.is_dir()
    with pytest.raises(MirrorError, match="Nothing to search yet"):
        app.search(other, "cat")
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
    import copy

    s = app.session()
    assert copy.deepcopy(s) is s


# ---------------------------------------------------------------------------------------------- search, reuse


def test_search_input_errors(app, tuned):
    with pytest.raises(MirrorError, match="type a query"):
        app.search(tuned, " \n ")
    with pytest.raises(MirrorError, match="at most 20"):
        app.search(tuned, "\n".join(f"q{i}" for i in range(21)))
    with pytest.raises(MirrorError, match="k must be between 1 and 50"):
        app.search(tuned, "cat", 0)
    with pytest.raises(MirrorError, match="k must be a whole number"):
        app.search(tuned, "cat", "many")
    with pytest.raises(MirrorError, match="no other corpus"):
        app.search(tuned, "cat", 3, corpus="extra")
    assert len(app.search(tuned, "cat", 50)[0]["tuned"]) == len(WORDS)  # k larger than the corpus


def test_render_results_escapes_and_marks_differences():
    results = [
        {
            "query": "<script>x</script>",
            "tuned": [{"rank": 1, "text": "<b>a</b>", "score": 0.9, "only_here": True}],
            "base": [{"rank": 1, "text": "b", "score": 0.8, "only_here": True}],
        }
    ]
    out = mx.render_results(results, "bundled")
    assert "<script>" not in out and "&lt;script&gt;" in out and "&lt;b&gt;a&lt;/b&gt;" in out
    assert "mx-only-tuned" in out and "mx-only-base" in out and "1 of 1 tuned hits are new" in out


def test_index_another_corpus(app, tuned, tmp_path):
    corpus = tmp_path / "other.txt"
    corpus.write_text("kitten\npuppy\nlorry\nbicycle\n")
    assert "Indexed 4 strings" in app.index_corpus(tuned, str(corpus))
    found = app.search(tuned, "cat", 10, corpus="extra")[0]
    assert {h["text"] for h in found["tuned"]} == {"kitten", "puppy", "lorry", "bicycle"}
    app._loaded.clear()  # evicted from memory: reloaded from the session folder
    assert app.search(tuned, "cat", 2, corpus="extra")[0]["tuned"]


def test_a_downloaded_model_zip_can_be_served_again(app, tuned, tiny_bert):
    zip_path = tuned.run.model_zip
    s = app.session()
    assert [e["kind"] for e in app.use_saved_model(s, str(zip_path))] == ["error"]  # no strings loaded yet
    app.load_pasted(s, "\n".join(WORDS[:8]))
    events = list(app.use_saved_model(s, str(zip_path)))
    assert events[-1]["kind"] == "done", events[-1]
    assert s.run.base_model == str(tiny_bert) and s.run.n_texts == 8
    assert app.search(s, "cat", 3)[0]["tuned"][0]["text"] == "cat"


def test_unsafe_or_wrong_zips_are_refused(app, tmp_path):
    s = app.session()
    app.load_pasted(s, "\n".join(WORDS))
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("../../escape.txt", "x")
    last = list(app.use_saved_model(s, str(evil)))[-1]
    assert last["kind"] == "error" and "unsafe path" in last["text"]
    assert not (tmp_path / "escape.txt").exists()
    notzip = tmp_path / "model.zip"
    notzip.write_text("hello")
    assert "not a valid zip" in list(app.use_saved_model(s, str(notzip)))[-1]["text"]
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as zf:
        zf.writestr("readme.txt", "x")
    assert "does not contain a model folder" in list(app.use_saved_model(s, str(empty)))[-1]["text"]
    assert s.run is None and not any((s.folder / "runs").glob("*"))


# ---------------------------------------------------------------------------------------------- evaluate, map


def test_evaluate_before_and_after(app, tuned, tmp_path):
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("cat dog 8\ncar bus 7\nred moon 1\nsun moon 6\nman woman 7\n")
    rows = app.evaluate(tuned, ["WordSim-353"], str(pairs))
    assert [r["gold set"] for r in rows] == ["WordSim-353", "pairs.txt"]
    assert rows[0]["pairs"] == 353 and rows[1]["pairs"] == 5
    for r in rows:
        assert (
            -1 <= r["base"] <= 1
            and -1 <= r["tuned"] <= 1
            and r["change"] == pytest.approx(r["tuned"] - r["base"], abs=1e-3)
        )
    with pytest.raises(MirrorError, match="choose a gold set"):
        app.evaluate(tuned, [], None)
    with pytest.raises(MirrorError, match="unknown gold set"):
        app.evaluate(tuned, ["MEN"], None)
    bad = tmp_path / "bad.txt"
    bad.write_text("cat dog\n")
    with pytest.raises(MirrorError, match="bad.txt"):
        app.evaluate(tuned, [], str(bad))


def test_gold_sets_parse():
    from mirror.evaluate import read_pairs

    sizes = {name: len(read_pairs(mx.EXAMPLES_DIR / path)) for name, path in mx.GOLD_SETS.items()}
    assert sizes == {"SimLex-999": 999, "WordSim-353": 353, "STS-B dev": 1500}


def test_map_projects_both_spaces_with_shared_clusters(app, tuned):
    maps = app.project(tuned, 10, 3)
    assert len(maps["base"]) == len(maps["tuned"]) == 10
    assert [p["text"] for p in maps["base"]] == [p["text"] for p in maps["tuned"]]
    assert [p["cluster"] for p in maps["base"]] == [p["cluster"] for p in maps["tuned"]]
    assert len({p["cluster"] for p in maps["tuned"]}) <= 3
    with pytest.raises(MirrorError, match="points must be between"):
        app.project(tuned, 5, 3)
    with pytest.raises(MirrorError, match="Nothing to map yet"):
        app.project(app.session(), 100, 3)


def test_job_duration_for_zerogpu_is_bounded():
    texts = [f"word{i}" for i in range(10_000)]
    config = MirrorConfig.preset("words").to_dict()
    assert 60 <= mx.job_duration(texts, config, "/tmp/x", [], True, {}) <= 600
    assert mx.job_duration(texts[:50], config, "/tmp/x", [], True, {}) == 60


def test_examples_ship_with_licence_notes():
    readme = (mx.EXAMPLES_DIR / "README.md").read_text()
    for _, filename in mx.EXAMPLES.values():
        assert (mx.EXAMPLES_DIR / filename).is_file() and filename in readme
    for path in mx.GOLD_SETS.values():
        assert (mx.EXAMPLES_DIR / path).is_file() and Path(path).name in readme
    assert "CC BY-SA 4.0" in readme and (mx.EXAMPLES_DIR / "STSB_LICENSE.txt").is_file()


# ---------------------------------------------------------------------------------------------- gradio adapters, ZeroGPU


def test_gradio_adapters_stream_the_run_and_render_search(app, tiny_bert):
    """The Gradio wrappers in build_demo, called as Gradio would (inputs as a {component: value} dict)."""
    demo = mx.build_demo(app)
    fns = {f.name: f for f in demo.fns.values()}
    session = app.session()
    app.load_pasted(session, "\n".join(WORDS))
    data = {}
    for comp in fns["on_train"].inputs:
        name = (comp.elem_id or "").removeprefix("mx-set-")
        value = {**TINY, "mx-model": str(tiny_bert)}.get(name, getattr(comp, "value", None))
        data[comp] = session if comp.__class__.__name__ == "State" else value
    updates = list(fns["on_train"].fn(data))
    last = {getattr(c, "elem_id", None) or type(c).__name__: v for c, v in updates[-1].items()}
    assert "Tuned and indexed" in last["mx-status"] and "Done: your tuned model is served" in last["mx-result"]
    assert last["mx-model-zip"]["visible"] and last["mx-model-zip"]["value"].endswith("mirror-model.zip")
    assert last["mx-loss"]["visible"] and len(last["mx-loss"]["value"]) == 3
    assert last["mx-launch"]["interactive"] is True  # Launch is enabled again
    page, _ = fns["on_search"].fn("cat\ndog", 5, "main", session)
    assert page.count('class="mx-query"') == 2 and "Tuned (mirror)" in page
    # a bad query is a message, not an exception
    with pytest.warns(UserWarning, match="type a query"):  # gr.Warning, outside a request
        page, _ = fns["on_search"].fn("  ", 5, "main", session)
    assert "type a query" in page


FAKE_SPACES = '''
"""A stand-in for the `spaces` package on ZeroGPU: the decorated function runs in a forked worker process."""
import multiprocessing

calls = []


class config:
    class Config:
        zero_gpu = True


def GPU(duration=60):
    def decorate(fn):
        def wrapper(*args, **kwargs):
            calls.append(duration(*args, **kwargs) if callable(duration) else duration)
            ctx = multiprocessing.get_context("fork")
            q = ctx.Queue()

            def target():
                try:
                    for item in fn(*args, **kwargs):
                        q.put(item)
                finally:
                    q.put(None)

            worker = ctx.Process(target=target, daemon=True)
            worker.start()
            while (item := q.get()) is not None:
                yield item
            worker.join()

        return wrapper

    return decorate
'''

ZERO_GPU_SCRIPT = """
import os, sys
from pathlib import Path
import spaces, app
assert app.zero_gpu() and app.inference_device() == "cpu"
a = app.MirrorApp(app.Settings(work_dir=Path(sys.argv[1]), model_roots=(Path(sys.argv[2]),)))
s = a.session()
a.load_pasted(s, "\\n".join(sys.argv[3:]))
events = list(a.train(s, sys.argv[2], "auto", {"batch_size": 8, "max_steps": 3, "device": "cpu"}))
assert events[-1]["kind"] == "done", events[-1]
assert sum(e["kind"] == "step" for e in events) == 3
assert len(spaces.calls) == 1 and 60 <= spaces.calls[0] <= 600, spaces.calls
assert s.run.model_zip.is_file() and a.search(s, "cat", 2)[0]["tuned"]
print("ok", os.getpid())
"""


def test_training_runs_inside_spaces_gpu_and_returns_files(tmp_path, tiny_bert):
    """On ZeroGPU the job runs in another process: only its yielded tuples and files come back."""
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "spaces.py").write_text(FAKE_SPACES)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", ZERO_GPU_SCRIPT, str(tmp_path / "work"), str(tiny_bert), *WORDS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and out.stdout.startswith("ok"), out.stdout + out.stderr[-3000:]


def test_upload_adapters_fill_the_column_picker_and_reuse_a_saved_zip(app, tuned, tmp_path):
    demo = mx.build_demo(app)
    fns = {f.name: f for f in demo.fns.values()}
    defaults = [c.value for c in fns["on_upload"].inputs[5:]]  # the Advanced fields, as the page holds them
    csv = tmp_path / "terms.csv"
    csv.write_text("id,term\n1,cat\n2,dog\n3,kitten\n")
    out = fns["on_upload"].fn(str(csv), None, "auto", "bundled", None, *defaults)
    summary, column, session = out[0], out[1], out[-1]
    assert "3 strings" in summary and "words preset" in summary
    assert column["visible"] and [c[1] for c in column["choices"]] == ["", "id", "term"]
    out = fns["on_column"].fn(str(csv), "id", "auto", "bundled", session, *defaults)
    assert "3 strings" in out[0] and session.texts == ["1", "2", "3"]
    with pytest.warns(UserWarning, match="no column 'nope'"):
        out = fns["on_column"].fn(str(csv), "nope", "auto", "bundled", session, *defaults)
    assert "Error" in out[0] and session.texts == ["1", "2", "3"]

    # a zip downloaded from an earlier run, uploaded in a session that has strings loaded
    app.load_pasted(session, "\n".join(WORDS))
    saved_md, result_md, model_file, *_ = fns["on_saved_zip"].fn(str(tuned.run.model_zip), session)
    assert "Serving" in saved_md and "Done" in result_md and model_file["visible"]
    assert session.run is not None and session.run is not tuned.run


def test_browser_test_skips_without_chromium_but_fails_on_ci(monkeypatch):
    import tests.test_browser as tb

    monkeypatch.setattr(tb, "CHROMIUM_PATHS", ("/nonexistent/chromium",))
    monkeypatch.setattr(tb, "ON_CI", False)
    with pytest.raises(pytest.skip.Exception, match="no chromium executable"):
        tb.chromium_or_skip()
    monkeypatch.setattr(tb, "ON_CI", True)
    with pytest.raises(pytest.fail.Exception, match="required on CI"):
        tb.chromium_or_skip()
