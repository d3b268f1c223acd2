"""A stop is honoured by every kind of run (issue 59): an upload (a model zip served as a run) and a blend stopped
mid-index end Cancelled with the previous model and index still served; a stop asked just before serving is too;
their index builds reach a follower as they go; heartbeats (Tick) wake followers but are not kept in `Run.events`.

Cancels are deterministic: a hook in the index build (mirror.job.index_with, which explorer.runs.saved calls)
blocks the run's thread inside the build until the test has asked the stop; the waits' timeouts only keep a broken
run from hanging the suite, they synchronise nothing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import mirror.job as job
from explorer.events import Cancelled, Phase, Tick
from explorer.runs.execute import Plan, Producer
from explorer.runs.live import Run, Status
from tests.conftest import WORDS

HANG = 120  # seconds a broken run may block before the test gives up on it (never reached when it works)
BASE, TUNED, BLEND = (f"Indexing your strings with the {w}" for w in ("base encoder", "tuned encoder", "blend"))


@contextlib.contextmanager
def gate_index(
    monkeypatch: pytest.MonkeyPatch, app, session, label: str, at: Callable[[Phase], bool]
) -> Iterator[dict]:
    """Block the session's run's thread inside the index build labelled `label`, at its first progress event for
    which `at` is true (once that event is emitted), until `gate["release"]` is set (at the latest when the block
    ends). `gate["reached"]` is set once it blocks; `gate["published"]`: whether that event was in the run's events
    (what every follower reads) at that moment."""
    gate = {"reached": threading.Event(), "release": threading.Event(), "published": None}
    real = job.index_with

    def gated(indexes, encoder, texts, folder, text, emit):
        def hooked(ev):
            emit(ev)
            if text == label and at(ev) and not gate["reached"].is_set():
                run = app.registry.of(session)  # registered before its thread started
                gate["published"] = run is not None and any(e is ev for e in list(run.events))
                gate["reached"].set()
                assert gate["release"].wait(HANG), "the test never released the index build"

        real(indexes, encoder, texts, folder, text, hooked)

    monkeypatch.setattr(job, "index_with", gated)
    try:
        yield gate
    finally:
        gate["release"].set()  # a failed test leaves no run blocked


def encoded(ev: Phase) -> bool:
    """The index build's last progress: every string encoded, the index not saved yet."""
    return ev.total > 0 and ev.done == ev.total


def started(app, session, events) -> Run:
    """The run `events` (a use_saved_model or blend_run generator) starts at its first event."""
    next(events)
    run = app.registry.of(session)
    assert run is not None and run.kind in ("upload", "blend")
    return run


def assert_previous_served(app, session, previous, run: Run) -> None:
    """Nothing of the stopped `run` is served or kept; `previous` still is, and answers searches."""
    assert run.status is Status.CANCELLED and run.ended and run.info is None
    assert session.run is previous and app.registry.of(session) is None
    assert run.folder is not None and not run.folder.exists()
    assert [p.name for p in app.runs.root.iterdir()] == [previous.folder.name]
    assert app.searcher.search(session, "cat", 3)[0]["tuned"]


# ---------------------------------------------------------------------------------------------- stopped mid-index


@pytest.mark.parametrize("label", [BASE, TUNED])
def test_cancelling_an_upload_mid_index_keeps_the_previous_model_served(app, tuned, monkeypatch, label):
    previous = tuned.run
    with gate_index(monkeypatch, app, tuned, label, lambda ev: True) as gate:  # its first event: the build began
        events = app.saved.use_saved_model(tuned, str(previous.model_zip))
        run = started(app, tuned, events)
        assert gate["reached"].wait(HANG)  # the run's thread is inside the index build now
        assert "Stopping" in app.trainer.cancel(tuned)
        gate["release"].set()
        rest = list(events)
    assert rest[-1].kind == "cancelled" and "nothing was saved" in rest[-1].text, rest[-1]
    assert not any(e.kind in ("served", "done") for e in rest)
    assert_previous_served(app, tuned, previous, run)
    assert not any(isinstance(e, Tick) for e in run.events)


def test_cancelling_a_blend_mid_index_keeps_the_previous_model_served(app, tuned, monkeypatch):
    previous = tuned.run
    with gate_index(monkeypatch, app, tuned, BLEND, lambda ev: True) as gate:
        events = app.saved.blend_run(tuned, 0.5)
        run = started(app, tuned, events)
        assert gate["reached"].wait(HANG)
        assert "Stopping" in app.trainer.cancel(tuned)
        gate["release"].set()
        rest = list(events)
    assert rest[-1].kind == "cancelled" and "nothing was saved" in rest[-1].text, rest[-1]
    assert_previous_served(app, tuned, previous, run)
    assert list(app.saved.blend_run(tuned, 0.5))[-1].kind == "done"  # the session is free to blend again


