"""Every kind of run is stopped alike and says so (issue 59's leftovers): Cancel says what the stop does for a model
upload and a blend (not "after the current step", which only a training has); the wall-clock cap
(MIRROR_MAX_RUN_SECONDS) stops an upload and a blend too, counted from its folder like a training's; the page's
saved-zip handler shows a cancelled upload's message, as the blend's does.

Cancels are made while the run's thread is held inside its index build (tests.test_explorer_stops.gate_index);
nothing waits on time."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from explorer.events import Cancelled, Phase
from tests.test_explorer_stops import BASE, BLEND, HANG, assert_previous_served, gate_index, started


@pytest.mark.parametrize("kind,label,says", [("upload", BASE, "model upload"), ("blend", BLEND, "blend")])
def test_cancel_says_what_the_stop_does_for_each_kind(app, tuned, monkeypatch, kind, label, says):
    previous = tuned.run
    with gate_index(monkeypatch, app, tuned, label, lambda ev: True) as gate:
        events = (
            app.saved.use_saved_model(tuned, str(previous.model_zip))
            if kind == "upload"
            else app.saved.blend_run(tuned, 0.5)
        )
        run = started(app, tuned, events)
        assert gate["reached"].wait(HANG)
        answer = app.trainer.cancel(tuned)
        gate["release"].set()
        rest = list(events)
    assert answer.startswith("Stopping") and says in answer and "step" not in answer, answer
    assert "previous model and index stay served" in answer
    assert rest[-1].kind == "cancelled"
    assert_previous_served(app, tuned, previous, run)


@pytest.mark.parametrize("kind", ["upload", "blend"])
def test_the_time_cap_stops_an_upload_and_a_blend(app, tuned, kind):
    """MIRROR_MAX_RUN_SECONDS counts from the run's folder for every kind: a cap of a nanosecond is past as soon as
    the run has begun making it, and the run ends at its next phase, nothing of it served."""
    previous = tuned.run
    app.settings = dataclasses.replace(app.settings, max_run_seconds=1e-9)
    events = list(
        app.saved.use_saved_model(tuned, str(previous.model_zip))
        if kind == "upload"
        else app.saved.blend_run(tuned, 0.5)
    )
    assert events[-1].kind == "cancelled" and "MIRROR_MAX_RUN_SECONDS" in events[-1].text, events[-1]
    assert tuned.run is previous and [p.name for p in app.runs.root.iterdir()] == [previous.folder.name]


def test_the_saved_zip_handler_shows_a_cancelled_upload(app, tuned, monkeypatch):
    import app as mx

    text = "Cancelled before it was served; nothing was saved."

    def cancelled(session, path):
        yield Phase("Unpacking the model")
        yield Cancelled(text)

    monkeypatch.setattr(app.saved, "use_saved_model", cancelled)
    fns = {f.name: f for f in mx.build_demo(app).fns.values()}
    with warnings.catch_warnings():  # its gr.Warning, outside a request: a Python warning
        warnings.simplefilter("ignore")
        shown = list(fns["on_saved_zip"].fn("mirror-model.zip", {}, tuned))[-1]
    said = [v for v in shown.values() if isinstance(v, str) and text in v]
    assert said, f"the cancelled upload's message is not shown: {shown}"
    assert tuned.run is not None  # the previous run, still served
