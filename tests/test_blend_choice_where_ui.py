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
    training = SimpleNamespace(blend_choice=choice, run_alpha=0.25)
    run = SimpleNamespace(record=SimpleNamespace(training=training, origin=SimpleNamespace(alpha=None, parent=None)))
    said = blend_choice_md(run)
    assert "under *Serve another α* (④ Explore, *Space health and general checks*;" in said
    assert "| α 0.25 (served) ← chosen | 71.6 | +3.3 |" in said
