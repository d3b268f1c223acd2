"""A newcomer's pass: Tab ①'s verdict said "Serve another with one click under *Serve another α*", a control that is
on ④ Explore, inside the closed *Space health and general checks* accordion; it says where."""

from __future__ import annotations

from types import SimpleNamespace

from ui.render_pairs import blend_choice_md


def test_the_chosen_blend_says_where_serve_another_alpha_is():
    choice = {
        "alpha": 0.25,
        "base_mrr10": 68.3,
        "rows": 50,
        "pool": 1000,
        "reason": "α 0.25: the most held-out gain",
        "candidates": [{"alpha": 1.0, "mrr10": 76.2, "within": False}, {"alpha": 0.25, "mrr10": 71.6, "within": True}],
    }
    training = SimpleNamespace(blend_choice=choice, run_alpha=0.25, pairs=None)
    run = SimpleNamespace(record=SimpleNamespace(training=training, origin=SimpleNamespace(alpha=None, parent=None)))
    said = blend_choice_md(run)
    assert "under *Serve another α* (④ Explore, *Space health and general checks*;" in said
    assert "| α 0.25 (served) ← chosen | 71.6 | +3.3 |" in said


def chose(report_low: float, report_high: float, reported: float) -> SimpleNamespace:
    """A run that chose α 0.25 (+3.4 on its 50 choice rows) and reported `reported` [low, high] on 50 other rows."""
    from mirror.pairs import PairGain

    choice = {
        "alpha": 0.25,
        "base_mrr10": 70.0,
        "rows": 50,
        "pool": 1000,
        "reason": "α 0.25: the most held-out gain",
        "candidates": [{"alpha": 1.0, "mrr10": 76.2, "within": False}, {"alpha": 0.25, "mrr10": 73.4, "within": True}],
    }
    gain = PairGain(
        rows=50,
        string_column="text",
        partner_column="term",
        base={"mrr10": 60.0, "r1": 50.0, "r10": 80.0},
        tuned={"mrr10": 60.0 + reported, "r1": 50.0, "r10": 80.0},
        low={"mrr10": report_low},
        high={"mrr10": report_high},
    )
    pairs = SimpleNamespace(gain=gain, held_out=100)
    training = SimpleNamespace(blend_choice=choice, run_alpha=0.25, pairs=pairs)
    return SimpleNamespace(record=SimpleNamespace(training=training, origin=SimpleNamespace(alpha=None, parent=None)))


def test_a_choice_its_report_rows_contradict_is_said_not_left_as_two_tables():
    """Issue 60's newcomer: a 1,000-row file's choice rows measured the chosen α at +3.4, the report rows at -0.3,
    on one page with no word of why."""
    said = blend_choice_md(chose(-3.3, 2.8, -0.3))
    assert "The two halves disagree: on its 50 choice rows α 0.25 gained +3.4 MRR@10" in said
    assert "on the 50 report rows above -0.3 (-3.3 to +2.8, 95%)" in said
    assert "disagree" not in blend_choice_md(chose(1.0, 6.0, 3.0))  # +3.4 inside the report's interval: nothing to say


def test_a_fallback_choice_is_not_said_to_be_picked_for_its_score():
    """A newcomer's pass: no α kept the rule, α 0.25 (the lowest held-out score) was served as the fallback, and the
    note under the table said "The choice rows picked this α for scoring highest on them"."""
    run = chose(-3.3, 2.8, -0.3)
    choice = run.record.training.blend_choice
    choice["reason"] = "α 0.25: no blend kept every general check within half a margin of the base; the lowest"
    for c in choice["candidates"]:
        c["within"] = False
    said = blend_choice_md(run)
    assert "The two halves disagree" in said and "for scoring highest" not in said
    assert "served because no blend kept every check (the lowest is), not for its score" in said
    assert "for scoring highest on them" in blend_choice_md(chose(-3.3, 2.8, -0.3))  # a choice by score says so


def test_the_worst_check_says_what_the_rule_asks_of_it():
    """A newcomer's pass: "Short articles -0.2 ± 0.3 … no" read as arbitrary with no margin on the page. The worst
    check's cell says the least change the rule accepts for it (mirror.choose.room_left >= 0)."""
    from ui.render_pairs import MARGINS

    run = chose(-3.3, 2.8, -0.3)
    cand = run.record.training.blend_choice["candidates"][1]
    cand["checks"], cand["noise"] = {"Short articles": -0.2, "SimLex-999": 1.0}, {"Short articles": 0.3}
    half = 0.5 * MARGINS["Short articles"]
    bound = min(0.3, half) - half
    assert f"Short articles -0.20 ± 0.30 (the rule: ≥ {bound:+.2f})" in blend_choice_md(run)
