"""What a user's pass in Chromium after issue 59's one follow loop found in how the page draws a run (ui/runs.py,
ui/tune.py): Cancel's "Stopping after the current step…" was replaced a second later by the next step's line and
its ETA, as if Cancel had not been heard; a model upload's phases were a bare timer over the whole greyed Tune tab;
the loss curve's caption was cut off at the bottom of its fixed-height box."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import app as mx
from explorer import MirrorApp, Settings
from explorer.events import Cancelled
from explorer.runs.live import Run
from mirror.job import Phase, Step


@pytest.fixture(scope="module")
def ui(tmp_path_factory, tiny_bert):
    work = tmp_path_factory.mktemp("ui")
    a = MirrorApp(Settings(work_dir=work / "sessions", model_roots=(Path(tiny_bert).resolve(),), general_checks=False))
    return a, {f.name: f for f in mx.build_demo(a).fns.values()}


def status(update: dict) -> str:
    return str(next((v for c, v in update.items() if getattr(c, "elem_id", None) == "mx-status"), ""))


def followed(app: MirrorApp, fns: dict) -> tuple:
    """A running run of three strings, followed by a page as Launch's handler or a reloaded page follows it
    (RunView.draw over the run's events): (its session, the run, the page's views)."""
    session = app.session()
    run = app.registry.asked(session) or Run(session)
    run.strings, run.texts = (3, "three.txt"), ("cat", "dog", "bird")
    assert app.registry.begin(run)
    run.admit()
    drawn = fns["on_load"].fn({"runs": [], "active": run.id}, session, None)
    assert "Reattached to your run" in status(next(drawn))
    return session, run, drawn


def ended(app: MirrorApp, run: Run, event: object, drawn: Iterator[dict]) -> list[dict]:
    """The run ends with `event` (Cancelled, …): the page's views from there to the end."""
    run.publish(event)
    app.registry.end(run)
    run.end()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(drawn)


def test_after_cancel_each_redraw_says_the_run_stops_not_its_time_left(ui):
    app, fns = ui
    session, run, drawn = followed(app, fns)
    run.publish(Step(step=1, total=10, loss=2.0, eta=30.0, batch=3))
    line = ""
    while "step 1 / 10" not in line:  # a heartbeat's view may come first
        line = status(next(drawn))
    assert "ETA 30 s" in line and "Stopping" not in line

    said = app.trainer.cancel(session)  # what Cancel's handler calls and shows (ui.runs.wire_training.on_cancel)
    assert "Stopping after the current step" in said
    time.sleep(1.1)  # the next view (at most one a second), with the step the run was in when Cancel came
    run.publish(Step(step=2, total=10, loss=1.9, eta=27.0, batch=3))
    while "step 2 / 10" not in line:
        line = status(next(drawn))
    assert "Stopping after this step" in line and "ETA" not in line, line
    assert "nothing is served yet" in line  # no earlier model: none is said to stay served

    ends = [status(u) for u in ended(app, run, Cancelled("Cancelled after 2 of 10 steps; nothing was saved."), drawn)]
    assert any("Cancelled after 2 of 10 steps" in s for s in ends), ends


def shown(update: dict, elem_id: str) -> object:
    """What a view sets of the component `elem_id` (None: left as it is)."""
    return next((v for c, v in update.items() if getattr(c, "elem_id", None) == elem_id), None)


def test_serve_the_first_training_is_offered_during_a_second_training_only_and_then_said(ui, tmp_path):
    """*Serve the first training* (ui.runs, Trainer.serve_first): hidden while the first training goes on, shown once a
    second one does; clicked, the next redraws say the second training stops after this step and the first is served
    (not its time left), and the button is not offered again."""
    app, fns = ui
    session, run, drawn = followed(app, fns)
    run.begins(tmp_path)
    run.publish(Step(step=1, total=10, loss=2.0, eta=30.0, batch=3))
    views = [next(drawn)]
    while "step 1 / 10" not in status(views[-1]):
        views.append(next(drawn))
    assert not any(shown(v, "mx-first") for v in views)  # the first training: nothing to offer
    time.sleep(1.1)
    run.publish(Step(step=1, total=8, loss=2.0, eta=40.0, batch=3, training=2))
    views = [next(drawn)]
    while "Training again" not in status(views[-1]):
        views.append(next(drawn))
    assert shown(views[-1], "mx-first")["visible"] is True and "ETA 40 s" in status(views[-1])

    said, hidden, _ = fns["on_first"].fn(session)  # the button's handler
    assert "Stopping the second training after this step" in said and hidden["visible"] is False
    assert (tmp_path / "FIRST").exists()  # what the job reads between its steps (mirror.job.Outlasting)
    time.sleep(1.1)
    run.publish(Step(step=2, total=8, loss=1.9, eta=35.0, batch=3, training=2))
    views = [next(drawn)]
    while "step 2 / 8" not in status(views[-1]):
        views.append(next(drawn))
    line = status(views[-1])
    assert "Stopping the second training after this step" in line and "ETA" not in line, line
    # hidden by the redraws too: every page following the run (the click hid it on this page only)
    assert [(shown(v, "mx-first") or {}).get("visible") for v in views].count(False) == 1
    assert not any((shown(v, "mx-first") or {}).get("visible") for v in views)
    assert fns["on_first"].fn(session)[0].count("Asked already") == 1  # clicked again (another page of it)
    (tmp_path / "FIRST").unlink()
    run.publish(Phase("Choosing the blend of the second training", 0, 0))  # past its steps: too late to ask
    assert app.trainer.serve_first(session).startswith("The second training has ended its steps")
    ends = ended(app, run, Cancelled("Cancelled after 2 of 8 steps of its second training; nothing was saved."), drawn)
    assert any(status(v) and (shown(v, "mx-first") or {}).get("visible") is False for v in ends)  # gone with the run


