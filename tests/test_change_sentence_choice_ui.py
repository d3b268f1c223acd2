"""A newcomer's pass (a 1,000-row Gene Ontology pairs run that chose α 0.25 among 1 / 0.75 / 0.5 / 0.25): the summary
said "the run blended its weights with the base's at α 0.25 to keep general ability (the preset's default; …). To
tune harder, raise *Blend with the base after training: α* toward 1 … in Advanced settings", though the pairs preset's
α is 0.5 and the run chose 0.25, its other α one click away; after *Serve another α* → α 1 it said "the served model
is a blend, α = 1 of the tuned weights. A blend nearer α 1 (or the run itself) changes more"."""

from __future__ import annotations

from types import SimpleNamespace

from ui.render import change_sentence


def run_of(run_alpha: float, choice: dict | None, blend: float | None = None) -> SimpleNamespace:
    training = SimpleNamespace(run_alpha=run_alpha, steps=70, epochs=10, blend_choice=choice)
    origin = SimpleNamespace(alpha=blend, parent="48899504aaaa" if blend is not None else None)
    return SimpleNamespace(record=SimpleNamespace(training=training, neighbours_changed=0.09, origin=origin))


CHOICE = {"alpha": 0.25, "candidates": [{"alpha": a} for a in (1.0, 0.75, 0.5, 0.25)]}


def test_a_run_that_chose_its_blend_says_so_and_where_the_others_are():
    said = change_sentence(run_of(0.25, CHOICE))
    assert "at α 0.25, the blend it chose" in said
    assert "the preset's default" not in said and "Advanced settings" not in said
    assert "serve a higher α under *Serve another α* (④ Explore" in said


def test_a_preset_blend_still_says_it_is_the_preset_s():
    said = change_sentence(run_of(0.25, None))
    assert "the preset's default" in said and "Advanced settings" in said


def test_alpha_1_served_is_the_weights_as_trained_not_a_blend_nearer_1():
    said = change_sentence(run_of(0.25, CHOICE, blend=1.0))
    assert "the tuned weights as trained (α 1)" in said and "nearer α 1" not in said
    assert "nearer α 1" in change_sentence(run_of(0.25, CHOICE, blend=0.5))
