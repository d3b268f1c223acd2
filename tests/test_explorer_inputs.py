"""What a user gives the service, checked: strings (files, paste, examples) loaded through `app.loader.load_*`,
run settings (explorer.tune.inputs: coercion, build_config, the server's step cap, the time estimate), queries and k,
and the bundled examples and gold sets. All through `explorer`, without Gradio, on the tiny random BERT.

(The UI's own upload handler on the bad-upload corpus: tests/test_app_ui.py; the CLI on it:
tests/test_mirror_bad_inputs.py.)
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from explorer import MirrorApp, Settings
from explorer.tune.guess import estimate_seconds
from explorer.tune.inputs import EXAMPLES, EXAMPLES_DIR, GOLD_SETS, build_config, coerce_overrides
from mirror import MirrorConfig
from mirror.errors import MirrorError
from tests.conftest import TINY, WORDS, train, tree, tuned_session
from tests.upload_corpus import GOOD_UPLOADS, write
from ui.plan_md import plan_text
from ui.render import load_md

# ---------------------------------------------------------------------------------------------- strings


def test_load_txt_csv_jsonl_paste_and_examples(app, tmp_path):
    s = app.session()
    txt = tmp_path / "words.txt"
    txt.write_text("cat\n\ndog\ncat\n  \nkitten\n")
    info = app.loader.load_file(s, str(txt))
    assert (info["strings"], info["stats"].empty, info["stats"].duplicates, info["mode"]) == (3, 2, 1, "words")
    assert s.texts == ["cat", "dog", "kitten"] and s.source == "words.txt" and info["columns"] == []

    csv = tmp_path / "t.csv"
    csv.write_text("id,sentence,label\n1,a man is riding a horse today,3\n2,the cat sleeps on the warm mat,1\n")
    info = app.loader.load_file(s, str(csv))
    assert info["columns"] == ["id", "sentence", "label"] and info["mode"] == "sentences"
    assert app.loader.load_file(s, str(csv), "label")["strings"] == 2 and s.texts == ["3", "1"]
    with pytest.raises(MirrorError, match="no column 'nope'") as exc:
        app.loader.load_file(s, str(csv), "nope")
    assert exc.value.columns == ["id", "sentence", "label"]  # the UI still offers the picker

    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"term": "cat", "n": 1}\n{"term": "dog", "n": 2}\n')
    with pytest.raises(MirrorError, match="no string field 'text'") as exc:
        app.loader.load_file(s, str(jsonl))
    assert exc.value.columns == ["term"]
    assert app.loader.load_file(s, str(jsonl), "term")["strings"] == 2

    assert app.loader.load_pasted(s, "a\nb\nb\n")["strings"] == 2
    for key in EXAMPLES:
        assert app.loader.load_example(s, key)["strings"] > 400
    assert app.loader.load_example(s, "sentences10k")["mode"] == "sentences"
    assert app.loader.load_example(s, "words10k")["mode"] == "words"


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("notes.pdf", b"%PDF", "unsupported file type '.pdf'"),
        ("bin.txt", b"\x00\x01\x02abc", "binary"),
        ("cyrillic.txt", "Привет мир\n".encode("cp1251"), "not UTF-8"),  # Latin-1 is read now (as Windows-1252)
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
        app.loader.load_file(s, str(path))
    # a failed load keeps the strings loaded before (issue 28; the page says they are still loaded)
    assert s.texts == ["kept", "strings"]


def test_upload_and_string_limits_are_enforced(app, tmp_path):
    small = dataclasses.replace(app.settings, max_upload_bytes=300, max_strings=5)
    a = MirrorApp(small)
    big = tmp_path / "big.txt"
    big.write_text("word\n" * 100)
    with pytest.raises(MirrorError, match="big.txt: 500 bytes is over the limit of 300 bytes"):
        a.loader.load_file(a.session(), str(big))
    with pytest.raises(MirrorError, match="pasted text is over"):
        a.loader.load_pasted(a.session(), "x\n" * 400)
    info = a.loader.load_pasted(a.session(), "\n".join(f"w{i}" for i in range(40)))
    assert info["strings"] == 5 and "MIRROR_MAX_STRINGS" in info["notes"][0]
    with pytest.raises(MirrorError, match="paste some strings"):
        a.loader.load_pasted(a.session(), "   \n")


def test_upload_size_and_string_limits(tmp_path):
    """Over the size limit: refused with the limit named. Over the string limit: the first N kept, with a note
    in what the page shows (load_md). (Limits are the app's, set by MIRROR_MAX_UPLOAD_MB / MIRROR_MAX_STRINGS;
    the CLI reads whatever it is given.)"""
    small = MirrorApp(Settings(work_dir=tmp_path / "w", max_upload_bytes=2000, max_strings=50))
    session = small.session()
    with pytest.raises(MirrorError, match=re.escape("big.txt: 2.5 KiB is over the limit of 1.9 KiB")):
        small.loader.load_file(session, str(write(tmp_path, "big.txt", b"word\n" * 500)))
    assert session.texts == []
    lines = "\n".join(f"w{i}" for i in range(100)).encode()
    shown = load_md(small.loader.load_file(session, str(write(tmp_path, "many.txt", lines))))
    assert "**50 strings** loaded" in shown and "kept the first 50 of 100 strings" in shown
    assert session.texts == [f"w{i}" for i in range(50)]
    with pytest.raises(MirrorError, match="pasted text is over 1.9 KiB"):
        small.loader.load_pasted(session, "x\n" * 1500)


GUESSES = {  # what reading had to guess, said under the upload
    "latin-1": "latin.txt: is not UTF-8; read as Windows-1252 (Western European)",
    "utf16-no-bom": "u16le.txt: read as UTF-16-LE (it has no byte-order mark)",
}


@pytest.mark.parametrize("case", list(GOOD_UPLOADS))
def test_odd_but_valid_uploads_load_train_and_search(app, tmp_path, case):
    name, content, expected = GOOD_UPLOADS[case]
    session = app.session()
    shown = load_md(app.loader.load_file(session, str(write(tmp_path, name, content))))  # what the page shows
    assert f"**{len(expected)} strings** loaded from `{name}`" in shown, shown
    assert (GUESSES[case] in shown) if case in GUESSES else ("> **Note:**" not in shown), shown
    assert session.texts == expected
    assert not any(re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufeff]", t) for t in session.texts)
    events = train(app, session, app.settings.model_roots[0])
    assert events[-1].kind == "done", events[-1]
    found = app.searcher.search(session, expected[0][:400], k=3)[0]
    assert len(found["tuned"]) == min(3, len(expected))
    assert {h["text"] for h in found["tuned"]} <= set(expected)


# ---------------------------------------------------------------------------------------------- run settings


def test_estimate_and_server_step_cap(app, tiny_bert):
    # the plan is the model's to price, not to shape: the tiny BERT calibrates in a fraction of the bundled model's ~5 s
    model = str(tiny_bert)
    app = MirrorApp(dataclasses.replace(app.settings, max_strings=20_000))
    s = app.session()
    assert "Load some strings" in plan_text(app, s, model, "auto", {})
    app.loader.load_example(s, "words10k")
    text = plan_text(app, s, model, "auto", {})
    assert "100 steps" in text and "words preset" in text and "estimated" in text
    steps, train_s, index_s = estimate_seconds(s.texts, MirrorConfig.preset("words"), "cpu", 2)
    assert steps == 100 and 20 < train_s < 200 and index_s > 0  # bench: ~45 s on 2 cores
    assert "max steps must be >= 1" in plan_text(app, s, model, "auto", {"max_steps": -3})
    capped = MirrorApp(dataclasses.replace(app.settings, max_steps=10))
    s2 = capped.session()
    capped.loader.load_example(s2, "words10k")
    assert "caps a run at 10 steps" in plan_text(capped, s2, model, "auto", {})
    config, notes = build_config(s2.texts, "bundled", "auto", {"epochs": 3.0, "max_steps": 0}, 10)
    assert config.max_steps == 10 and config.epochs == 3 and isinstance(config.epochs, int) and notes


def test_overrides_are_validated():
    assert coerce_overrides({"epochs": 2.0, "lr": "0.001", "max_steps": 0, "pooling": "cls", "seed": None}) == {
        "epochs": 2,
        "lr": 0.001,
        "pooling": "cls",
    }
    with pytest.raises(MirrorError, match="whole number"):
        coerce_overrides({"epochs": 1.5})
    with pytest.raises(MirrorError, match="not a number"):
        coerce_overrides({"lr": "fast"})
    with pytest.raises(MirrorError, match="unknown setting 'learning_rate'"):
        coerce_overrides({"learning_rate": 1})


BAD_SETTINGS = [
    ({"epochs": 0}, "epochs must be >= 1, got 0"),
    ({"epochs": -3}, "epochs must be >= 1, got -3"),
    ({"batch_size": 1}, "batch size must be >= 2"),
    ({"temperature": 0}, "temperature must be >= 0.001, got 0"),
    ({"pooling": "max"}, "pooling must be one of ('auto', 'cls', 'mean'), got 'max'"),
    ({"device": "tpu"}, "device must be one of"),
    ({"epochs": "inf"}, "Epochs must be a finite number, got 'inf'"),
    ({"lr": float("nan")}, "Learning rate must be a finite number"),
]


@pytest.mark.parametrize("overrides, says", BAD_SETTINGS, ids=[str(o) for o, _ in BAD_SETTINGS])
def test_bad_settings_are_an_error_event_and_nothing_changes(app, tiny_bert, overrides, says):
    s = app.session()
    app.loader.load_pasted(s, "\n".join(WORDS))
    events = train(app, s, tiny_bert, **overrides)
    assert [e.kind for e in events] == ["error"] and says in events[0].text, events
    assert s.run is None and app.registry.of(s) is None and tree(app.runs.root) == []


# Attack review, runs that never end: the server's step cap holds whatever the settings ask for.
def test_the_step_cap_bounds_any_settings(app, tiny_bert):
    capped = MirrorApp(Settings(work_dir=app.settings.work_dir, model_roots=app.settings.model_roots))
    assert capped.settings.max_steps == 1000  # on by default
    capped = MirrorApp(Settings(work_dir=app.settings.work_dir, model_roots=app.settings.model_roots, max_steps=5))
    s = capped.session()
    capped.loader.load_pasted(s, "\n".join(WORDS))
    events = list(
        capped.trainer.train(s, str(tiny_bert), "auto", {**TINY, "batch_size": 4, "max_steps": 0, "epochs": 1000})
    )
    assert events[-1].kind == "done" and s.run.stats["steps"] == 5
    assert any(e.kind == "note" and "caps a run at 5 steps" in e.text for e in events)


# ---------------------------------------------------------------------------------------------- queries


def test_search_input_errors(app, tuned):
    with pytest.raises(MirrorError, match="type a query"):
        app.searcher.search(tuned, " \n ")
    with pytest.raises(MirrorError, match="at most 20"):
        app.searcher.search(tuned, "\n".join(f"q{i}" for i in range(21)))
    with pytest.raises(MirrorError, match="k must be between 1 and 50"):
        app.searcher.search(tuned, "cat", 0)
    with pytest.raises(MirrorError, match="k must be a whole number"):
        app.searcher.search(tuned, "cat", "many")
    with pytest.raises(MirrorError, match="no other corpus"):
        app.searcher.search(tuned, "cat", 3, corpus="extra")
    assert len(app.searcher.search(tuned, "cat", 50)[0]["tuned"]) == len(WORDS)  # k larger than the corpus


def test_bad_queries(app, tiny_bert):
    s = tuned_session(app, tiny_bert)
    for queries, k, says in [
        ("", 5, "type a query"),
        (" \n\t \n", 5, "type a query"),
        ("x" * 501, 5, "a query is 501 characters long; a query takes at most 500"),
        ("x" * 2000, 5, "a query is 2,000 characters long; a query takes at most 500"),
        ("x" * 100_000, 5, "the queries are 100,000 characters long; search at most 20 queries of 500 characters"),
        ("cat", float("inf"), "k must be a whole number between 1 and 50"),
        ("cat", "nan", "k must be a whole number"),
        ("\n".join(["cat"] * 21), 5, "21 queries; search at most 20"),
    ]:
        with pytest.raises(MirrorError, match=re.escape(says)):
            app.searcher.search(s, queries, k)
    # odd but valid: lone surrogates (a JSON "\ud800" escape), emoji, CJK, right-to-left, 20 queries of 500 chars
    found = app.searcher.search(s, "caf\ud800\n😀 猫 שלום\n" + "\n".join("w" * 500 for _ in range(18)), 2)
    assert len(found) == 20 and all(len(r["tuned"]) == 2 for r in found)


# ---------------------------------------------------------------------------------------------- what ships


def test_gold_sets_parse():
    from mirror.evaluate import read_pairs

    sizes = {name: len(read_pairs(EXAMPLES_DIR / path)) for name, path in GOLD_SETS.items()}
    assert sizes == {"SimLex-999": 999, "WordSim-353": 353, "STS-B dev": 1500}


def test_examples_ship_with_licence_notes():
    readme = (EXAMPLES_DIR / "README.md").read_text()
    for _, filename in EXAMPLES.values():
        assert (EXAMPLES_DIR / filename).is_file() and filename in readme
    for path in GOLD_SETS.values():
        assert (EXAMPLES_DIR / path).is_file() and Path(path).name in readme
    assert "CC BY-SA 4.0" in readme and (EXAMPLES_DIR / "STSB_LICENSE.txt").is_file()


def test_a_queries_text_past_its_length_is_refused_before_it_is_split_or_copied():
    """Issue 58: a /search (or /neighbours, or a map's) queries text of megabytes was split into lines and each line
    re-joined before the 20-queries rule refused it: copies of the whole text. Now its length alone refuses it."""
    import tracemalloc

    from explorer.tune.inputs import MAX_QUERIES, MAX_QUERIES_TEXT, MAX_QUERY_CHARS, split_queries

    assert MAX_QUERIES_TEXT >= MAX_QUERIES * (MAX_QUERY_CHARS + 1)  # the most queries, each at its longest, fit
    assert len(split_queries("\n".join(["q" * MAX_QUERY_CHARS] * MAX_QUERIES))) == MAX_QUERIES
    for huge in ("kitten\n" * 1_500_000, "kitten " * 1_500_000):  # 10 MB: many lines, or one long line
        tracemalloc.start()
        try:
            with pytest.raises(MirrorError, match=f"at most {MAX_QUERIES_TEXT:,} characters"):
                split_queries(huge)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 100_000, f"refusing a {len(huge):,}-character query text took {peak:,} bytes"


def test_a_pasted_table_is_said_to_be_read_whole_lines(app):
    """A newcomer pasted "term<TAB>definition" and three rows from a spreadsheet: 4 strings, the header among them,
    nothing paired, nothing said. The load says a paste is not split into columns and how to pair them."""
    s = app.session()
    info = app.loader.load_pasted(s, "term\tdefinition\nkernel\tthe core\nshell\tits interface\nbus\ta channel")
    assert info["strings"] == 4 and s.partners is None
    shown = load_md(info)
    assert "the pasted lines hold tabs: each whole line is one string here" in shown and ".tsv file" in shown
    plain = app.loader.load_pasted(s, "kernel\nshell\nbus\tdriver")  # a tab in one line of three: no note
    assert "hold tabs" not in load_md(plain)
