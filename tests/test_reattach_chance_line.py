"""A newcomer's pass (a 1,000-row Gene Ontology pairs run, the page reloaded at step 2): before the reload the loss
curve drew the run's own "knows nothing (pairs)" line (at ~2.3 on that run); after it, the reattached page drew only
"each step" and "smoothed" for the rest of the run. The reattached view measured the line on the reloaded page's own
session, which holds no strings until the run ends; it is measured on the run's strings and partners now."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import app as mx
from explorer import MirrorApp, Settings
from explorer.runs.live import Run
from mirror.data import AUTO
from mirror.job import Step
from tests.conftest import TINY, VOCAB_WORDS
from ui import render

ROWS = [f"{a} {b} {c}" for a in VOCAB_WORDS[:8] for b in VOCAB_WORDS[4:10] for c in ("cat", "dog")]


@pytest.fixture(scope="module")
def ui(tmp_path_factory, tiny_bert):
    work = tmp_path_factory.mktemp("ui")
    a = MirrorApp(Settings(work_dir=work / "sessions", model_roots=(Path(tiny_bert).resolve(),), general_checks=False))
    return a, {f.name: f for f in mx.build_demo(a).fns.values()}


def curve_series(update: dict) -> set[str] | None:
    """The series the loss curve of a page update draws, None where the update does not draw it."""
    for component, value in update.items():
        if getattr(component, "elem_id", None) == "mx-loss" and isinstance(value, dict) and "value" in value:
            frame = value["value"]
            return set(frame["series"]) if frame is not None else None
    return None


def test_a_page_reloaded_during_a_pairs_run_still_draws_its_knows_nothing_line(ui, tiny_bert, tmp_path):
    app, fns = ui
    path = tmp_path / "glossary.csv"
    body = "\n".join(f"{' '.join(r.split()[:2])}-{i},{r} here and {VOCAB_WORDS[i % 14]}" for i, r in enumerate(ROWS))
    path.write_text("name,summary\n" + body + "\n", encoding="utf-8")
    launching = app.session()
    app.loader.load_file(launching, str(path), None, "glossary.csv", AUTO)
    assert launching.partners is not None
    # what the page holds at Launch (mean pooling: the tiny random BERT's [CLS] puts every text at one point)
    app.planner.hold(launching, str(tiny_bert), "auto", {**TINY, "distill": 10.0, "pooling": "mean"})

    run = app.registry.asked(launching) or Run(launching)
    run.strings, run.texts = (len(launching.texts), "glossary.csv"), tuple(launching.texts)
    run.partners, run.pair_columns = tuple(launching.partners), launching.pairing.columns()
    assert app.registry.begin(run)
    run.admit()

    reloaded = app.session()  # the page after a reload: a new session, with no strings of its own
    drawn = fns["on_load"].fn({"runs": [], "active": run.id}, reloaded, None)
    next(drawn)  # "Reattached to your run…"
    run.publish(Step(step=1, total=10, loss=2.0, eta=30.0, batch=8))
    run.publish(Step(step=2, total=10, loss=1.9, eta=27.0, batch=8))
    series = None
    for _ in range(20):  # heartbeats' views may come first
        series = curve_series(next(drawn))
        if series and "smoothed" in series:
            break
    assert series is not None and "smoothed" in series, series
    assert render.CHANCE_SERIES in series, series

    app.trainer.cancel(reloaded)
    from explorer.events import Cancelled

    run.publish(Cancelled("Cancelled after 2 of 10 steps; nothing was saved."))
    app.registry.end(run)
    run.end()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        list(drawn)
