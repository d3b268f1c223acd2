"""Pairs (issue 50): a string's partner text from the user's file as its positive, rows held out to measure the gain.

The engine (mirror.pairs, mirror_tune(pairs=...), the readers, the CLI) on the tiny BERT; the service and the API in
tests/test_explorer_pairs.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mirror.config import MirrorConfig
from mirror.data import AUTO, read_file
from mirror.errors import MirrorError
from mirror.pairs import HOLDOUT_MOST, clean_pairs, gain, holdout, retrieval
from tests.conftest import ROOT, SENTENCES, VOCAB_WORDS

TINY_PAIRS = {"batch_size": 8, "lr": 1e-3, "device": "cpu", "pair_max_length": 32}


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------ cleaning


def test_cleaning_keeps_the_strings_clean_texts_keeps_each_with_its_first_partner():
    texts = ["cat", " cat ", "Cat", "dog", "", "bus", "car", "red"]
    partners = ["a small pet", "x", "y", "", "an animal", "BUS", "a small pet", "the colour of blood"]
    kept, out, stats, pair = clean_pairs(texts, partners)
    assert kept == ["cat", "dog", "bus", "car", "red"]  # as clean_texts: empties, duplicates, case variants gone
    assert out == ["a small pet", None, None, None, "the colour of blood"]
    # dog: empty partner; bus: its partner is itself; car: the partner cat has already (a false negative otherwise)
    assert (pair.paired, pair.empty, pair.same, pair.shared) == (2, 1, 1, 1)
    assert stats.duplicates + stats.case_duplicates == 2 and stats.empty == 1
    assert "2 of 5 strings have a partner; 3 train alone (1 empty" in pair.summary(5)
    with pytest.raises(ValueError):
        clean_pairs(["a", "b"], ["x"])


def test_holdout_is_a_seeded_tenth_of_the_pairs_at_most_500_and_none_for_a_few():
    partners = [f"text {i}" if i % 3 else None for i in range(900)]
    held = holdout(partners, 0.1, seed=1)
    assert held == holdout(partners, 0.1, seed=1) != holdout(partners, 0.1, seed=2)
    assert len(held) == 60 and all(partners[i] is not None for i in held)  # 10% of the 600 with a partner
    many = [f"t{i}" for i in range(20_000)]
    assert len(holdout(many, 0.1)) == HOLDOUT_MOST
    assert holdout(partners[:50], 0.1) == []  # 33 pairs: too few to measure on
    assert holdout(partners, 0.0) == []


def test_retrieval_ranks_each_query_s_own_string_and_gain_bootstraps_the_difference():
    rng = np.random.default_rng(0)
    strings = rng.normal(size=(50, 8)).astype(np.float32)
    strings /= np.linalg.norm(strings, axis=1, keepdims=True)
    targets = list(range(0, 50, 2))
    exact = retrieval(strings, strings[targets], targets)
    assert (exact == 1).all()  # each query is its string
    noisy = strings[targets] + rng.normal(scale=10.0, size=(25, 8)).astype(np.float32)
    ranks = retrieval(strings, noisy, targets)
    assert ((ranks >= 0) & (ranks <= 10)).all() and (ranks != 1).any()
    same = gain(exact, exact)
    assert same.verdict == "same" and same.low["mrr10"] == same.high["mrr10"] == 0
    better = gain(np.zeros(25, dtype=np.int64), exact, "name", "summary")
    assert better.verdict == "better" and better.tuned["r1"] == 100 and better.base["mrr10"] == 0
    assert better.sentence().startswith("On 25 rows it never trained on, the tuned model finds a row's name from its")
    # the change itself, beside its interval (a newcomer read "7.0 → 8.3 (+0.3 to +2.3, 95%)" next to "+2.3" elsewhere)
    low, high = better.low["mrr10"], better.high["mrr10"]
    assert f"MRR@10 0.0 → 100.0, +100.0 [{low:+.1f}, {high:+.1f}] (95%)." in better.sentence()
    assert type(better).from_dict(better.to_dict()) == better


# ------------------------------------------------------------------------------------------------ readers


def test_a_table_s_second_text_column_is_detected_as_the_partner_and_explained(tmp_path):
    rows = "\n".join(f"w{i},a longer description of thing number {i} here" for i in range(30))
    path = write(tmp_path / "glossary.csv", "term,description\n" + rows + "\n")
    read = read_file(path, "term", pair_column=AUTO)
    assert read.column == "term" and read.pair_column == "description"
    assert read.partners[3] == "a longer description of thing number 3 here"
    assert "two text columns: term (1.0 words a row) and description (8.0 words a row)" in read.pair_note
    plain = read_file(path, "term")  # no pair asked: as before
    assert plain.partners is None and plain.strings == read.strings
    # a category column (a label rows share) or numbers are no partner
    cats = write(tmp_path / "cats.csv", "name,kind,score\n" + "\n".join(f"n{i},{'ab'[i % 2]},{i}" for i in range(30)))
    assert read_file(cats, "name", pair_column=AUTO).partners is None
    jsonl = write(
        tmp_path / "faq.jsonl", "\n".join(json.dumps({"text": f"q{i}", "answer": f"answer {i}"}) for i in range(5))
    )
    got = read_file(jsonl, pair_column=AUTO)
    assert got.pair_column == "answer" and got.partners[1] == "answer 1"


@pytest.mark.parametrize(
    ("content", "name", "column", "pair", "message"),
    [
        ("term,def\na,x\nb,y\n", "g.csv", "term", "nope", "no column 'nope' to pair with"),
        ("term,def\na,x\nb,y\n", "g.csv", "term", "term", "is the strings' own column"),
        ("term,def\na,\nb,\n", "g.csv", "term", "def", "the column 'def' is empty"),
        ("term,def\na,A\nb,b\n", "g.csv", "term", "def", "repeats 'term' row for row"),
        ("term,def\na,x\nb\nc,z\n", "g.csv", "term", "def", "line 3 has 1 cell, with no 'def'"),
        ("a\nb\n", "g.txt", None, "def", "a partner column applies to .csv/.tsv/.jsonl files"),
        ('{"text": "a", "d": "A"}\n{"text": "b", "d": "b"}\n', "g.jsonl", None, "d", "repeats 'text' row for row"),
    ],
)
def test_a_partner_column_that_cannot_be_learned_from_is_refused_by_name(
    tmp_path, content, name, column, pair, message
):
    with pytest.raises(MirrorError, match=message):
        read_file(write(tmp_path / name, content), column, pair_column=pair)


def test_broken_tables_say_which_line_and_why(tmp_path):
    """Issue 52: an unterminated quote merged the rest of the file into one string silently; a comma inside an
    unquoted string shifted the cells; a header with no rows gave "found 0 usable strings"."""
    quote = write(tmp_path / "q.csv", 'text,n\nfine,1\n"unterminated quote, here,1\nnext,2\nlast,3\n')
    with pytest.raises(MirrorError, match=r"line 3 opens a quote .* never closed"):
        read_file(quote)
    ragged = write(tmp_path / "r.csv", "text,n\nfine,1\nhello, world,2\n")
    with pytest.raises(MirrorError, match=r"line 3 has 3 cells, the header 2 .*must be quoted"):
        read_file(ragged, "text")
    header = write(tmp_path / "h.csv", "text,label\n\n")
    with pytest.raises(MirrorError, match=r"has a header row \(text, label\) and no rows of data"):
        read_file(header)
    ok = write(tmp_path / "ok.csv", 'text,n\n"quoted, with a comma",1\n"two\nlines",2\n')
    assert read_file(ok, "text").strings == ["quoted, with a comma", "two\nlines"]


# ------------------------------------------------------------------------------------------------ training


def pair_data() -> tuple[list[str], list[str]]:
    """Each tiny-vocabulary sentence paired with a word list of another sentence: what pulls them together is only
    the pair, never shared words."""
    texts = SENTENCES + [" ".join(reversed(s.split())) for s in SENTENCES]
    partners = [" ".join(VOCAB_WORDS[(3 * i + j) % len(VOCAB_WORDS)] for j in range(4)) for i in range(len(texts))]
    return texts, partners


def test_a_pairs_run_pulls_each_string_toward_its_partner(tiny_bert):
    """On the tiny BERT (mean pooling: its [CLS] output is one point for every input), 60 steps on 16 pairs: each
    partner finds its string far more often than before, and than after as many mirror-only steps."""
    from mirror.encoder import load_encoder
    from mirror.train import mirror_tune

    texts, partners = pair_data()

    def found(encoder) -> float:  # the share of partners whose nearest string is their own
        sims = encoder.encode(partners, normalize=True) @ encoder.encode(texts, normalize=True).T
        return float((sims.argmax(1) == np.arange(len(texts))).mean())

    settings = {**TINY_PAIRS, "lr": 5e-3, "epochs": 30, "min_steps": 0, "max_steps": 60, "pooling": "mean"}
    before = found(load_encoder(tiny_bert, pooling="mean"))
    paired = mirror_tune(
        texts, MirrorConfig.preset("sentences", model=str(tiny_bert), pairs=True, **settings), pairs=partners
    )
    mirror_only = mirror_tune(texts, MirrorConfig.preset("sentences", model=str(tiny_bert), **settings))
    assert paired.steps == 60 and all(np.isfinite(paired.losses))
    assert before <= 0.15 and found(paired.encoder) >= 0.4  # the pairs were learned (chance: 1 in 16)
    assert found(paired.encoder) >= found(mirror_only.encoder) + 0.25  # and not by the mirror views alone


def test_without_partners_a_run_is_what_it_was_and_pairs_refuse_joined_views(tiny_bert):
    from mirror.train import mirror_tune

    texts, _ = pair_data()
    config = MirrorConfig.preset("sentences", model=str(tiny_bert), max_steps=3, **TINY_PAIRS)
    a, b = mirror_tune(texts, config), mirror_tune(texts, config, pairs=None)
    assert a.losses == b.losses  # the same draws, the same steps
    none = mirror_tune(texts, config, pairs=[None] * len(texts))  # a partner column with no partner in it
    assert len(none.losses) == 3 and all(np.isfinite(none.losses))
    with pytest.raises(MirrorError, match="join_views"):
        mirror_tune(texts, MirrorConfig.preset("sentences", model=str(tiny_bert), join_views=2), pairs=texts[::-1])


def test_tune_and_index_holds_rows_out_and_records_the_gain_in_the_model_folder(tiny_bert, tmp_path):
    from index.store import FolderIndexes
    from mirror.card import model_card
    from mirror.job import Finished, tune_and_index

    texts = [f"{a} {b} {c}" for a in VOCAB_WORDS[:8] for b in VOCAB_WORDS[4:10] for c in ("cat", "dog")]
    partners = [" ".join(reversed(t.split())) + " here" for t in texts]
    events: list = []
    config = MirrorConfig.preset("sentences", model=str(tiny_bert), pairs=True, max_steps=3, **TINY_PAIRS)
    tune_and_index(
        texts,
        config,
        tmp_path / "run",
        indexes=FolderIndexes(),
        emit=events.append,
        pairs=partners,
        columns=("name", "text"),
    )
    stats = next(e for e in events if isinstance(e, Finished)).stats
    pairs = stats["pairs"]
    assert pairs["paired"] == len(texts) and pairs["held_out"] == 20 and pairs["columns"] == ["name", "text"]
    assert stats["strings"] == len(texts) - 20  # the held-out rows never trained
    assert pairs["gain"]["rows"] == 20 and pairs["gain"]["verdict"] in ("better", "same", "worse")
    saved = json.loads((tmp_path / "run" / "model" / "mirror_config.json").read_text())
    assert saved["stats"]["pairs"] == pairs and saved["config"]["pairs"] is True
    card = model_card(tmp_path / "run" / "model")
    assert "## Pairs" in card and "each `name` with its `text`" in card and "MRR@10 ×100" in card
    from index.store import VectorIndex

    assert len(VectorIndex.load(tmp_path / "run" / "tuned_index")) == len(texts)  # every string is searchable


# ------------------------------------------------------------------------------------------------ CLI


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "mirror", *args], cwd=cwd, capture_output=True, text=True, env=env)


def test_the_cli_trains_on_a_files_pairs_and_prints_the_held_out_figures(tiny_bert, tmp_path):
    texts = [f"{a} {b} {c}" for a in VOCAB_WORDS[:8] for b in VOCAB_WORDS[4:10] for c in ("cat", "dog")]
    rows = "\n".join(f"{t},{' '.join(reversed(t.split()))} here" for t in texts)
    data = write(tmp_path / "glossary.csv", "name,text\n" + rows + "\n")
    flags = ["--model", str(tiny_bert), "--max-steps", "2", "--batch-size", "8", "--device", "cpu", "--quiet"]
    done = cli("train", str(data), "--column", "name", "--pair-column", "text", "--out", "m", *flags, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "pairs: name with text: 96 of 96 strings have a partner" in done.stdout
    assert "held-out pairs (" in done.stdout and "finds a row's name from its text" in done.stdout
    assert "MRR@10" in done.stdout and "recall@1 %" in done.stdout
    saved = json.loads((tmp_path / "m" / "mirror_config.json").read_text())
    assert saved["stats"]["pairs"]["gain"]["rows"] == 20
    bad = cli("train", str(data), "--column", "name", "--pair-column", "nope", "--out", "m2", *flags, cwd=tmp_path)
    assert bad.returncode == 2 and "no column 'nope' to pair with" in bad.stderr and "Traceback" not in bad.stderr
    words = write(tmp_path / "words.txt", "\n".join(VOCAB_WORDS))
    txt = cli("train", str(words), "--pair-column", "text", "--out", "m3", *flags, cwd=tmp_path)
    assert txt.returncode == 2 and "a partner column applies to .csv/.tsv/.jsonl files" in txt.stderr
    assert "--pair-column" in cli("train", "--help", cwd=tmp_path).stdout


def test_duplicate_strings_with_another_partner_are_counted_and_said():
    """A newcomer's pass (pycountry's subdivisions): "155 duplicates removed" were distinct regions of one name, each
    with its own code, their codes gone from Search with no word of it. The cleaning keeps the first row's partner and
    says how many duplicates had another."""
    texts = ["Central", "North", "central", "Central", "East", "North"]
    partners = ["GH-C", "GH-N", "ZM-C", "GH-C", "KE-E", ""]  # 'central': another code; 'Central' again: the same
    kept, out, _, stats = clean_pairs(texts, partners)
    assert kept == ["Central", "North", "East"] and out == ["GH-C", "GH-N", "KE-E"]
    assert stats.other == 1  # ZM-C (the second North has no partner: nothing lost)
    assert "1 duplicate string removed (case variants too) had another partner than their first row's" in stats.summary(
        len(kept)
    )
    assert "another partner" not in clean_pairs(["a", "b"], ["x", "y"])[3].summary(2)
    assert clean_pairs(["a", "b", "A"], ["", "y", "z"])[3].other == 1  # the first 'a' had none: z is lost too
