"""explorer.runs.follow: the one loop every consumer of a run goes through (the page for every kind, the /train API):
a run's events folded into one view, handed on at most once a second, at once when it is served, and at its end."""

from __future__ import annotations

from explorer.events import Done, Failed, Note, Phase, Served, Step, Tick
from explorer.runs.follow import progress


class FakeInfo:
    folder = None


def clocked(events, now):
    """`events`, each at its time: (seconds, event)."""
    for t, ev in events:
        now[0] = t
        yield ev


def test_views_come_once_a_second_at_once_when_served_and_last_at_the_end():
    now, info = [0.0], FakeInfo()
    events = [
        (0.0, Phase("Loading the base model")),
        (0.2, Step(1, 3, 2.0, batch=8)),
        (0.4, Note("a cap applied")),
        (0.6, Step(2, 3, 1.5, batch=8)),
        (1.1, Tick()),  # a heartbeat still hands a view on: a consumer gone is noticed then
        (1.3, Step(3, 3, 1.0, batch=8)),
        (1.4, Served(info)),
        (1.5, Phase("Checking general similarity")),
        (1.6, Done(info)),
        (1.7, Phase("never seen: after the end")),
    ]
    seen = []
    for view in progress(clocked(events, now), clock=lambda: now[0]):
        seen.append((now[0], view.step.step if view.step else None, view.served is info, view.take_notes()))
        if view.end is not None:
            assert view.end.kind == "done" and view.losses == [2.0, 1.5, 1.0] and view.said == ["a cap applied"]
    assert seen == [
        (1.1, 2, False, ["a cap applied"]),  # the first once the stream pauses (or a second in): not its first phase
        (1.4, 3, True, []),  # served: at once
        (1.6, 3, True, []),  # the end
    ]


def test_a_reattached_follower_first_sees_where_the_run_is_not_its_first_phase():
    """A reloaded page replays the run's kept events at once, then heartbeats: its first view is drawn after them."""
    kept = [
        Phase("Checking the base model"),
        Phase("Indexing", 0, 100),
        *(Step(i, 50, 2.0 - i / 100) for i in range(1, 31)),
    ]
    first = next(progress(iter([*kept, Tick()]), clock=lambda: 0.0))
    assert first.now == kept[-1] and len(first.losses) == 30


def test_a_failed_run_ends_its_views_with_what_it_did_so_far():
    events = [Phase("Starting"), Step(1, 5, 2.0), Step(2, 5, 1.8), Failed("out of memory")]
    views = [(v.end, list(v.losses)) for v in progress(iter(events), every=60.0, clock=lambda: 0.0)]
    assert len(views) == 1 and views[0][0].kind == "error" and views[0][1] == [2.0, 1.8]  # all within the minute


def test_nothing_follows_a_runs_end_event_even_before_the_run_has_ended():
    """A refused setting's run publishes Failed and then ends: a follower that read the Failed before end() got a
    caught-up Tick after it ([Failed, Tick], seen in a suite), and every consumer reads the last event as the end."""
    import threading

    from explorer.events import Failed
    from explorer.runs.live import Run

    run = Run()
    run.publish(Failed("pooling must be one of ('auto', 'cls', 'mean'), got 'max'"))
    ender = threading.Timer(1.2, run.end)  # ends after the follower has read the Failed, and waited past a Tick's 0.5 s
    ender.start()
    try:
        events = list(run.follow())
    finally:
        ender.join()
    assert [e.kind for e in events] == ["error"], events


def test_a_second_training_draws_its_own_curve():
    """A pairs run that trains twice (mirror.job._train_again) counts its steps from 1 again: the live curve is the
    training going on, not the first's losses with the second's after them."""
    now = [0.0]
    events = [
        (0.1, Step(1, 2, 3.0, batch=8)),
        (0.2, Step(2, 2, 2.5, batch=8)),
        (0.3, Phase("Training again with general text held near the base")),
        (0.4, Step(1, 2, 2.9, batch=6, training=2)),
        (0.5, Step(2, 2, 2.4, batch=6, training=2)),
        (0.6, Done(FakeInfo())),
    ]
    *_, last = progress(clocked(events, now), clock=lambda: now[0])
    assert last.losses == [2.9, 2.4] and last.batches == [6, 6] and last.step.step == 2