# a blend with the general checks on is served before them: the stop is honoured before its serving all the same
@pytest.mark.parametrize("kind", ["upload", pytest.param("blend", marks=pytest.mark.checks)])
def test_a_stop_asked_once_made_is_honoured_before_serving(app, tuned, monkeypatch, kind):
    """Stopped after its last index was built, before it is served (the run's own thread asks the stop, as a
    Cancel would at that moment): nothing of it is served, and a stop asked once it is served is refused."""
    import explorer.runs.saved as saved

    previous, real = tuned.run, saved.made_info

    def made_then_stopped(*args, **kwargs):
        assert "Stopping" in app.trainer.cancel(tuned)
        return real(*args, **kwargs)

    monkeypatch.setattr(saved, "made_info", made_then_stopped)
    events = list(
        app.saved.use_saved_model(tuned, str(previous.model_zip))
        if kind == "upload"
        else app.saved.blend_run(tuned, 0.5)
    )
    assert events[-1].kind == "cancelled" and "before it was served" in events[-1].text, events[-1]
    assert tuned.run is previous and [p.name for p in app.runs.root.iterdir()] == [previous.folder.name]


def test_an_abandoned_upload_is_stopped_and_not_served(app, tuned, monkeypatch):
    """Nobody follows it (its page closed): the runner's watch stops it, and an upload honours that stop."""
    monkeypatch.setattr("explorer.runs.jobs.ABANDONED_S", -1.0)  # every run counts as abandoned at once
    previous = tuned.run
    last = list(app.saved.use_saved_model(tuned, str(previous.model_zip)))[-1]
    assert last.kind == "cancelled" and "went away" in last.text, last
    assert tuned.run is previous and [p.name for p in app.runs.root.iterdir()] == [previous.folder.name]


# ---------------------------------------------------------------------------------------------- live progress


@pytest.mark.parametrize("kind,label", [("upload", BASE), ("upload", TUNED), ("blend", BLEND)])
def test_an_index_build_reaches_a_follower_before_it_ends(app, tuned, monkeypatch, kind, label):
    """The build's progress is out while the build goes on (the bar moves), not gathered until it ends."""
    with gate_index(monkeypatch, app, tuned, label, encoded) as gate:
        events = (
            app.saved.use_saved_model(tuned, str(tuned.run.model_zip))
            if kind == "upload"
            else app.saved.blend_run(tuned, 0.5)
        )
        started(app, tuned, events)
        assert gate["reached"].wait(HANG)
        assert gate["published"], "the index's progress was held back while the index was built"
        seen = []
        for ev in events:  # the follower gets it while the build is still blocked inside
            seen.append(ev)
            if isinstance(ev, Phase) and ev.text == label and encoded(ev):
                gate["release"].set()
    assert seen[-1].kind == "done", seen[-1]
    phases = [(e.done, e.total) for e in seen if isinstance(e, Phase) and e.text == label]
    n = len(WORDS)
    assert phases[0] == (0, n) and phases[-1] == (n, n)


# ---------------------------------------------------------------------------------------------- the lifecycle alone


class Gated(Producer):
    """A run with no model: a phase, then a reported phase that blocks halfway until released."""

    kind, what = "fake", "a fake run"

    def __init__(self) -> None:
        self.reached, self.release = threading.Event(), threading.Event()
        self.went_on = False

    def prepare(self, run: Run):
        return Plan(0)

    def produce(self, run: Run, folder: Path):
        run.emit(Phase("first"))
        run.emit(Phase("second", 0, 2))
        self.reached.set()
        assert self.release.wait(HANG)
        run.emit(Phase("second", 1, 2))  # a stop asked meanwhile ends it here
        self.went_on = True
        raise AssertionError("a stopped run went on")


def test_a_stop_between_a_producers_phases_ends_it_cancelled(app):
    s = app.session()
    producer = Gated()
    run = app.runner.launch(s, producer)
    assert producer.reached.wait(HANG)
    assert [e.text for e in run.events if isinstance(e, Phase)][-2:] == ["first", "second"]  # live, not gathered
    assert run.stop("cancel")
    producer.release.set()
    events = list(run.follow())
    assert events[-1].kind == "cancelled" and "Cancelled before it was served" in events[-1].text
    assert not producer.went_on and run.status is Status.CANCELLED and s.run is None
    assert not run.folder.exists()


def test_a_run_about_to_be_served_refuses_a_stop_and_a_stopped_one_is_not_served():
    from explorer.runs.live import StopAsked

    run = Run()
    run.admit()
    run.commit()
    assert not run.stop("cancel") and not run.stopping  # past stopping: being served
    stopped = Run()
    stopped.admit()
    assert stopped.stop("cancel")
    with pytest.raises(StopAsked):
        stopped.commit()
    with pytest.raises(StopAsked):
        stopped.checkpoint()


# ---------------------------------------------------------------------------------------------- heartbeats


def test_heartbeats_wake_followers_but_are_not_kept():
    run = Run()
    run.publish(Phase("Waiting for a training slot (1 job ahead of yours)"))
    follower = run.follow()
    assert isinstance(next(follower), Phase)
    for _ in range(3):  # what the runner sends while the run waits for a slot
        run.publish(Tick())
    assert isinstance(next(follower), Tick)  # the follower gets a heartbeat live
    assert [type(e) for e in run.events] == [Phase]  # only real progress is kept for a reattached tab
    run.publish(Phase("Loading"))
    run.publish(Tick())
    run.publish(Cancelled("Cancelled before it was served; nothing was saved."))
    run.end()
    assert [type(e) for e in follower] == [Phase, Cancelled]
    replay = [e.kind for e in run.follow()]  # a tab reattached now: the progress again, no heartbeats
    assert replay == ["phase", "phase", "cancelled"]
