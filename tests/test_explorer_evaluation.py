"""The Evaluate tab: bootstrap intervals on Spearman, the pairs that moved most, the small-set note, progress with
the time left (explorer.compare.evaluation, mirror.evaluate), the service's report and the UI adapter.

Statistics are checked on synthetic scores and a hand-made encoder (a table of vectors): the tiny random model's
cosines mean nothing, so it only drives the service and UI plumbing."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

import app as mx
from explorer.compare import evaluation
from explorer.compare.evaluation import FEW_PAIRS, EtaClock, evaluate_sets
from explorer.events import Phase
from mirror.evaluate import bootstrap_spearman, interval, moved_pairs, spearman
from ui import render
from ui.render_eval import eval_chart, eval_table_rows, fmt_interval, served_columns


def noisy(n: int, noise: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Gold scores and cosines that follow them with `noise`."""
    rng = np.random.default_rng(seed)
    gold = rng.normal(size=n)
    return gold, gold + noise * rng.normal(size=n)


class TableEncoder:
    """An encoder whose vectors are given: `encode` looks strings up (unit vectors), reporting progress."""

    def __init__(self, vectors: dict[str, list[float]]):
        self.vectors = vectors

    def encode(self, texts, batch_size=128, normalize=True, on_progress=None):
        out = np.array([self.vectors[t] for t in texts], dtype=np.float32)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        for done in range(batch_size, len(texts), batch_size):
            if on_progress:
                on_progress(done, len(texts))
        if on_progress:
            on_progress(len(texts), len(texts))
        return out


def angle_pairs(gold: list[float], angles: list[float]) -> tuple[list[tuple[str, str, float]], dict]:
    """Pairs (a_i, b_i, gold_i) whose cosine under a TableEncoder is cos(angles_i)."""
    pairs, vectors = [], {}
    for i, (g, theta) in enumerate(zip(gold, angles, strict=True)):
        vectors[f"a{i}"], vectors[f"b{i}"] = [1.0, 0.0], [float(np.cos(theta)), float(np.sin(theta))]
        pairs.append((f"a{i}", f"b{i}", g))
    return pairs, vectors


# ---------------------------------------------------------------------------------------------- bootstrap


def test_bootstrap_intervals_hold_the_estimate_and_narrow_with_more_pairs():
    widths = []
    for n in (40, 1000):
        gold, cos = noisy(n, 1.0)
        samples = bootstrap_spearman(gold, cos, n_resamples=1000, seed=0)
        lo, hi = interval(samples[:, 0])
        assert lo < spearman(cos, gold) < hi
        widths.append(hi - lo)
    assert widths[1] < widths[0] / 3  # ~ 1/sqrt(n): 25x the pairs, about a fifth of the width


def test_bootstrap_resamples_are_scipys_spearman_and_paired_across_encoders():
    gold, base = noisy(200, 2.0, seed=1)
    tuned = np.round(gold + 0.5 * np.random.default_rng(2).normal(size=200), 1)  # ties, as gold sets have
    samples = bootstrap_spearman(np.round(gold, 1), base, tuned, n_resamples=3, seed=7)
    idx = np.random.default_rng(7).integers(0, 200, size=(3, 200))  # the same draws, made here
    for r in range(3):
        g = np.round(gold, 1)[idx[r]]
        assert samples[r, 0] == pytest.approx(scipy_stats.spearmanr(g, base[idx[r]]).statistic, abs=1e-12)
        assert samples[r, 1] == pytest.approx(scipy_stats.spearmanr(g, tuned[idx[r]]).statistic, abs=1e-12)
    again = bootstrap_spearman(np.round(gold, 1), base, tuned, n_resamples=3, seed=7)
    assert np.array_equal(samples, again)  # a fixed seed: the same interval every time


def test_a_constant_set_has_no_interval():
    samples = bootstrap_spearman([1.0, 1.0, 1.0, 1.0], [0.1, 0.2, 0.3, 0.4], n_resamples=50)
    assert np.isnan(samples).all() and interval(samples[:, 0]) is None
    assert fmt_interval(None) == "n/a"


