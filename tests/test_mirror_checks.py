"""The general checks of the engine (mirror.checks) and `python -m mirror check`: the documents loaders and the
shipped "Long documents" and "Short articles" sets with their licences, the halves, the links' grades, the graded
nDCG on synthetic vectors with known neighbours, the intervals and verdict words, and the command line on the tiny
random BERT."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mirror import MirrorConfig, checks
from mirror.__main__ import main
from mirror.checks import (
    CHECKS,
    GOLD,
    LONG_DOCS,
    SHORT_ARTICLES,
    Check,
    Docs,
    LinkedDocs,
    bootstrap_mean_difference,
    cap_docs,
    compare,
    graded_ndcg,
    json_rows,
    read_docs,
    read_linked_docs,
    relevance,
    split_docs,
    summary,
    verdict_word,
)
from mirror.errors import MirrorError
from mirror.train import mirror_tune, save_result
from tests.conftest import ROOT, TINY, WORDS


def write_docs(path, rows):
    path.write_text("# id\tgroup\tsource\ttext\n" + "".join("\t".join(r) + "\n" for r in rows))
    return path


def docs_of(groups_sources: list[tuple[str, str]]) -> Docs:
    n = len(groups_sources)
    return Docs(
        tuple(f"d{i}" for i in range(n)),
        tuple(g for g, _ in groups_sources),
        tuple(s for _, s in groups_sources),
        tuple(f"text {i}" for i in range(n)),
        tuple(range(1, n + 1)),
    )


# -- the loader and the shipped set ----------------------------------------------------------------------------------


def test_read_docs_reads_ids_groups_sources_texts_and_lines(tmp_path):
    path = write_docs(
        tmp_path / "d.tsv", [("a.1", "g1", "a", "first"), ("a.2", "g1", "a", "second"), ("b.1", "g2", "b", "x")]
    )
    docs = read_docs(path)
    assert docs.ids == ("a.1", "a.2", "b.1") and docs.groups == ("g1", "g1", "g2") and docs.sources == ("a", "a", "b")
    assert docs.texts == ("first", "second", "x") and docs.lines == (2, 3, 4) and len(docs) == 3


@pytest.mark.parametrize(
    "rows, needle",
    [
        ([("a", "g1", "s", "t"), ("b", "g2", "s")], "line 3 is not `id<TAB>group<TAB>source<TAB>text`"),
        ([("a", "g1", "s", "t"), ("b", "g2", "s", " ")], "line 3 is not"),
        ([("a", "g1", "s", "t"), ("a", "g2", "s", "u")], "ids are not unique"),
        ([("a", "g1", "s", "t"), ("b", "g1", "s", "u")], "at least 2 groups"),
    ],
)
def test_read_docs_refuses_a_bad_file_with_a_message(tmp_path, rows, needle):
    refused(read_docs, write_docs(tmp_path / "bad.tsv", rows), needle, tmp_path / "missing.tsv")


def refused(read, bad: Path, needle: str, missing: Path) -> None:
    """`read` refuses the `bad` file with a message matching `needle`, and a `missing` one as missing."""
    with pytest.raises(MirrorError, match=needle):
        read(bad)
    with pytest.raises(MirrorError, match="no such file"):
        read(missing)


def test_the_shipped_long_documents_are_real_passages_in_runs_of_consecutive_chapters():
    docs = read_docs(GOLD / LONG_DOCS.file)
    assert len(docs) >= 400 and len(set(docs.groups)) == 8 and len(set(docs.sources)) >= 60
    words = np.array([len(t.split()) for t in docs.texts])
    assert words.min() >= 80 and words.max() <= 260  # 150-256 word pieces: about 110-200 words of this English
    for source in set(docs.sources):  # each book: consecutive lines, consecutive chapters, one kind
        rows = [i for i, s in enumerate(docs.sources) if s == source]
        assert rows == list(range(rows[0], rows[-1] + 1)) and len({docs.groups[i] for i in rows}) == 1
        chapters = [int(docs.ids[i].rsplit(".", 1)[1]) for i in rows]
        assert chapters == list(range(chapters[0], chapters[0] + len(chapters))) and len(chapters) >= 2
    assert (GOLD / "joined-sts-pairs.tsv").is_file() and not (GOLD / "long-docs.tsv").exists()


def test_the_long_documents_licence_file_names_the_source_the_licence_and_the_script():
    text = (GOLD / "BIBLE_LICENSE.txt").read_text()
    assert "public domain" in text.lower() and "sword-text-web" in text and "scripts/make_bible_docs.py" in text
    assert (ROOT / "scripts" / "make_bible_docs.py").is_file()
    readme = (ROOT / "examples" / "README.md").read_text()
    assert "gold/bible-docs.tsv" in readme and "BIBLE_LICENSE.txt" in readme


def write_linked(path, rows):
    path.write_text("# id\thalf\theadword\tlinks\ttext\n" + "".join("\t".join(r) + "\n" for r in rows))
    return path


def test_read_linked_docs_reads_ids_halves_links_and_texts(tmp_path):
    path = write_linked(
        tmp_path / "j.tsv", [("j1", "check", "foo", "j2 j9", "first text"), ("j2", "dev", "bar baz", "-", "second")]
    )
    docs = read_linked_docs(path)
    assert docs.ids == ("j1", "j2") and docs.halves == ("check", "dev") and docs.texts == ("first text", "second")
    assert docs.links == (frozenset({"j2", "j9"}), frozenset()) and len(docs) == 2


@pytest.mark.parametrize(
    "rows, needle",
    [
        ([("j1", "check", "h", "-", "t"), ("j2", "check", "h", "t")], "line 3 is not `id<TAB>check|dev"),
        ([("j1", "test", "h", "-", "t")], "line 2 is not"),
        ([("j1", "check", "h", "", "t")], "line 2 is not"),
        ([("j1", "check", "h", "-", "t"), ("j1", "dev", "h", "-", "u")], "ids are not unique"),
    ],
)
def test_read_linked_docs_refuses_a_bad_file_with_a_message(tmp_path, rows, needle):
    refused(read_linked_docs, write_linked(tmp_path / "bad.tsv", rows), needle, tmp_path / "missing.tsv")


def test_linked_relevance_grades_direct_links_two_steps_and_links_through_documents_outside_the_file():
    # a-b linked (listed on one side only), b-c linked, c and d both link to x, which is not in the file
    docs = LinkedDocs(
        ("a", "b", "c", "d"),
        ("check",) * 4,
        ("ta", "tb", "tc", "td"),
        (frozenset({"b"}), frozenset({"c"}), frozenset({"b", "x"}), frozenset({"x"})),
    )
    assert relevance(docs).tolist() == [
        [-1, 2, 1, 0],  # a: b direct, c through b, d nothing
        [2, -1, 2, 0],
        [1, 2, -1, 1],  # c: d through x (outside the file)
        [0, 0, 1, -1],
    ]


def test_the_shipped_short_articles_are_jargon_entries_checked_at_40_110_words_with_longer_dev_entries():
    check, dev = checks.check_items(SHORT_ARTICLES, "check"), checks.check_items(SHORT_ARTICLES, "dev")
    assert isinstance(check, LinkedDocs) and len(check) == 997 and len(dev) >= 500  # every 40-110-word entry
    assert not set(check.ids) & set(dev.ids) and set(check.halves) == {"check"} and set(dev.halves) == {"dev"}
    words = np.array([len(t.split()) for t in check.texts])
    assert words.min() >= 40 and words.max() <= 110 and min(len(t.split()) for t in dev.texts) > 110
    grade = relevance(check)
    related = (grade > 0).sum(1)
    assert (grade == 2).any() and (grade == 1).any() and (related > 0).mean() > 0.8  # most entries have relatives
    assert (grade == grade.T).all()  # links go both ways
    known = set(read_linked_docs(GOLD / SHORT_ARTICLES.file).ids)
    outside = set().union(*check.links) - known
    assert outside  # links to entries of other lengths: they make two-step relations too


def test_the_short_articles_licence_file_names_the_source_the_licence_and_the_script():
    text = (GOLD / "JARGON_LICENSE.txt").read_text()
    assert "public domain" in text.lower() and "dict-jargon" in text and "scripts/make_jargon_docs.py" in text
    assert "Jargon File 4.4.7" in text  # the citation the File asks for
    assert (ROOT / "scripts" / "make_jargon_docs.py").is_file()
    readme = (ROOT / "examples" / "README.md").read_text()
    assert "gold/jargon-docs.tsv" in readme and "JARGON_LICENSE.txt" in readme


# -- halves ---------------------------------------------------------------------------------------------------------


def test_halves_split_sources_within_each_group_share_nothing_and_are_seeded():
    docs = docs_of([(f"g{g}", f"g{g}s{s}") for g in range(3) for s in range(4) for _ in range(3)])
    check, dev = split_docs(docs, "check"), split_docs(docs, "dev")
    assert len(check) + len(dev) == len(docs) and not set(check.ids) & set(dev.ids)
    assert not set(check.sources) & set(dev.sources)
    assert set(check.groups) == set(dev.groups) == {"g0", "g1", "g2"}  # every group in both halves
    assert split_docs(docs, "check") == check and list(check.lines) == sorted(check.lines)  # file order kept
    assert split_docs(docs, "check", seed=8) != check
    with pytest.raises(ValueError):
        split_docs(docs, "test")


def test_cap_docs_keeps_every_sources_first_documents():
    docs = docs_of([("g", "a")] * 5 + [("g", "b")] * 5 + [("h", "c")] * 5)
    capped = cap_docs(docs, 7)
    assert len(capped) == 7 and capped.sources.count("a") == 3 and capped.sources.count("c") == 2
    assert capped.ids[:3] == ("d0", "d1", "d2") and cap_docs(docs, 100) == docs


# -- scoring on synthetic vectors -----------------------------------------------------------------------------------


def test_relevance_grades_neighbours_source_group_and_the_rest():
    docs = docs_of([("g", "a"), ("g", "a"), ("g", "a"), ("g", "b"), ("h", "c")])
    grades = relevance(docs)
    assert grades[0].tolist() == [-1, 3, 2, 1, 0] and grades[1].tolist() == [3, -1, 3, 1, 0]
    assert grades[4].tolist() == [0, 0, 0, 0, -1] and (grades == grades.T).all()
    gapped = docs.subset([0, 2, 3, 4])  # lines 1 and 3 of source a (line 2 left out): not neighbours
    assert gapped.lines == (1, 3, 4, 5) and relevance(gapped)[0, 1] == 2


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_graded_ndcg_is_one_for_the_ideal_order_and_lower_when_the_order_is_wrong():
    docs = docs_of([("g", "a"), ("g", "a"), ("g", "b"), ("h", "c")])
    grades = relevance(docs)
    # doc 0: its neighbour 1 nearest, then 2 (same group), then 3
    ideal = unit(np.array([[1.0, 0.0], [0.95, 0.31], [0.6, 0.8], [-1.0, 0.1]]))
    scores = graded_ndcg(ideal, grades)
    assert scores[0] == pytest.approx(1.0) and np.isnan(scores[3])  # doc 3: nothing relevant to it
    swapped = unit(np.array([[1.0, 0.0], [0.6, 0.8], [0.95, 0.31], [-1.0, 0.1]]))  # the group's doc above the neighbour
    reversed_ = unit(np.array([[1.0, 0.0], [-1.0, 0.1], [0.6, 0.8], [0.95, 0.31]]))
    assert 1.0 > graded_ndcg(swapped, grades)[0] > graded_ndcg(reversed_, grades)[0] > 0


def test_bootstrap_interval_brackets_the_mean_change_and_narrows_with_more_items():
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 1, 400)
    tuned = base - 0.05 + rng.normal(0, 0.02, 400)
    low, high = bootstrap_mean_difference(base, tuned)
    assert low < -0.05 < high < 0
    low40, high40 = bootstrap_mean_difference(base[:40], tuned[:40])
    assert high40 - low40 > high - low
    assert bootstrap_mean_difference(np.array([1.0, np.nan]), np.array([1.0, 2.0])) is None  # one item left


@pytest.mark.parametrize(
    "delta, ci, margin, word",
    [
        (-2.0, (-3.0, -1.0), 1.0, "worse"),
        (-2.0, (-3.0, 0.5), 1.0, "same"),  # interval reaches zero
        (-0.8, (-1.2, -0.4), 1.0, "same"),  # within the margin
        (-0.8, (-1.2, -0.4), 0.5, "worse"),
        (2.0, (1.0, 3.0), 1.0, "better"),
        (2.0, (-0.1, 3.0), 1.0, "same"),
        (0.0, None, 1.0, "same"),
    ],
)
def test_verdict_words(delta, ci, margin, word):
    assert verdict_word(delta, ci, margin) == word


def test_compare_on_documents_scores_the_mean_with_its_interval_and_word():
    groups_sources = [(f"g{g}", f"g{g}s{s}") for g in range(4) for s in range(3) for _ in range(4)]
    docs = docs_of(groups_sources)
    check = Check("Docs", "x", "toy documents", 100, kind="docs")
    rng = np.random.default_rng(1)
    # base: each group on its own axis (clear structure); tuned: the same plus so much noise the order is lost
    centres = np.eye(4)[[int(g[1]) for g, _ in groups_sources]]
    base_v = unit(centres + 0.05 * rng.normal(size=(len(docs), 4)))
    tuned_v = unit(centres + 2.0 * rng.normal(size=(len(docs), 4)))
    grades = relevance(docs)
    row = compare(check, docs, graded_ndcg(base_v, grades), graded_ndcg(tuned_v, grades))
    assert row["items"] == len(docs) and row["unit"] == "documents" and row["metric"] == "graded nDCG@10 ×100"
    assert row["base"] > row["tuned"] and row["ci"][1] < 0 and row["verdict"] == "worse" and row["worse"] is True
    same = compare(check, docs, graded_ndcg(base_v, grades), graded_ndcg(base_v, grades))
    assert same["delta"] == 0 and same["verdict"] == "same"


def test_summary_and_json_rows_say_the_same_as_the_rows():
    rows = [
        {
            "name": "A",
            "what": "a",
            "base": 80.0,
            "tuned": 70.0,
            "delta": -10.0,
            "ci": [-12.0, -8.0],
            "verdict": "worse",
        },
        {"name": "B", "what": "b", "base": 50.0, "tuned": 55.0, "delta": 5.0, "ci": [3.0, 7.0], "verdict": "better"},
    ]
    assert "worse on 1 general check: A (a): 80.0 → 70.0" in summary(rows) and "blend at α = 0.5" in summary(rows)
    assert (
        summary(rows[1:]) == "General checks: the tuned model is no worse than the base on any of them and better on B."
    )
    out = json_rows(rows)
    assert out[0] == {
        "check": "A",
        "what": "a",
        "base": 80.0,
        "tuned": 70.0,
        "low": -12.0,
        "high": -8.0,
        "verdict": "worse",
    }
    assert [r["verdict"] for r in out] == ["worse", "better"]


def test_the_default_checks_include_both_document_checks_and_not_the_joined_sts_pairs():
    names = [c.name for c in CHECKS]
    assert "Long documents" in names and "Short articles" in names and "Joined STS pairs" not in names
    assert SHORT_ARTICLES.kind == "links" and SHORT_ARTICLES.unit == "documents" and "nDCG@10" in SHORT_ARTICLES.metric
    assert all(c.name in {x.name for x in checks.ALL_CHECKS} for c in CHECKS)


# -- python -m mirror check -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tuned_dir(tiny_bert, tmp_path_factory):
    config = MirrorConfig.preset("words", model=str(tiny_bert), pooling="mean", **{**TINY, "max_steps": 3})
    return save_result(mirror_tune(WORDS, config), tmp_path_factory.mktemp("check") / "tuned")


@pytest.fixture
def small_checks(monkeypatch):
    """The command on three small checks (one of each kind) over the shipped files, to stay fast."""
    short = Check(SHORT_ARTICLES.name, SHORT_ARTICLES.file, SHORT_ARTICLES.what, 200, kind="links")
    small = (Check("WordSim-353", "wordsim353.tsv", "word relatedness", 40), LONG_DOCS, short)
    monkeypatch.setattr(checks, "CHECKS", small)
    monkeypatch.setattr(checks, "LONG_DOCS", LONG_DOCS)
    return small


def test_cli_check_json_has_one_object_per_check_with_the_promised_keys(tuned_dir, small_checks, capsys):
    assert main(["check", str(tuned_dir), "--json", "--device", "cpu"]) == 0  # base: read from the folder
    out = json.loads(capsys.readouterr().out)
    assert [r["check"] for r in out] == [c.name for c in small_checks]
    for r in out:
        assert set(r) == {"check", "what", "base", "tuned", "low", "high", "verdict"}
        assert r["verdict"] in ("better", "same", "worse") and r["low"] <= r["high"]


def test_cli_check_against_itself_is_the_same_everywhere(tiny_bert, small_checks, capsys):
    assert main(["check", str(tiny_bert), "--base", str(tiny_bert), "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines if line.startswith(("WordSim-353", "Long documents", "Short articles"))]
    assert len(rows) == 3 and all("+0.0" in row and "same" in row for row in rows)
    assert lines[-1] == "General checks: the tuned model is no worse than the base on any of them."


def test_cli_check_errors_exit_2_with_a_message(tiny_bert, tmp_path, capsys):
    assert main(["check", str(tmp_path / "nowhere")]) == 2
    assert "error:" in capsys.readouterr().err
    assert main(["check", str(tiny_bert)]) == 2  # a plain folder names no base
    assert "does not name its base model; give --base" in capsys.readouterr().err
    assert main(["check", str(tiny_bert), "--base", "../up"]) == 2
    assert "error:" in capsys.readouterr().err


def test_an_operator_cap_scores_at_most_that_many_items_of_each_check_and_a_bad_value_is_refused_at_start():
    from explorer.settings import Settings

    assert checks.items_cap({"MIRROR_CHECK_ITEMS": "120"}) == 120
    assert checks.items_cap({}) == checks.items_cap({"MIRROR_CHECK_ITEMS": "many"}) == 0  # the settings refuse it
    small = checks.capped(checks.CHECKS, 120)
    assert [c.name for c in small] == [c.name for c in checks.CHECKS] and checks.capped(
        checks.CHECKS, 0
    ) == checks.CHECKS
    for full, capped in zip(checks.CHECKS, small, strict=True):
        n = len(checks.check_items(capped))
        assert n == min(120, len(checks.check_items(full))) and n > 0, capped.name
    long_docs = checks.check_items(small[3])
    assert len(set(long_docs.sources)) > 1  # a capped documents check keeps documents of several sources
    assert Settings.from_env({"MIRROR_CHECK_ITEMS": "120"}).check_items == 120
    with pytest.raises(MirrorError, match="MIRROR_CHECK_ITEMS"):
        Settings.from_env({"MIRROR_CHECK_ITEMS": "many"})
