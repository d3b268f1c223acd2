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


def served_blend(run_alpha: float, alpha: float) -> SimpleNamespace:
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
        training=SimpleNamespace(run_alpha=run_alpha, pairs=pairs),
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


def test_a_long_filter_is_quoted_by_its_start():
    pasted = ("membrane protein complex " * 40)[:1000]
    head = moved_head(0, 0, pasted)
    assert len(head) < CELL_CHARS + 40, head
    assert head.startswith("0 strings matching “membrane protein complex") and "…”" in head
    assert moved_head(3, 3, "membrane") == "3 strings matching “membrane”, most moved first."
