"""The memory budget a run's plan was made with is the run's (issue 59, "the plan is not the run"): a dictionary's
pairs were planned at 54 steps and ran 75, as the run read the machine's free memory again once the model was loaded
and the strings indexed, and split more batches. The plan made at Launch carries its budget to the job, which keeps
it unless the machine truly has less free (then the page says the plan changed, with the new step count).

The machine's memory is a value the test sets (`mirror.memory.available_bytes`, what every budget reads): it
shrinks just after the run's plan is made, as loading and indexing make it shrink. No timing is asserted."""

from __future__ import annotations

import pytest

import mirror.memory as memory
from explorer.events import Note, Step
from explorer.tune.estimate import PHASES, Estimate
from explorer.tune.inputs import build_config
from mirror.config import MirrorConfig
from mirror.job import kept_memory, plan_memory
from tests.conftest import WORDS

# strings of 1 to 7 words: batches of several padded lengths, so a budget a little short splits some of them
TEXTS = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(1 + i % 7)) for i in range(48)]
SETTINGS = {"batch_size": 8, "max_steps": 0, "epochs": 1, "lr": 1e-3, "device": "cpu"}


@pytest.fixture
def machine(monkeypatch):
    """What the machine gives a run (memory.available_bytes: its share of what is free), set by the test."""
    given = {"bytes": 0}
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": given["bytes"])
    return given


