"""Pairs through the service (issue 50): a file's partner column detected and explained, the plan counting the pairs
and the held-out rows, the run's held-out gain in its summary, its verdict table and its card; a bad partner column
keeps the strings loaded before. (The engine: tests/test_mirror_pairs.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror.config import MirrorConfig
from mirror.data import AUTO
from mirror.errors import MirrorError
from tests.conftest import TINY, VOCAB_WORDS, WORDS
from ui import render
from ui.plan_md import plan_text

ROWS = [f"{a} {b} {c}" for a in VOCAB_WORDS[:8] for b in VOCAB_WORDS[4:10] for c in ("cat", "dog")]


def glossary(tmp_path: Path, name: str = "glossary.csv") -> Path:
    path = tmp_path / name
    body = "\n".join(f"{' '.join(r.split()[:2])}-{i},{r} here and {VOCAB_WORDS[i % 14]}" for i, r in enumerate(ROWS))
    path.write_text("name,summary\n" + body + "\n", encoding="utf-8")
    return path


def test_an_upload_with_a_second_text_column_is_paired_planned_trained_and_measured(app, tiny_bert, tmp_path):
    s = app.session()
    info = app.loader.load_file(s, str(glossary(tmp_path)), None, "glossary.csv", AUTO)
    assert info["column"] == "summary" and info["pair_column"] == "name"  # the longer text is the strings, as before
    assert s.pairing is not None and s.pairing.columns() == ("summary", "name") and len(s.partners) == len(s.texts)
    shown = render.load_md(info)
    assert "**Pairs:** each `summary` is tuned with its `name` as its positive — two text columns" in shown
    assert f"{len(ROWS)} of {len(ROWS)} strings have a partner" in shown
    # the preset's length as Advanced names it, each side's (a newcomer read "max length 128 tokens" here, 50 there)
    pairs_preset = MirrorConfig.preset(info["mode"], pairs=True)
    assert f"pairs' max length {pairs_preset.pair_max_length} tokens a side" in shown
    plan = plan_text(app, s, str(tiny_bert), "auto", dict(TINY))
    assert f"Pairs: {len(ROWS) - 20} rows train, each `summary` with its `name`" in plan and "20 rows held out" in plan
    events = list(app.trainer.train(s, str(tiny_bert), "auto", dict(TINY)))
    assert events[-1].kind == "done", events[-1]
    run = s.run
    gain = run.stats["pairs"]["gain"]
    assert gain["rows"] == 20 and run.stats["pairs"]["columns"] == ["summary", "name"]
    summary = render.run_md(run)
    assert "**Your held-out pairs — " in summary and "finds a row's summary from its name at rank 1 for" in summary
    card = (run.folder / "model" / "README.md").read_text()
    assert "## Pairs" in card and "20 rows never trained on" in card
    # the run as kept on disk says the same (a reload, a link)
    assert app.runs.load(run.folder.name).stats["pairs"] == run.stats["pairs"]
    # Search offers the partner side, with a row it never trained on; the exports' README names the pairs
    partner, string = run.stats["pairs"]["examples"][0]
    assert string in s.texts and s.texts.index(string) in held_rows(s)
    assert "Tuned on pairs: type a `name` to find its `summary`, e.g. a row it never trained on" in render.served_md(s)
    import zipfile

    with zipfile.ZipFile(app.explore.export(s, "all")) as zf:
        readme = zf.read(next(n for n in zf.namelist() if n.endswith("README.txt"))).decode()
    assert "Tuned on pairs: each summary with its name as its positive" in readme and "it never trained on" in readme
    # opened elsewhere (a link, a reload): its strings come back with their partners, and tune as pairs again
    partners = list(s.partners)
    other = app.session()
    app.saved.open_run(other, run.folder.name)
    again = app.loader.restore_texts(other)
    assert other.texts == s.texts and other.partners == partners and other.pairing.columns() == ("summary", "name")
    assert "and their `name`, loaded again" in render.load_md(again)
    assert f"Pairs: {len(ROWS) - 20} rows train, each `summary` with its `name`" in plan_text(
        app, other, str(tiny_bert), "auto", dict(TINY)
    )
    # a blend's held-out figures are its run's: said so (the helper's pass read the same numbers as measured anew)
    assert list(app.saved.blend_run(other, 0.5))[-1].kind == "done"
    assert f"Measured on run `{run.folder.name[:8]}` as it served α = " in render.run_md(other.run)
    # (none): the same file, the strings alone
    plain = app.loader.load_file(s, str(glossary(tmp_path)), "summary", "glossary.csv", "")
    assert plain["pair_column"] is None and s.partners is None and s.pairing is None
    assert "Pairs" not in plan_text(app, s, str(tiny_bert), "auto", dict(TINY))


@pytest.mark.checks
def test_the_held_out_pairs_lead_the_verdict_table(app, tiny_bert, tmp_path):
    s = app.session()
    app.loader.load_file(s, str(glossary(tmp_path)), None, "glossary.csv", AUTO)
    assert list(app.trainer.train(s, str(tiny_bert), "auto", dict(TINY)))[-1].kind == "done"
    table = render.forgetting_md(s.run)
    assert table.index("**Your held-out pairs") < table.index("| general check |")  # the sentence, then the table
    assert "|---|---|---:|---:|---:|---:|---:|---|\n| **your held-out pairs** | MRR@10 ×100 | 20 |" in table


def test_a_bad_partner_column_keeps_the_strings_loaded_before(app, tmp_path):
    s = app.session()
    app.loader.load_pasted(s, "\n".join(WORDS))
    broken = tmp_path / "same.csv"
    broken.write_text("term,copy\n" + "\n".join(f"{w},{w.upper()}" for w in WORDS) + "\n", encoding="utf-8")
    with pytest.raises(MirrorError, match="repeats 'term' row for row"):
        app.loader.load_file(s, str(broken), "term", "same.csv", "copy")
    assert s.texts == WORDS and s.partners is None
    # detected: no column fits (the copy is the strings again): the strings alone, and the page says why
    info = app.loader.load_file(s, str(broken), "term", "same.csv", AUTO)
    assert s.partners is None and "Pairs:** none (no other text column" in render.load_md(info)


def held_rows(session) -> list[int]:
    """The rows a pairs run of this session's strings holds out (the same seeded choice the run made)."""
    from mirror.config import MirrorConfig
    from mirror.pairs import holdout

    return holdout(session.partners, MirrorConfig().pair_holdout, seed=MirrorConfig().seed)


