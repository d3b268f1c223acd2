"""CPU accounts (issue 49, Medium row: "CPU per visitor has no account"): what each visitor and address spent in
the last hour, shared fairly between jobs that ran at once, and a refusal past the budget that says when to come
back. (Through the real server: tests/test_abuse.py.)"""

from __future__ import annotations

import pytest

import explorer.runs.cpu as cpu
from explorer.runs.accounts import Owner
from mirror.errors import MirrorError


def test_jobs_at_once_share_what_the_process_spent_and_the_budget_refuses_past_it(monkeypatch):
    now = {"cpu": 0.0, "wall": 1000.0}
    monkeypatch.setattr(cpu.time, "monotonic", lambda: now["wall"])
    accounts = cpu.CpuAccounts(visitor_s=100, address_s=150, clock=lambda: now["cpu"])
    alice, bob, carol = Owner("a", "1.1.1.1"), Owner("b", "1.1.1.1"), Owner("c", "2.2.2.2")
    with accounts.metered(alice, "a run") as run:
        now["cpu"] += 40  # alone: all hers
        with accounts.metered(bob, "a map") as layout:
            now["cpu"] += 60  # together: half each
        assert layout.seconds == pytest.approx(30)
        now["cpu"] += 10
    assert run.seconds == pytest.approx(80)
    now["cpu"] += 500  # nobody metered: nobody pays (searches, the server's own work)
    assert accounts.used(alice) == pytest.approx((80, 110))  # the address: alice and bob
    with accounts.metered(alice, "a run"):
        now["cpu"] += 30
    with pytest.raises(
        MirrorError,
        match=r"you have used 110 CPU seconds .* one visitor may use 100 .*MIRROR_VISITOR_CPU_S.* try again in 60 min",
    ):
        accounts.check(alice, "a run")
    with pytest.raises(
        MirrorError, match="the visitors at your address have used 160"
    ):  # bob alone is within his own (50)
        with accounts.metered(bob, "an export"):
            now["cpu"] += 20
        accounts.check(bob)
    accounts.check(carol)  # another address: untouched
    now["wall"] += cpu.WINDOW_S + 1  # an hour later
    accounts.check(alice)
    assert accounts.used(alice) == (0, 0)


def test_no_budget_means_no_limit():
    accounts = cpu.CpuAccounts(visitor_s=0, address_s=0, clock=lambda: 1e9)
    with accounts.metered(Owner("a", "x")):
        pass
    accounts.check(Owner("a", "x"))


def test_background_work_pauses_for_interactive_work_and_never_forever():
    """Issue 54: a run and a map at once took 3.2x and 2.4x their times alone; taking turns, the map has the cores
    and the run waits at its next step (mirror.cores.Turns)."""
    import threading
    import time

    from mirror.cores import Turns

    turns = Turns(most=5.0)
    log: list[str] = []
    started, release = threading.Event(), threading.Event()

    def interactive() -> None:
        with turns.interactive():
            started.set()
            release.wait(5)
            log.append("map done")

    def background() -> None:
        with turns.background():
            started.wait(5)
            turns.pause()  # waits for the map
            log.append("step")

    threads = [threading.Thread(target=interactive), threading.Thread(target=background)]
    for t in threads:
        t.start()
    started.wait(5)
    time.sleep(0.2)
    assert log == []  # the background step is held
    turns.pause()  # this thread is not background: never held
    release.set()
    for t in threads:
        t.join(5)
    assert log == ["map done", "step"] and turns.paused_s > 0.1
    # a run's own checks call interactive work from within the background: no turn to wait for
    with turns.background(), turns.interactive():
        turns.pause()
    # bounded: a stream of interactive work cannot hold a run forever
    short = Turns(most=0.2)
    with short.interactive():
        t0 = time.monotonic()
        with short.background():
            short.pause()
        assert time.monotonic() - t0 < 2
    # MIRROR_SHARE_CORES=0 (the benches' "before"): no turns, a run overlaps the map
    from mirror.cores import sharing_off

    assert sharing_off({"MIRROR_SHARE_CORES": "0"}) and not sharing_off({})
    off = Turns(most=0.5, enabled=False)
    with off.interactive(), off.background():
        off.pause()
    assert off.paused_s == 0.0


def test_every_kind_of_run_is_metered_and_refused_past_its_visitors_budget(app, tiny_bert, monkeypatch):
    """Issue 49 through the service: a training (its checks included), a blend and a model upload are charged to
    their visitor in the one path every run takes (explorer.runs.execute); past the visitor's budget the next run of
    any kind is refused before it waits for a slot, with the message saying which limit; another visitor's is not.
    Issue 54: each kind is background work in its own thread (an upload's encode batches pause for a map)."""
    import dataclasses

    from mirror.cores import TURNS
    from tests.conftest import WORDS, train

    pauses: list[bool] = []
    pause = TURNS.pause
    monkeypatch.setattr(TURNS, "pause", lambda: pauses.append(getattr(TURNS._local, "background", False)) or pause())

    app.settings = dataclasses.replace(app.settings, visitor_cpu_s=1e-9, address_cpu_s=0)
    alice, bob = Owner("alice", "1.1.1.1"), Owner("bob", "2.2.2.2")
    a, b = app.sessions.get(None, alice), app.sessions.get(None, bob)
    for s in (a, b):
        app.loader.load_pasted(s, "\n".join(WORDS))
    assert train(app, a, tiny_bert)[-1].kind == "done"  # within the budget when it started
    assert app.cpu.used(alice)[0] > 0 and app.cpu.used(bob) == (0, 0)
    refused = train(app, a, tiny_bert)
    assert [e.kind for e in refused] == ["error"], refused  # at once: it never waited for a slot
    assert "MIRROR_VISITOR_CPU_S" in refused[0].text and "so a run cannot start now" in refused[0].text
    blended = list(app.saved.blend_run(a, 0.5))
    assert blended[-1].kind == "error" and "so a blend cannot start now" in blended[-1].text, blended
    # another visitor: its own account (an upload of alice's model zip is charged to bob, then bob is past his)
    pauses.clear()
    assert list(app.saved.use_saved_model(b, str(a.run.model_zip)))[-1].kind == "done"
    assert app.cpu.used(bob)[0] > 0
    assert pauses and all(pauses)  # its encode batches ran in the run's thread, as background work
    last = train(app, b, tiny_bert)[-1]
    assert last.kind == "error" and "MIRROR_VISITOR_CPU_S" in last.text, last
    assert not app.registry.runs()