def test_score_row_has_an_interval_per_encoder_and_for_the_change():
    gold, base = noisy(300, 2.0)
    tuned = gold + 0.3 * np.random.default_rng(3).normal(size=300)
    pairs = [(f"a{i}", f"b{i}", float(g)) for i, g in enumerate(gold)]
    row = evaluation.score_row("synthetic", pairs, {"base": base, "tuned": tuned})
    assert row["pairs"] == 300 and row["change"] == pytest.approx(row["tuned"] - row["base"], abs=1e-3)
    for key in ("base", "tuned", "change"):
        lo, hi = row[f"{key} 95% CI"]
        assert lo <= row[key] <= hi
    assert row["change 95% CI"][0] > 0  # tuning clearly helped here: the paired interval excludes zero
    shown = eval_table_rows([row])[0]
    assert shown["change"].startswith("+") and " – " in shown["base 95% CI"] and shown["change 95% CI"][0] == "+"


def test_the_chart_draws_a_bar_and_whisker_per_encoder_and_escapes_names():
    rows = [
        {"gold set": "<i>mine</i>", "pairs": 12, "base": -0.2, "base 95% CI": [-0.5, 0.1], "tuned": 0.4,
         "tuned 95% CI": None},
    ]  # fmt: skip
    page = eval_chart(rows, ("base", "tuned"))
    assert "&lt;i&gt;mine&lt;/i&gt;" in page and "<i>" not in page
    assert page.count('class="mx-eval-bar"') == 2 and page.count("95% interval -0.500 – 0.100") == 1
    assert "axis -0.50 to 1" in page  # a negative interval widens the axis below zero


# ---------------------------------------------------------------------------------------------- moved pairs


def test_moved_pairs_lists_the_most_helped_then_the_most_hurt():
    gold = [10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]  # gold rank i + 1 for pair i
    base = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]  # base ranks = gold ranks ...
    tuned = list(base)
    tuned[0], tuned[9] = 0.05, 1.5  # ... tuning swaps the ends: pair 0 goes 1 -> 10, pair 9 goes 10 -> 1
    base[4], tuned[4] = 0.05, 0.6  # pair 4: base rank 10 (gold 5), tuned back at 5 (helped by 5)
    pairs = [(f"a{i}", f"b{i}", g) for i, g in enumerate(gold)]
    rows = moved_pairs(pairs, base, tuned, n=3)
    # helped, most first: pair 4 back from base rank 10 to its gold rank 5; then 5 and 6, pushed one place
    # toward gold by pair 4's return
    assert [(r["pair"], r["toward gold"]) for r in rows[:3]] == [("a4 · b4", 5), ("a5 · b5", 1), ("a6 · b6", 1)]
    assert (rows[0]["gold rank"], rows[0]["base rank"], rows[0]["tuned rank"]) == (5, 10, 5)
    # then hurt, most first: pair 0 from rank 1 (its gold rank) to 10, pair 9 from 9 to 1 (gold 10)
    assert [(r["pair"], r["toward gold"]) for r in rows[3:]] == [("a0 · b0", -9), ("a9 · b9", -8)]


def test_moved_pairs_skip_pairs_that_did_not_move():
    pairs = [(f"a{i}", f"b{i}", float(i)) for i in range(6)]
    same = [0.1 * i for i in range(6)]
    assert moved_pairs(pairs, same, same) == []


# ---------------------------------------------------------------------------------------------- evaluate_sets