def test_kept_memory_keeps_the_plans_budget_while_the_machine_has_it_free(machine):
    config = MirrorConfig.preset("words")
    planned = 1000 * 2**20
    machine["bytes"] = int(planned * memory.CPU_FRACTION)  # a run would plan within half of what is free: 500 MB
    assert kept_memory(config, planned) == planned  # but 1000 MB are free: the plan's budget holds
    machine["bytes"] = int(planned * memory.CPU_FRACTION) - 2**20  # less than the plan's budget free: truly less
    assert kept_memory(config, planned) == machine["bytes"]
    machine["bytes"] = 2 * planned  # more free than when planned: the plan's budget still (its steps are the page's)
    assert kept_memory(config, planned) == planned
    assert plan_memory(config, None) == 2 * planned and plan_memory(config, planned // 2) == planned // 2


def plan_steps_at(texts, config, model, budget: int) -> int:
    from mirror.encoder import load_encoder
    from mirror.plan import plan_run

    return plan_run(texts, config, load_encoder(str(model), device="cpu"), budget).steps


def tightest(texts, config, model) -> tuple[int, int]:
    """(the smallest budget at which no batch is split, the steps then): one byte less splits one."""
    from mirror.encoder import load_encoder
    from mirror.plan import plan_run

    encoder = load_encoder(str(model), device="cpu")
    loose = plan_run(texts, config, encoder, 2**40)
    lo, hi = loose.budget.static, 2**40
    while lo < hi:  # the steps only fall as the budget grows
        mid = (lo + hi) // 2
        try:
            steps = plan_run(texts, config, encoder, mid).steps
        except Exception:  # too small for any step
            steps = None
        if steps == loose.steps:
            hi = mid
        else:
            lo = mid + 1
    return lo, loose.steps


def launched(app, model, machine, after_plan: int, planned_estimate=None) -> tuple[list, dict]:
    """A run of TEXTS launched with the machine as set; once the run's plan is made (at Launch), the machine gives
    `after_plan`: the run's events, and the budget its job was given."""
    real, given = app.planner.planned, {}

    def planned(*args, **kwargs):
        est = real(*args, **kwargs)
        given["plan"] = machine["bytes"]
        machine["bytes"] = after_plan  # the model loaded, the strings indexed: less is free
        return planned_estimate if planned_estimate is not None else est

    app.planner.planned = planned
    s = app.session()
    app.loader.load_pasted(s, "\n".join(TEXTS))
    events = list(app.trainer.train(s, str(model), "words", dict(SETTINGS)))
    assert events[-1].kind == "done", events[-1]
    return events, given


def test_a_run_keeps_the_budget_its_plan_was_made_with(app, tiny_bert, machine):
    config, _ = build_config(TEXTS, str(tiny_bert), "words", dict(SETTINGS), app.settings.max_steps)
    budget, steps = tightest(TEXTS, config, tiny_bert)
    assert plan_steps_at(TEXTS, config, tiny_bert, budget - 1) > steps  # one byte less: more steps
    machine["bytes"] = budget
    assert app.planner.memory_budget(config) == budget  # what the plan shown and the plan at Launch price
    # after the plan, the machine gives a run a byte less (half of what is free: the plan's budget still is free)
    events, given = launched(app, tiny_bert, machine, budget - 1)
    assert given["plan"] == budget
    totals = {e.total for e in events if isinstance(e, Step)}
    assert totals == {steps}, f"planned {steps} steps at the plan's budget, ran {totals}"
    assert not any(isinstance(e, Note) and "plan changed" in e.text for e in events)


def test_a_machine_with_truly_less_free_replans_and_the_page_says_so(app, tiny_bert, machine):
    config, _ = build_config(TEXTS, str(tiny_bert), "words", dict(SETTINGS), app.settings.max_steps)
    fits, steps = tightest(TEXTS, config, tiny_bert)
    short = fits - 1  # what the machine gives once the run is planned: 2x that is free, less than planned
    more = plan_steps_at(TEXTS, config, tiny_bert, short)
    assert more > steps
    machine["bytes"] = 3 * short
    plan = Estimate(steps, tuple((p, 1.0) for p in PHASES), None)  # the plan shown: `steps` steps
    events, _ = launched(app, tiny_bert, machine, short, plan)
    assert {e.total for e in events if isinstance(e, Step)} == {more}
    (note,) = [e.text for e in events if isinstance(e, Note) and "plan changed" in e.text]
    assert f"in {more:,} steps, not the {steps:,} planned" in note, note
    first = next(i for i, e in enumerate(events) if isinstance(e, Step))
    assert any(isinstance(e, Note) and "plan changed" in e.text for e in events[: first + 1])  # before its ETA shows


def test_a_launch_runs_within_the_budget_of_the_plan_the_page_showed(app, tiny_bert, machine):
    """The plan shown before Launch (Planner.estimate_of, as the page prices it) fixes the run's budget: memory that
    other work takes between the plan and the Launch does not change the run's steps while the budget is still free."""
    config, _ = build_config(TEXTS, str(tiny_bert), "words", dict(SETTINGS), app.settings.max_steps)
    budget, steps = tightest(TEXTS, config, tiny_bert)
    s = app.session()
    app.loader.load_pasted(s, "\n".join(TEXTS))
    machine["bytes"] = budget
    app.planner.estimate_of(s, config, may_calibrate=False)  # the plan shown (priced rough here: no calibration)
    machine["bytes"] = budget - 1  # a model loaded meanwhile, by another session: a byte less for a run, not less free
    events = list(app.trainer.train(s, str(tiny_bert), "words", dict(SETTINGS)))
    assert events[-1].kind == "done", events[-1]
    assert {e.total for e in events if isinstance(e, Step)} == {steps}


def test_the_plan_shown_says_how_many_batches_it_splits_for_the_memory_free_now(app, tiny_bert, machine):
    """Issue 60's newcomer: two visitors saw 70 and 80 steps for one file (each plan priced with the memory free at
    its moment) and the reason showed only in the run's report. The plan shown says it splits batches, how many, and
    for what memory; a plan at a machine with room splits none and says nothing of it."""
    from ui.plan_md import plan_md

    config, _ = build_config(TEXTS, str(tiny_bert), "words", dict(SETTINGS), app.settings.max_steps)
    budget, steps = tightest(TEXTS, config, tiny_bert)
    s = app.session()
    app.loader.load_pasted(s, "\n".join(TEXTS))
    machine["bytes"] = budget - 1
    tight = app.planner.plan(s, str(tiny_bert), "words", dict(SETTINGS))
    assert tight.est.calibration is not None, tight.why_rough  # the plan that knows its steps: calibrated
    assert tight.est.steps == plan_steps_at(TEXTS, config, tiny_bert, budget - 1) > steps
    assert tight.est.split >= 1 and tight.est.memory == budget - 1
    said = plan_md(tight).replace("\\~", "~")
    assert f"{tight.est.split:,} batch" in said and f"to fit the {memory.fmt_gb(budget - 1)} of memory" in said
    assert f"({tight.est.steps:,} steps; {steps:,} with more memory free)" in said, said
    machine["bytes"] = 2**40
    roomy = app.planner.plan(s, str(tiny_bert), "words", dict(SETTINGS))
    assert roomy.est.steps == steps and roomy.est.split == 0 and "split to fit" not in plan_md(roomy)


def test_a_plan_says_a_launch_waits_behind_another_visitors_run(app, tiny_bert):
    """A newcomer's second visitor read "~44 s" while another visitor's run held the only training slot, and its
    Launch then waited 3 min for it: the plan says the runs of others in line when no slot is free (not its own)."""
    from explorer.runs.live import Run
    from tests.conftest import TINY, WORDS
    from ui.plan_md import plan_text

    first, second = app.session(), app.session()
    for s in (first, second):
        app.loader.load_pasted(s, "\n".join(WORDS))
    assert "waiting for this server's training slot" not in plan_text(app, second, str(tiny_bert), "auto", dict(TINY))
    theirs = Run(first)
    app.train_queue.join(theirs)  # it holds the only slot (train_concurrency 1)
    try:
        assert app.train_queue.free == 0
        shown = plan_text(app, second, str(tiny_bert), "auto", dict(TINY))
        assert "1 run of other visitors is training or waiting for this server's training slot now (" in shown
        assert ", as this plan was made): a Launch waits" in shown  # when: a plan is not redrawn as that run ends
        assert "waiting for this server's training slot" not in plan_text(
            app, first, str(tiny_bert), "auto", dict(TINY)
        )
    finally:
        app.train_queue.leave(theirs)
    assert "in line" not in plan_text(app, second, str(tiny_bert), "auto", dict(TINY))