def test_a_model_upload_and_a_blend_say_each_phase_on_their_own_line(ui):
    """Gradio draws a progress's text only with a number: `progress(None, desc=...)` showed a bare timer, and a model
    upload greyed out the whole Tune tab (every output of the event) while it waited, minutes behind another
    visitor's run, for a training slot. Each phase now reaches the progress with a number, on the upload's own line
    (as a blend's)."""
    from explorer.events import Phase
    from explorer.runs.follow import Progress
    from ui.runs import TrainView

    app, fns = ui
    upload = fns["on_saved_zip"]
    saved_md = upload.outputs[0]  # the note under the upload: its progress shows there, not over the whole tab
    assert [c._id for c in upload.show_progress_on] == [saved_md._id]
    told: list = []
    view = TrainView(lambda *a, **k: told.append((a, k)))
    for phase in (Phase("Waiting for a training slot (1 job ahead of yours)"), Phase("Indexing", done=3, total=10)):
        now = Progress()
        now.take(phase)
        view.show(now)
    (waiting, _), (indexing, _) = told
    assert waiting[0] == 0.0 and "training slot" in told[0][1]["desc"]
    assert indexing[0] == (3, 10) and told[1][1]["unit"] == "strings"


def test_the_loss_curve_has_no_fixed_height_that_cuts_its_caption(ui):
    """Gradio gives a plot's `height` to its whole box (overflow hidden) and puts the caption under the chart: with
    height=260 the caption ("1 = a model that knows nothing…") was cut in half at the box's bottom edge (seen in
    Chromium, desktop and phone). Without it the box grows to the chart (Vega's default height) and its caption."""
    import gradio as gr

    app, fns = ui
    demo = mx.build_demo(app)
    (curve,) = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "mx-loss"]
    assert isinstance(curve, gr.LinePlot) and curve.caption and curve.height is None


def test_a_blend_refused_while_the_served_run_is_checked_says_why_and_keeps_the_served_alpha_picked(ui, tiny_bert):
    """A pairs run served before its general checks offers "Serve another α" at once; a click meanwhile was refused
    with "A run is already in progress in this session; wait for it or cancel it" (Cancel cannot stop the checks),
    and the picker kept the refused α selected, as if it were served. It now says the checks are running, and the
    picker is set back on the served run's α."""
    from tests.conftest import tuned_session

    app, fns = ui
    session = tuned_session(app, tiny_bert)
    served = session.run
    run = Run(session)
    assert app.registry.begin(run)
    run.admit()
    run.commit()
    run.serving(served)  # served, its general checks running
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (shown,) = list(fns["on_blend"].fn(1.0, None, session))
        said = {getattr(c, "elem_id", None): v for c, v in shown.items()}
        assert "general checks are still running" in said["mx-blend-md"] and "cancel" not in said["mx-blend-md"]
        picker = said["mx-choice"]  # back on the served α (a run without α to pick: hidden, none picked)
        assert picker["value"] is None and picker["visible"] is False
        assert session.run is served
    finally:
        run.publish(Cancelled("test over"))
        app.registry.end(run)
        run.end()


