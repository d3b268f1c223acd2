"""CPU accounts (issue 49, Medium row: "CPU per visitor has no account"): what each visitor and address spent in
the last hour, shared fairly between jobs that ran at once, and a refusal past the budget that says when to come
back. (Through the real server: tests/test_abuse.py.)"""

from __future__ import annotations

import time

import pytest

import explorer.resources.cpu as cpu
from explorer.resources.accounts import Owner
from mirror.errors import MirrorError


def test_jobs_at_once_share_what_the_process_spent_and_the_budget_refuses_past_it(monkeypatch):
    now = {"cpu": 0.0, "wall": 1000.0}
    monkeypatch.setattr(cpu.time, "monotonic", lambda: now["wall"])
    accounts = cpu.CpuAccounts(visitor_s=100, address_s=150, clock=lambda: now["cpu"], threads=lambda tid: None)
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


def test_each_job_is_charged_its_own_threads_not_an_equal_share():
    """Issue 58 (Medium): the process's CPU was split equally among the metered jobs, so a victim's run was charged
    25 s instead of 9 s while a stranger's work ran. Here a busy job and an idle one at once: the busy one pays what
    its thread spent, the idle one next to nothing."""
    import threading

    accounts = cpu.CpuAccounts(visitor_s=0, address_s=0)
    both, done = threading.Barrier(2), threading.Event()
    charged: dict[str, float] = {}

    def busy() -> None:
        with accounts.metered(Owner("busy", "1.1.1.1"), "a run") as job:
            both.wait()
            t = time.thread_time()
            while time.thread_time() - t < 0.3:
                pass
            done.set()
            accounts.used(Owner("busy", "1.1.1.1"))  # settled while both run
        charged["busy"] = job.seconds

    def idle() -> None:
        with accounts.metered(Owner("idle", "2.2.2.2"), "a map") as job:
            both.wait()
            done.wait(30)
            accounts.used(Owner("idle", "2.2.2.2"))
        charged["idle"] = job.seconds

    threads = [threading.Thread(target=busy), threading.Thread(target=idle)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert charged["busy"] >= 0.25, charged  # its own 0.3 s (the clock's ticks are 10 ms)
    assert charged["idle"] < 0.1 * charged["busy"], charged  # an equal split gave it half


def test_a_thread_a_job_starts_works_for_it():
    import threading

    accounts = cpu.CpuAccounts(visitor_s=0, address_s=0)
    with accounts.metered(Owner("a", "1.1.1.1"), "a run") as job:
        parent = cpu.current_job()

        def work() -> None:
            with cpu.working_for(parent):
                t = time.thread_time()
                while time.thread_time() - t < 0.2:
                    pass

        t = threading.Thread(target=work)
        t.start()
        t.join(30)
        assert parent is job and len(job.threads) == 2  # this thread and the one it started
    assert job.seconds >= 0.15
    assert cpu.current_job() is None


def test_no_budget_means_no_limit():
    accounts = cpu.CpuAccounts(visitor_s=0, address_s=0, clock=lambda: 1e9)
    with accounts.metered(Owner("a", "x")):
        pass
    accounts.check(Owner("a", "x"))


def test_the_bench_log_names_each_job_its_charge_and_changes_nothing(caplog):
    """MIRROR_LOG_CPU=1 (bench/bench_cpu_server.py reads a real server's charges from its log): one line a job."""
    quiet, logged = cpu.CpuAccounts(0, 0), cpu.CpuAccounts(0, 0, log_jobs=True)
    owner = Owner("v1", "10.0.0.1")
    with caplog.at_level("INFO", logger="mirror.cpu"):
        with quiet.metered(owner, "a search", refuse=False):
            pass
        assert not caplog.records
        with logged.metered(owner, "an export", interactive=True):
            sum(i * i for i in range(200_000))
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("cpu job: an export | visitor ") and "| charged " in line and "| runs paused " in line
    assert "v1" not in line  # the visitor's id hashed
    assert logged.used(owner)[0] > 0


def test_background_work_pauses_for_interactive_work_and_never_forever():
    """Issue 54: a run and a map at once took 3.2x and 2.4x their times alone; taking turns, the map has the cores
    and the run waits at its next step (explorer.resources.turns.Turns)."""
    import threading
    import time

    from explorer.resources.turns import Turns

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

    from explorer.resources.turns import TURNS
    from tests.conftest import WORDS, train

    pauses: list[bool] = []
    pause = TURNS.pause
    monkeypatch.setattr(TURNS, "pause", lambda: pauses.append(getattr(TURNS._local, "background", False)) or pause())

    alice, bob = Owner("alice", "1.1.1.1"), Owner("bob", "2.2.2.2")
    a, b = app.sessions.get(None, alice), app.sessions.get(None, bob)
    for s in (a, b):
        app.loader.load_pasted(s, "\n".join(WORDS))
    app.settings = dataclasses.replace(app.settings, visitor_cpu_s=1e6, address_cpu_s=0)
    assert train(app, a, tiny_bert)[-1].kind == "done"  # within the budget
    assert app.cpu.used(alice)[0] > 0 and app.cpu.used(bob) == (0, 0)
    app.settings = dataclasses.replace(app.settings, visitor_cpu_s=1e-9, address_cpu_s=0)
    refused = train(app, a, tiny_bert)
    assert [e.kind for e in refused] == ["error"], refused  # at once: it never waited for a slot
    assert "MIRROR_VISITOR_CPU_S" in refused[0].text and "so a run cannot start now" in refused[0].text
    blended = list(app.saved.blend_run(a, 0.5))
    assert blended[-1].kind == "error" and "so a blend cannot start now" in blended[-1].text, blended
    # another visitor: its own account (an upload of alice's model zip is charged to bob, then bob is past his)
    pauses.clear()
    app.settings = dataclasses.replace(app.settings, visitor_cpu_s=1e6, address_cpu_s=0)  # within it while it runs
    assert list(app.saved.use_saved_model(b, str(a.run.model_zip)))[-1].kind == "done"
    assert app.cpu.used(bob)[0] > 0
    app.settings = dataclasses.replace(app.settings, visitor_cpu_s=1e-9, address_cpu_s=0)
    assert pauses and all(pauses)  # its encode batches ran in the run's thread, as background work
    last = train(app, b, tiny_bert)[-1]
    assert last.kind == "error" and "MIRROR_VISITOR_CPU_S" in last.text, last
    assert not app.registry.runs()


def test_a_run_past_its_visitors_budget_is_stopped_mid_run_and_the_previous_model_stays(app, tiny_bert):
    """Issue 58 (Medium): the budget was checked when a job started, never during it (a pairs run spent 76.7 CPU-s
    for a visitor allowed 30). A visitor within its budget at the start, past it during the run: stopped there, its
    previous model and index still served."""
    import dataclasses

    from tests.conftest import WORDS, train

    carol = Owner("carol", "3.3.3.3")
    c = app.sessions.get(None, carol)
    app.loader.load_pasted(c, "\n".join(WORDS))
    app.settings = dataclasses.replace(app.settings, visitor_cpu_s=1e6, address_cpu_s=0)
    assert train(app, c, tiny_bert)[-1].kind == "done"
    served = c.run
    spent = app.cpu.used(carol)[0]
    app.settings = dataclasses.replace(app.settings, visitor_cpu_s=spent + 0.5, address_cpu_s=0)  # within, barely
    events = train(app, c, tiny_bert, max_steps=100_000, epochs=1000, min_steps=0)
    assert events[-1].kind == "cancelled" and "CPU budget" in events[-1].text, events[-1]
    assert c.run is served and app.cpu.used(carol)[0] >= spent + 0.5
    assert not app.registry.runs()


def test_turns_cost_a_run_at_most_its_factor_however_long_the_stream():
    """Issue 58: a stranger firing exports back to back slowed a victim's run 3.0-3.8x. A background thread waits in
    all at most (factor - 1) x the time it worked: then it overlaps the interactive work instead of waiting."""
    import threading
    import time

    from explorer.resources.turns import PAUSE_FLOOR_S, Turns

    turns = Turns(most=60.0, factor=1.5)
    stream_on, done = threading.Event(), threading.Event()

    def stream() -> None:  # interactive work that never stops while the run goes
        with turns.interactive():
            stream_on.set()
            done.wait(30)

    t = threading.Thread(target=stream)
    t.start()
    stream_on.wait(5)
    with turns.background():
        t0 = time.monotonic()
        for _ in range(8):
            time.sleep(0.1)  # a step's work
            turns.pause()
        elapsed = time.monotonic() - t0
        waited = turns._local.waited
    done.set()
    t.join(5)
    assert waited > 0  # it did take turns…
    # …within half its own work and the floor (wait_for may overshoot a little)
    assert waited <= 0.5 * (elapsed - waited) + PAUSE_FLOOR_S + 0.05, (waited, elapsed)


def test_the_engine_waits_only_where_a_server_installed_its_pause():
    from explorer.resources.turns import Turns
    from mirror import hooks

    calls: list[str] = []
    hooks.pause()  # nothing installed: nothing happens
    with hooks.pausing(lambda: calls.append("paused")):
        hooks.pause()
    hooks.pause()
    assert calls == ["paused"]
    turns = Turns()
    turns.pause = lambda: calls.append("turn")  # type: ignore[method-assign]
    with turns.background():
        hooks.pause()  # a run's loop, inside background work: the turns' pause
    assert calls == ["paused", "turn"]


def burn(seconds: float) -> None:
    """Spend `seconds` of this thread's CPU."""
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        pass


def test_the_server_threads_work_is_its_requests_visitors_never_the_running_jobs_rest():
    """Issue 58: the server's own work for a stranger's requests (Gradio's queue and stream, a file cached and
    served) ran in server threads outside any job: part of the rest the running jobs share, so a stranger's one-row
    exports pushed a victim's run to 1.19x its charge alone. Here an idle run goes while a server thread works 0.2 s
    for a stranger's request (in its tab) and 0.2 s for nobody: the run is charged next to nothing (it was charged
    both before), the stranger its request's 0.2 s."""
    import threading

    accounts = cpu.CpuAccounts(visitor_s=0, address_s=0)
    victim, stranger = Owner("victim", "1.1.1.1"), Owner("stranger", "2.2.2.2")
    going, worked, done = threading.Event(), threading.Event(), threading.Event()
    charged: dict[str, float] = {}

    def idle_run() -> None:
        with accounts.metered(victim, "a run") as job:
            going.set()
            done.wait(30)
            accounts.used(victim)
        charged["run"] = job.seconds

    def server() -> None:  # a server thread lives as long as the server (its time in its last moments is the rest's)
        with accounts.serving(stranger, "a request") as tab:
            cpu.charged_call(tab, burn, 0.2)
        burn(0.2)  # the server's own, for nobody
        worked.set()
        done.wait(30)

    run = threading.Thread(target=idle_run)
    run.start()
    going.wait(30)
    serving = threading.Thread(target=server)
    serving.start()
    worked.wait(30)
    accounts.used(victim)  # settled while the run goes
    done.set()
    serving.join(30)
    run.join(30)
    assert charged["run"] < 0.05, charged
    assert accounts.used(stranger)[0] == pytest.approx(0.2, abs=0.03)


def test_a_job_a_request_runs_is_charged_once_and_a_closed_tab_takes_nothing():
    """A request's handler runs a metered job on its own thread (an export): the job is charged its work, the
    request's tab only the rest of the handler; once the request ended its tab takes nothing more."""
    accounts = cpu.CpuAccounts(visitor_s=0, address_s=0)
    owner = Owner("v", "1.1.1.1")

    def handler() -> None:
        burn(0.1)
        with accounts.metered(owner, "an export"):
            burn(0.2)

    with accounts.serving(owner) as tab:
        cpu.charged_call(tab, handler)
        assert cpu.current_tab() is tab
    assert tab.seconds == pytest.approx(0.1, abs=0.03)
    assert accounts.used(owner)[0] == pytest.approx(0.3, abs=0.05)
    assert cpu.current_tab() is None
    cpu.charged_call(tab, burn, 0.05)  # a task the request left behind
    assert tab.seconds == pytest.approx(0.1, abs=0.03)


def test_a_flood_of_requests_is_kept_as_a_few_records(monkeypatch):
    """Every request's server work is charged: what one visitor spends within BUCKET_S is one record, so a flood of
    requests costs the accounts a few records, not one each."""
    now = {"wall": 1000.0}
    monkeypatch.setattr(cpu.time, "monotonic", lambda: now["wall"])
    accounts = cpu.CpuAccounts(visitor_s=0, address_s=0, clock=lambda: 0.0, threads=lambda tid: None)
    flood, other = Owner("flood", "9.9.9.9"), Owner("other", "9.9.9.9")
    for i in range(3000):
        with accounts.serving(flood if i % 3 else other) as tab:
            tab.add(0.001)
        now["wall"] += 0.01  # 30 s in all
    assert len(accounts.spent) <= 2 * (30 / cpu.BUCKET_S + 1)
    assert accounts.used(flood) == pytest.approx((2.0, 3.0))
    now["wall"] += cpu.WINDOW_S + 60
    assert accounts.used(flood) == (0, 0) and not accounts._latest


def test_a_runs_room_is_its_time_cap_and_its_visitors_cpu_at_the_rate_it_spends(monkeypatch):
    """Runner.room (what a pairs run asks before a second training, mirror.job): the watch would stop a run past its
    time (MIRROR_MAX_RUN_SECONDS) or its visitor's hour of CPU, and serve nothing, so a stretch that would cross
    either is refused with the reason; the CPU it would take is the run's own rate since its slot (a training on two
    cores spends two CPU seconds a second: on the default budget a 10-minute run had room for no second training, and
    was stopped in it, nothing served)."""
    from types import SimpleNamespace

    from explorer.runs.execute import Runner
    from explorer.runs.live import Run

    now = {"cpu": 0.0, "wall": 1000.0}
    monkeypatch.setattr(cpu.time, "monotonic", lambda: now["wall"])
    import explorer.runs.execute as execute

    monkeypatch.setattr(execute.time, "monotonic", lambda: now["wall"])
    accounts = cpu.CpuAccounts(visitor_s=1800, address_s=3600, clock=lambda: now["cpu"], threads=lambda tid: None)
    alice = Owner("a", "1.1.1.1")
    run = Run()
    run.session, run.slot_at, run.job_since = SimpleNamespace(owner=alice), 1000.0, 1000.0
    runner = SimpleNamespace(settings=SimpleNamespace(max_run_seconds=1800.0), cpu=accounts)
    with accounts.metered(alice, "a run") as job:
        now["cpu"] += 1200.0  # 600 s on two cores
        now["wall"] += 600.0
        room = lambda seconds: Runner.room(runner, run, job, seconds)  # noqa: E731
        assert room(250.0) is None  # 500 CPU seconds of the 600 left
        said = room(400.0)  # 800 of 600: its visitor's hour would stop it
        assert said and "~800 CPU seconds" in said and "600" in said and "MIRROR_VISITOR_CPU_S" in said
        runner.settings.max_run_seconds = 800.0
        said = room(250.0)  # 600 s in, 200 s left of its time
        assert said and "MIRROR_MAX_RUN_SECONDS" in said and "would not end" in said
        runner.settings.max_run_seconds, accounts.visitor_s, accounts.address_s = None, 0, 0
        assert room(10_000.0) is None  # no caps: room for anything