def test_evaluate_sets_reports_progress_notes_small_sets_and_moved_pairs():
    gold = [float(i) for i in range(FEW_PAIRS + 10)]
    pairs, vectors = angle_pairs(gold, [1.5 - 0.02 * i for i in range(len(gold))])  # cosine rises with gold
    big = ("big set", pairs)
    small = ("small set", pairs[:12])
    tuned = TableEncoder(vectors)
    base_vectors = dict(vectors)
    base_vectors["b0"], base_vectors["b59"] = vectors["b59"], vectors["b0"]  # the base swaps the two extremes
    seen: list[Phase] = []
    report = evaluate_sets([big, small], [("base", TableEncoder(base_vectors)), ("tuned", tuned)], seen.append)
    assert [r["gold set"] for r in report.rows] == ["big set", "small set"] and report.encoders == ("base", "tuned")
    assert report.rows[0]["tuned"] == pytest.approx(1.0) and report.rows[0]["base"] < 1.0
    assert len(report.notes) == 1 and "`small set` has only 12 pairs" in report.notes[0]
    assert {m["pair"] for m in report.moved if m["gold set"] == "big set"} >= {"a0 · b0", "a59 · b59"}
    total = 2 * (2 * len(pairs) + 2 * 12)  # every distinct string once per encoder
    assert all(p.total == total for p in seen) and seen[-1].done == total
    assert [p.done for p in seen] == sorted(p.done for p in seen)  # never goes back
    assert "small set with the tuned encoder" in seen[-1].text