def test_rows_trained_alone_keep_their_reason_when_a_run_is_opened_again(app, tiny_bert, tmp_path):
    """A newcomer's pass (pycountry's languages, 58 codes equal to their names): the upload said "58 train alone (58
    equal to their string)", the run opened by its link "58 train alone (58 empty)", and Search showed "Fum — code: no
    code" for a row whose code is `fum`. The reopened strings keep the run's own counts; a hit says why it has none."""
    from ui.render_hits import partner_line

    path = tmp_path / "codes.csv"
    rows = [(w, w.upper() if i % 4 == 0 else f"{w}-{i}") for i, w in enumerate(WORDS)]  # every 4th: the name again
    path.write_text("name,code\n" + "".join(f"{n},{c}\n" for n, c in rows), encoding="utf-8")
    s = app.session()
    info = app.loader.load_file(s, str(path), "name", "codes.csv", "code")
    same = s.pairing.stats.same
    assert same == len(WORDS[::4]) and f"{same} equal to their string" in render.load_md(info)
    assert list(app.trainer.train(s, str(tiny_bert), "auto", dict(TINY)))[-1].kind == "done"
    other = app.session()
    app.saved.open_run(other, s.run.folder.name)
    again = render.load_md(app.loader.restore_texts(other))
    assert f"train alone ({same} equal to their string)" in again and "empty" not in again.split("Pairs")[-1]
    # its counts are the run's: "0 duplicates removed" of the strings cleaned already read against the pairs line's
    # count of duplicates removed (a newcomer's pass)
    assert "loaded from `run " in again and ": as the run kept them." in again and "duplicates removed" not in again
    alone = partner_line({"partner": None}, "code")
    assert "no code" not in alone and "trained on its own" in alone and "the string itself" in alone
