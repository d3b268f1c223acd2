"""A newcomer's pass (an acronym CSV, 600 GO terms each with its initials, tuned as pairs): the Search header offered
a held-out example neither model finds and said "RDR (its term: regulation of DNA recombination): the base finds it
not in its top 10 too (the tuned model not in its top 10), as it does each of the held-out rows kept to try". It says
that neither model finds it."""

from __future__ import annotations

from ui.render_pairs import found_by


def test_an_example_neither_model_finds_says_so():
    said = found_by({"better": False, "tuned_rank": None, "base_rank": None})
    assert "finds it not in its top 10 too" not in said
    assert said.startswith(": neither model finds it in its top 10")


def test_the_other_examples_keep_their_words():
    assert found_by({"better": True, "tuned_rank": 1, "base_rank": 3}) == (
        ": the tuned model finds it at rank 1, the base at rank 3"
    )
    assert found_by({"better": False, "tuned_rank": 2, "base_rank": 1}).startswith(": the base finds it at rank 1 too")