def test_the_lines_that_carry_a_blend_s_and_an_upload_s_progress_have_room_for_it(ui):
    """Gradio draws an event's progress over the components named in show_progress_on; over an empty Markdown (no
    height) the text ("Waiting for a training slot (1 job ahead of yours)", "Indexing your strings with the blend")
    was in the page but drawn nowhere (measured in Chromium: its box 0 px high). Both lines keep room for it."""
    import gradio as gr

    app, fns = ui
    for name, elem_id in (("on_saved_zip", "mx-saved-md"), ("on_blend", "mx-blend-md")):
        (line,) = fns[name].show_progress_on
        assert isinstance(line, gr.Markdown) and line.elem_id == elem_id
        assert (line.min_height or 0) >= 48, (name, line.min_height)


def test_a_cancelled_run_leaves_the_served_runs_loss_curve_under_its_summary(ui, tiny_bert):
    """A newcomer's pass: after Cancel at step 4 the chart drew the cancelled run's 4 steps right above "Done: your
    tuned model is served (run …) · Steps 54 / 54". With a run served, the chart is that run's, as its summary is."""
    from tests.conftest import tuned_session

    app, fns = ui
    session = tuned_session(app, tiny_bert)
    served = session.run
    assert served is not None and len(served.losses) >= 2
    run = app.registry.asked(session) or Run(session)
    run.strings, run.texts = (3, "three.txt"), ("cat", "dog", "bird")
    assert app.registry.begin(run)
    run.admit()
    drawn = fns["on_load"].fn({"runs": [], "active": run.id}, session, None)
    next(drawn)
    for step in range(1, 4):
        run.publish(Step(step=step, total=10, loss=2.0 - step / 10, eta=30.0, batch=3))
    ends = ended(app, run, Cancelled("Cancelled after 3 of 10 steps; nothing was saved."), drawn)
    last = next(u for u in reversed(ends) if "Cancelled after 3 of 10 steps" in status(u))
    assert "Your previous model and index are still served" in status(last)
    plot = next(v for c, v in last.items() if getattr(c, "elem_id", None) == "mx-loss")
    frame = getattr(plot, "value", plot)
    frame = frame.get("value", frame) if isinstance(frame, dict) else frame
    steps = sorted(set(frame["step"]))
    assert steps == list(range(1, len(served.losses) + 1)), steps  # the served run's steps, not the cancelled 3


def test_every_tab_row_wraps_on_a_phone_rather_than_hiding_tabs_behind_a_menu(ui):
    """A newcomer's phone (390 px): ① Tune's "Examples", which the README's first run asks for, was behind a "⋯"
    menu (Gradio's default overflow); the page's four tabs already wrapped."""
    import gradio as gr

    app, _ = ui
    demo = mx.build_demo(app)
    rows = [b for b in demo.blocks.values() if isinstance(b, gr.Tabs)]
    assert len(rows) >= 2 and all(b.overflow_behavior == "wrap" for b in rows), [b.overflow_behavior for b in rows]


def test_a_launch_while_the_served_run_is_checked_says_the_checks_run_not_cancel(ui, tiny_bert):
    """A newcomer's pass again: Launch right after a blend from Explore (served, its general checks running) said "A run
    is already in progress in this session; wait for it or cancel it", and Cancel had nothing to stop."""
    from tests.conftest import TINY, tuned_session

    app, fns = ui
    session = tuned_session(app, tiny_bert)
    served = session.run
    run = Run(session)
    run.kind = "blend"
    assert app.registry.begin(run)
    run.admit()
    run.commit()
    run.serving(served)  # served, its general checks running
    try:
        events = list(app.trainer.train(session, str(tiny_bert), "auto", dict(TINY)))
        said = str(getattr(events[-1], "text", events[-1]))
        assert "Your blend is served and its general checks are running" in said and "Cancel cannot stop" in said
        assert session.run is served
    finally:
        run.publish(Cancelled("test over"))
        app.registry.end(run)
        run.end()


def test_launch_is_greyed_while_a_blend_goes_and_enabled_again_when_it_ends(ui, tiny_bert):
    """Issue 60's last newcomer's pass: a blend from Explore left Launch enabled through its phases and general checks
    (a click refused with a message); a training greyed it. A blend drawn by RunView now greys Launch with its first
    redraw and enables it again (the session has strings) when it is Done."""
    from tests.conftest import tuned_session

    app, fns = ui
    session = tuned_session(app, tiny_bert)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shown = [{getattr(c, "elem_id", None): v for c, v in u.items()} for u in fns["on_blend"].fn(0.5, None, session)]
    launch = [u["mx-launch"]["interactive"] for u in shown if "mx-launch" in u]
    assert launch[0] is False and launch[-1] is True, launch
    assert len(launch) == 2  # said once, then at the end: not in every redraw of its progress
    assert session.run.record.origin.alpha == 0.5  # the blend is served
