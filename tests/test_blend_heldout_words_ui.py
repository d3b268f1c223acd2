"""A newcomer's pass (a 1,000-row Gene Ontology pairs run that chose α 0.25, then *Serve another α* → α 1): the
blend's verdict said its held-out figures were "Measured on run 48899504 before the blend, α = 1; this blend at
α = 1 was not measured", though they were measured on that run as it served α 0.25, and the checks' table showed
them in the "blend α=1" column unmarked. Both now name the α they were measured at. And What moved quoted a pasted
1,000-character filter whole ("0 strings matching “membrane protein complex membrane protein complex …"): its first
60 characters now."""

from __future__ import annotations

from types import SimpleNamespace

from mirror.pairs import PairGain
from ui.explore import CELL_CHARS, moved_head
from ui.render_pairs import blended, pairs_md, pairs_row


def served_blend(run_alpha: float, alpha: float, choice: dict | None = None) -> SimpleNamespace:
    figures = {"mrr10": 84.0, "r1": 78.0, "r10": 94.0}
    gain = PairGain(
        rows=50,
        string_column="text",
        partner_column="term",
        base=figures,
        tuned={"mrr10": 83.7, "r1": 78.0, "r10": 94.0},
        low={"mrr10": -3.3, "r1": -5.0, "r10": -2.0},
        high={"mrr10": 2.8, "r1": 5.0, "r10": 2.0},
    )
    pairs = SimpleNamespace(columns=("text", "term"), gain=gain, stats=None)
    record = SimpleNamespace(
        origin=SimpleNamespace(alpha=alpha, parent="48899504aaaa"),
        training=SimpleNamespace(run_alpha=run_alpha, pairs=pairs, blend_choice=choice),
    )
    return SimpleNamespace(record=record)


def test_a_blend_says_the_alpha_its_held_out_figures_were_measured_at():
    run = served_blend(run_alpha=0.25, alpha=1.0)
    said = blended(run)
    assert "Measured on run `48899504` as it served α = 0.25; its weights as trained, α 1, were not measured." in said
    assert "blend" not in said  # α 1 served again is the run as trained, not a blend (issue 60's newcomer)
    assert "before the blend, α = 1" not in said
    assert said in pairs_md(run)
    assert "| **your held-out pairs** (at α 0.25, not these weights as trained) | MRR@10 ×100 | 50 |" in pairs_row(run)
    again = served_blend(run_alpha=1.0, alpha=1.0)  # a run that chose α 1, served at α 1 again after another α
    assert "these weights" in blended(again) and "not measured" not in blended(again)
    assert "| **your held-out pairs** | MRR@10 ×100 | 50 |" in pairs_row(again)
    half = served_blend(run_alpha=0.25, alpha=0.5)
    assert "this blend at α = 0.5 was not measured" in blended(half)
    assert "| **your held-out pairs** (at α 0.25, not this blend) | MRR@10 ×100 | 50 |" in pairs_row(half)


CHOICE = {
    "alpha": 1.0,
    "base_mrr10": 54.4,
    "rows": 250,
    "pool": 2000,
    "reason": "α 1: the most held-out gain",
    "candidates": [
        {"alpha": 1.0, "mrr10": 57.5, "checks": {}, "noise": {}, "within": True},
        {"alpha": 0.75, "mrr10": 57.0, "checks": {}, "noise": {}, "within": None},
        {"alpha": 0.5, "mrr10": 56.0, "checks": {}, "noise": {}, "within": None},
    ],
}


def test_a_blend_its_run_measured_on_the_choice_rows_says_so_and_search_names_it():
    """A newcomer's pass (Debian package pairs, α 1 chosen, then *Serve another α* → 0.5): the verdict said "this
    blend at α = 0.5 was not measured" above a table whose α 0.5 row said 56.0, +1.6; the held-out sentence said
    "+0.9, no better" and the table "+3.2" for the same α 1 with no word of the two halves; Search's tables said
    "Tuned (mirror)" of the blend."""
    from ui.render import render_results, tuned_side

    half = served_blend(run_alpha=1.0, alpha=0.5, choice=CHOICE)
    said = blended(half)
    assert "this blend at α = 0.5 on the choice rows only: +1.6 in the table below" in said
    assert "not measured" not in said
    assert "These are its report rows: the blend was chosen on 250 other held-out rows" in pairs_md(half)
    unchosen = served_blend(run_alpha=1.0, alpha=0.25, choice=CHOICE)  # an α the choice did not measure
    assert "this blend at α = 0.25 was not measured" in blended(unchosen)
    assert "report rows" not in pairs_md(served_blend(run_alpha=1.0, alpha=0.5))  # no choice made: nothing to tell
    assert tuned_side(half) == "blend α=0.5" and tuned_side(served_blend(0.25, 1.0)) == "as trained α=1"
    hits = [{"query": "q", "tuned": [], "base": []}]
    assert "Tuned (mirror) · blend α=0.5" in render_results(hits, "bundled", served=tuned_side(half))
    assert "Tuned (mirror)</div>" in render_results(hits, "bundled")


def test_a_long_filter_is_quoted_by_its_start():
    pasted = ("membrane protein complex " * 40)[:1000]
    head = moved_head(0, 0, pasted)
    assert len(head) < CELL_CHARS + 40, head
    assert head.startswith("0 strings matching “membrane protein complex") and "…”" in head
    assert moved_head(3, 3, "membrane") == "3 strings matching “membrane”, most moved first."


def test_alpha_1_served_again_after_a_choice_points_at_its_row_in_the_table():
    """A newcomer's pass: *Serve another α* → 1 after a run chose α 0.75 said "its weights as trained, α 1, were not
    measured" right above the choice's table, whose α 1 row measured them (46.8, +10.9)."""
    chose = {**CHOICE, "alpha": 0.5}
    said = blended(served_blend(run_alpha=0.5, alpha=1.0, choice=chose))
    assert "its weights as trained, α 1, on the choice rows only: +3.1 in the table below" in said
    assert "not measured" not in said


def test_a_choice_s_reason_is_said_once_under_the_run():
    """A newcomer's pass: a pairs run's summary said its choice's reason twice, in "The blend this run chose" and
    again as a note box under the table."""
    from pathlib import Path

    from explorer.resources.record import record_of
    from ui.render import run_md

    reason = "α 0.75: the most held-out gain (+10.3 MRR@10 on 142 rows) of the blends that keep every check"
    stats = {"run_alpha": 0.75, "blend_choice": {**CHOICE, "alpha": 0.75, "reason": reason}, "notes": [reason, "other"]}
    run = SimpleNamespace(
        folder=Path("/runs") / ("c" * 32), record=record_of(stats), losses=[], n_texts=10, corpus="t.csv",
        base_model="bundled", pooling="mean",
    )  # fmt: skip
    said = run_md(run)
    assert said.count("the most held-out gain (+10.3") == 1 and "other" in said