def test_the_eta_is_measured_from_the_first_report(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(evaluation.time, "monotonic", lambda: now[0])
    clock = EtaClock()
    now[0] = 160.0  # a minute loading models: not counted
    assert clock.left(0, 1000) == ""
    now[0] = 170.0
    assert clock.left(250, 1000) == "about 30 s left"  # 250 strings in 10 s, 750 to go
    now[0] = 189.0
    assert clock.left(990, 1000) == "almost done"  # not "about under a second left"
    assert clock.left(1000, 1000) == ""


# ---------------------------------------------------------------------------------------------- service and UI


def test_the_service_keeps_its_rows_and_adds_intervals_and_notes(app, tuned, tmp_path):
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("cat dog 8\ncar bus 7\nred moon 1\nsun moon 6\nman woman 7\n")
    rows = app.searcher.evaluate(tuned, [], str(pairs))
    assert {"gold set", "pairs", "base", "tuned", "change", "base 95% CI", "tuned 95% CI"} <= set(rows[0])
    seen: list[Phase] = []
    report = app.searcher.evaluate_report(tuned, ["WordSim-353"], str(pairs), seen.append)
    assert [r["gold set"] for r in report.rows] == ["WordSim-353", "pairs.txt"]
    assert report.notes == [n for n in report.notes if "pairs.txt" in n] and "only 5 pairs" in report.notes[0]
    assert {m["gold set"] for m in report.moved} <= {"WordSim-353", "pairs.txt"}
    assert seen and seen[-1].done == seen[-1].total
    assert report.run is tuned.run  # the page names it (its caption: ui.render.run_caption)
    caption = render.run_caption(report.run)
    assert f"Run `{tuned.run.folder.name[:8]}`" in caption and tuned.run.corpus in caption


def test_an_evaluation_names_the_run_it_scored_even_when_another_is_served_by_then(app, tuned, tmp_path):
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("cat dog 8\ncar bus 7\nred moon 1\nsun moon 6\nman woman 7\n")
    scored = tuned.run

    def swap(ev: Phase) -> None:  # another run is served while this evaluation encodes
        tuned.run = None

    report = app.searcher.evaluate_report(tuned, [], str(pairs), swap)
    assert report.encoders == ("base", "tuned") and report.run is scored
    assert scored.folder.name[:8] in render.run_caption(report.run)
    assert "Base encoder only" in render.run_caption(app.searcher.evaluate_report(tuned, [], str(pairs)).run)


def test_the_evaluate_tab_names_a_served_blend_as_the_blend(app, tuned, tmp_path):
    """A newcomer pass: after a blend, tab ③ headed its columns and bars "tuned" (the other tabs say "blend α=0.5");
    the blend's columns, bars and moved-pair ranks now carry its name (runfacts.served_label)."""
    fns = {f.name: f for f in mx.build_demo(app).fns.values()}
    assert list(app.saved.blend_run(tuned, 0.5))[-1].kind == "done"
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("cat dog 8\ncar bus 7\nred moon 1\nsun moon 6\nman woman 7\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        md, table, bars, header, moved, _ = fns["on_eval"].fn([], str(pairs), tuned)
    assert "blend α=0.5" in md  # the caption (render.blend_part)
    parent = tuned.run.stats["blended_from"]  # the moved pairs' heading too (it said "moved most with tuning")
    assert header.startswith(f"**Pairs whose rank moved most with the blend (α = 0.5 of run `{parent[:8]}`).**")
    columns = list(table["value"].columns)
    assert columns[:5] == ["gold set", "pairs", "base", "base 95% CI", "blend α=0.5"]
    assert "blend α=0.5 95% CI" in columns and not any(c.startswith("tuned") for c in columns)
    assert bars.count(">blend α=0.5</span>") == 1 and ">tuned<" not in bars
    seen: list[Phase] = []
    report = app.searcher.evaluate_report(tuned, [], str(pairs), seen.append)
    rows = report.rows
    assert render.moved_header(report.run) == header  # the report names its run, whatever is served by the time
    assert rows[0]["tuned"] is not None  # the service's rows (the API's) keep their keys
    said = {p.text for p in seen}
    assert "Encoding pairs.txt with the blend α=0.5 encoder" in said and not any("tuned" in t for t in said)
    row = {"gold set": "s", "pair": "a · b", "base rank": 2, "tuned rank": 1, "toward gold": 1}
    assert list(served_columns(row, "blend α=0.5")) == [
        "gold set",
        "pair",
        "base rank",
        "blend α=0.5 rank",
        "toward gold",
    ]
    assert served_columns(row, "tuned") == row


def test_the_evaluate_adapter_draws_scores_bars_and_moved_pairs(app, tuned, tmp_path):
    fns = {f.name: f for f in mx.build_demo(app).fns.values()}
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("cat dog 8\ncar bus 7\nred moon 1\nsun moon 6\nman woman 7\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        md, table, bars, header, moved, session = fns["on_eval"].fn([], str(pairs), tuned)
    assert session is tuned and "only 5 pairs" in md and "bootstrap 95% intervals" in md
    assert header.startswith("**Pairs whose rank moved most with tuning.**")
    assert md.startswith(f"Run `{tuned.run.folder.name[:8]}`")  # the panel says which run it belongs to
    assert table["visible"] is True  # hidden until there is a result (issue 28: no empty "1 · 2 · 3" table)
    table = table["value"]
    assert "base 95% CI" in table.columns and "tuned 95% CI" in table.columns
    assert bars.count('class="mx-eval-bar"') == 2 and session.run is not None  # base and tuned
    # two tiny steps of a random model may move no pair: then the table says so
    assert list(moved.columns)[:2] == ["gold set", "pair"] or "no pair changed rank" in str(moved.iloc[0, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        md, *_ = fns["on_eval"].fn([], str(Path(tmp_path / "missing.txt")), tuned)
    assert md.startswith("> **Error:**")  # a Markdown output: the Markdown error box


def test_an_evaluation_is_capped_in_pairs_and_can_be_cancelled(app, tuned, tmp_path):
    """Issue 37: a 1 MB pairs file (45k pairs) took 220 CPU-s and could not be stopped; only its size was checked."""
    import dataclasses

    from mirror.errors import MirrorError

    many = tmp_path / "many.txt"
    many.write_text("".join(f"cat{i} dog{i} {i % 10}\n" for i in range(60)))
    app.settings = dataclasses.replace(app.settings, max_pairs=50)
    with pytest.raises(MirrorError, match="holds 60 pairs; this server scores up to 50.*MIRROR_MAX_PAIRS"):
        app.searcher.evaluate(tuned, [], str(many))
    app.settings = dataclasses.replace(app.settings, max_pairs=5000)
    batches: list[Phase] = []

    def cancel_after_the_first(ev: Phase) -> None:
        batches.append(ev)
        if ev.done:
            app.searcher.cancel_evaluation(tuned)  # the Cancel button, from another request

    with pytest.raises(MirrorError, match="Evaluation cancelled"):
        app.searcher.evaluate_report(tuned, ["SimLex-999", "WordSim-353"], None, cancel_after_the_first)
    assert batches[-1].done < batches[-1].total  # it stopped before the end
    assert app.searcher.evaluate(tuned, ["WordSim-353"])[0]["pairs"] > 300  # the next one runs from the start
