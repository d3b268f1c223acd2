"""The live ETA comes from the run's plan, re-timed by its steps as they go, in one place (issue 59): a dictionary's
run showed 13 min, then 36 min, and still 9 min at step 74 of 75, "most of it after training", while what followed
the training took 43 s (the phases after it were scaled by how much slower the steps ran than planned, up to 8x).

The time left after a step = the steps left at the seconds a step took so far + the plan's phases after the
training as the estimate priced them. The clock is the test's (explorer.tune.eta's), moved by the fake job as it
reports each step: nothing here waits or times anything."""

from __future__ import annotations

import pytest

import explorer.runs.training as training
import explorer.tune.eta as eta
from explorer.events import Phase, Step, Stopped
from explorer.tune.estimate import Estimate
from tests.conftest import WORDS

# a plan of 75 steps: 100 s of training, then 43 s (save, tuned index, downloads, general checks)
PLAN = Estimate(
    75,
    (
        ("load", 1.0),
        ("base index", 2.0),
        ("training", 100.0),
        ("save", 3.0),
        ("tuned index", 10.0),
        ("downloads", 5.0),
        ("general checks", 25.0),
    ),
    None,
)
AFTER = 43.0
STEP_S = 8.0  # what each step takes in the run: 6x the plan's 1.33 s (a busy machine, another length)


def test_one_step_before_the_end_the_eta_is_a_step_and_what_follows():
    assert eta.time_left(PLAN, 74, 75, STEP_S) == (pytest.approx(STEP_S + AFTER), AFTER)
    left, after = eta.time_left(PLAN, 1, 75, None)  # no step timed yet: the plan's price of the steps left
    assert left == pytest.approx(100 * 74 / 75 + AFTER) and after == AFTER
    assert eta.time_left(PLAN, 75, 75, STEP_S) == (0.0, None)  # what follows reports its own progress
    assert eta.time_left(None, 70, 75, 2.0) == (10.0, None)  # no plan here: the steps left alone
    assert eta.time_left(None, 1, 75, None) == (None, None)


def test_steps_reported_together_restart_the_clock():
    """A GPU reports its steps in bursts (log_every): a burst is not timed as steps of no time."""
    now = [0.0]
    live = eta.LiveEta(PLAN, clock=lambda: now[0])
    assert live.timed(Step(1, 75, 1.0)).eta == pytest.approx(100 * 74 / 75 + AFTER)
    assert live.timed(Step(2, 75, 1.0)).eta == pytest.approx(100 * 73 / 75 + AFTER)  # same instant: untimed
    now[0] = 24.0
    assert live.timed(Step(5, 75, 1.0)).eta == pytest.approx(8.0 * 70 + AFTER)  # 3 steps in 24 s since step 2


def test_a_second_training_restarts_the_clock():
    """A pairs run held down by its checks trains again (mirror.job._train_again), its steps counted from 1 again:
    its pace is its own, not the first training's steps and the choice between them."""
    now = [0.0]
    live = eta.LiveEta(PLAN, clock=lambda: now[0])
    live.timed(Step(1, 75, 1.0))
    now[0] = 8.0
    assert live.timed(Step(2, 75, 1.0)).eta == pytest.approx(8.0 * 73 + AFTER)
    now[0] = 300.0  # the rest of the first training, then its blend choice
    assert live.timed(Step(1, 75, 1.0)).eta == pytest.approx(100 * 74 / 75 + AFTER)  # untimed: the plan's price
    now[0] = 302.0
    assert live.timed(Step(2, 75, 1.0)).eta == pytest.approx(2.0 * 73 + AFTER)  # 2 s a step since it began


def fake_job(now: list[float], steps: int):
    """A run_job that trains nothing: a phase, `steps` steps each STEP_S apart on the test's clock, then stopped."""

    def job(texts, config, run, roots, build_base, limits, emit, should_stop, partners=None, columns=None):
        emit(Phase("Loading the base model"))
        for i in range(1, steps + 1):
            now[0] += STEP_S
            emit(Step(i, steps, 2.0))
        emit(Stopped({"steps": steps, "total_steps": steps, "losses": [2.0] * steps}))

    return job


def test_the_live_eta_is_the_plans_re_timed_by_the_steps(app, tiny_bert, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(eta, "perf_counter", lambda: now[0])
    monkeypatch.setattr(training, "run_job", fake_job(now, 75))
    monkeypatch.setattr(app.planner, "planned", lambda *a, **k: PLAN)
    s = app.session()
    app.loader.load_pasted(s, "\n".join(WORDS))
    events = list(app.trainer.train(s, str(tiny_bert), "words", {"max_steps": 75, "device": "cpu"}))
    steps = {e.step: e for e in events if isinstance(e, Step)}
    assert sorted(steps) == list(range(1, 76)) and events[-1].kind == "cancelled"
    assert steps[1].eta == pytest.approx(100 * 74 / 75 + AFTER)  # the plan's, before a step is timed
    assert steps[2].eta == pytest.approx(STEP_S * 73 + AFTER) and steps[2].after == pytest.approx(AFTER)
    # one step before the end: that step and what follows as planned, not minutes
    assert steps[74].eta == pytest.approx(STEP_S + AFTER), steps[74]
    assert steps[74].after == pytest.approx(AFTER)
    assert steps[75].eta == 0
