"""explorer.runs.jobs: the training job and the slots it runs in. The job stops past the server's wall-clock cap and
when its consumer goes away (a closed tab, a disconnected client); on ZeroGPU it runs in another process inside
`spaces.GPU` for a bounded reservation; FairSlots admits waiters in arrival order.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time

from explorer import MirrorApp
from explorer.resources.turns import FairSlots
from explorer.runs.jobs import job_duration
from mirror import MirrorConfig
from tests.conftest import ENDLESS, ROOT, WORDS


def endless_app(app: MirrorApp, **settings) -> MirrorApp:
    """`app` without the server's step cap (so only a stop ends an ENDLESS run), with `settings` changed."""
    return MirrorApp(dataclasses.replace(app.settings, max_steps=None, **settings))


def test_job_duration_for_zerogpu_is_bounded():
    texts = [f"word{i}" for i in range(10_000)]
    config = MirrorConfig.preset("words").to_dict()
    assert 60 <= job_duration(texts, config, "/tmp/x", [], True, {}) <= 600
    assert job_duration(texts[:50], config, "/tmp/x", [], True, {}) == 60


def test_a_pairs_runs_rough_guess_and_zerogpu_reservation_price_its_rows_at_their_longer_side():
    """A plan shown while another run trained read "(rough guess) ~2 min training" for a 6-min run of GO definitions
    and their terms, and a ZeroGPU reservation is that same guess: each row was priced at its string's length, cut at
    the strings' max length. A pairs row trains at its longer side, either side up to the pairs' max length
    (mirror.plan.longer_sides, as the calibrated plan prices it); its index holds the strings alone, and its held-out
    rows do not train."""
    import dataclasses as dc

    from explorer.tune.guess import estimate_seconds, rough_estimate
    from explorer.tune.inputs import trained_rows

    n = 20_000
    terms = [f"term {i}" for i in range(n)]
    definitions = [f"the definition of term {i}: " + "a longer account of what the term means " * 10 for i in range(n)]
    config = dc.replace(MirrorConfig.preset("sentences"), pairs=True)
    assert config.max_length < 100 < config.pair_max_length  # the definitions: ~107 tokens
    trained = trained_rows(terms, config, definitions)
    assert trained < n  # held-out rows

    def training(texts, partners=None) -> float:
        est = rough_estimate(texts, config, "cpu", 2, trained, partners)
        return dict(est.phases)["training"]

    assert training(terms, definitions) == training(definitions, terms)  # whichever column is searched
    assert training(terms, definitions) > 1.5 * training(definitions) > 10 * training(terms)
    index = dict(rough_estimate(terms, config, "cpu", 2, trained, definitions).phases)["tuned index"]
    assert index == dict(rough_estimate(terms, config, "cpu", 2, trained).phases)["tuned index"]  # strings indexed
    # its second training (mirror.job._train_again) beside it, only where the run chooses its blend: enough held-out
    # rows (a 200-row run holds out 20 and keeps the preset's α: its rough plan said "~N more if the checks hold …")
    choosing = dc.replace(config, blend_choose=True, retry_anchor=30.0)
    assert rough_estimate(terms, choosing, "cpu", 2, trained, definitions).retry == training(terms, definitions)
    few = trained_rows(terms[:200], choosing, definitions[:200])
    assert rough_estimate(terms[:200], choosing, "cpu", 2, few, definitions[:200]).retry == 0
    assert rough_estimate(terms, choosing, "cpu", 2, trained).retry == 0  # no partners: no pairs run
    # a row without a partner trains on its string
    assert estimate_seconds(definitions, config, "cpu", partners=[None] * n) == (
        estimate_seconds(definitions, config, "cpu", partners=definitions)
    )
    # the reservation: the same guess on the GPU, from train_job's own arguments (positional or named)
    on_gpu = estimate_seconds(terms, config, "cuda", trained=trained, partners=definitions)
    args = (config.to_dict(), "/tmp/x", [], True, {})
    reserved = job_duration(terms, *args, definitions)
    assert reserved == job_duration(terms, *args, partners=definitions) == int(min(600, 1.5 * sum(on_gpu[1:]) + 30))
    assert reserved > job_duration(terms, *args) == 60


def test_fair_slots_admit_in_arrival_order_and_never_more_than_the_limit():
    slots, inside, peak, order = FairSlots(2), [0], [0], []
    gate = threading.Event()

    def work(i: int) -> None:
        with slots:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
            order.append(i)
            gate.wait(5)
            time.sleep(0.01)
            inside[0] -= 1

    threads = []
    for i in range(8):  # queue them one by one, so arrival order is known
        threads.append(threading.Thread(target=work, args=(i,)))
        threads[-1].start()
        deadline = time.monotonic() + 5
        while len(order) + len(slots._waiting) < i + 1 and time.monotonic() < deadline:
            time.sleep(0.001)
    gate.set()
    for t in threads:
        t.join(10)
    assert order == list(range(8)) and peak[0] == 2


# Attack review, runs that never end: a run stops past the server's wall-clock cap, or when nobody watches it.


def test_the_wall_clock_cap_stops_a_run_and_keeps_the_previous_model(app, tiny_bert):
    app = endless_app(app)
    s = app.session()
    app.loader.load_pasted(s, "\n".join(WORDS))
    assert list(app.trainer.train(s, str(tiny_bert), "auto", {**ENDLESS, "max_steps": 2}))[-1].kind == "done"
    previous = s.run
    timed = endless_app(app, max_run_seconds=1.5)
    t = time.monotonic()
    last = list(timed.trainer.train(s, str(tiny_bert), "auto", ENDLESS))[-1]
    assert last.kind == "cancelled" and "stops a run after" in last.text, last
    assert time.monotonic() - t < 300 and s.run is previous and (previous.folder / "model").is_dir()  # it ended at all
    assert app.registry.of(s) is None


def test_a_consumer_that_goes_away_stops_its_run(app, tiny_bert, monkeypatch):
    """A closed tab or a disconnected API client stops pulling events: the job notices and stops."""
    monkeypatch.setattr("explorer.runs.jobs.ABANDONED_S", 1.0)
    app = endless_app(app)
    s = app.session()
    app.loader.load_pasted(s, "\n".join(WORDS))
    events = app.trainer.train(s, str(tiny_bert), "auto", ENDLESS)
    assert next(e for e in events if e.kind == "step")  # it runs; now nobody asks for the next event
    run = app.registry.of(s)
    deadline = time.monotonic() + 30
    while not run.ended and time.monotonic() < deadline:  # the run's own thread stops it
        time.sleep(0.2)
    assert run.ended and app.registry.of(s) is None and s.run is None
    last = run.events[-1]
    assert last.kind == "cancelled" and "went away" in last.text
    assert not run.folder.exists()  # nothing was saved


def test_a_reloaded_page_reattaches_and_the_run_goes_on(app, tiny_bert, monkeypatch):
    """A consumer that comes back within ABANDONED_S (a reload) follows the same run, from its first event on,
    and can still cancel it; the run never noticed the gap."""
    monkeypatch.setattr("explorer.runs.jobs.ABANDONED_S", 5.0)
    app = endless_app(app)
    s = app.session()
    app.loader.load_pasted(s, "\n".join(WORDS))
    first = app.trainer.train(s, str(tiny_bert), "auto", ENDLESS)
    assert next(e for e in first if e.kind == "step")
    run_id = app.registry.of(s).id
    first.close()  # the page went away
    seen = []
    for ev in app.trainer.follow(run_id):  # the reloaded page
        seen.append(ev)
        if ev.kind == "step" and ev.step == 5:
            assert "Stopping" in app.trainer.cancel(s)
    steps = [e.step for e in seen if e.kind == "step"]
    assert seen[0].kind == "phase" and steps == list(range(1, len(steps) + 1)) and len(steps) >= 5
    assert seen[-1].kind == "cancelled" and "Cancelled after" in seen[-1].text


# ---------------------------------------------------------------------------------------------- ZeroGPU

FAKE_SPACES = '''
"""A stand-in for the `spaces` package on ZeroGPU: the decorated function runs in a forked worker process."""
import multiprocessing
import pickle

calls = []


class config:
    class Config:
        zero_gpu = True


def GPU(duration=60):
    def decorate(fn):
        def wrapper(*args, **kwargs):
            pickle.dumps((args, kwargs))  # the real one sends them to its GPU worker: what cannot be pickled fails
            calls.append(duration(*args, **kwargs) if callable(duration) else duration)
            ctx = multiprocessing.get_context("fork")
            q = ctx.Queue()

            def target():
                try:
                    for item in fn(*args, **kwargs):
                        q.put(item)
                finally:
                    q.put(None)

            worker = ctx.Process(target=target, daemon=True)
            worker.start()
            while (item := q.get()) is not None:
                yield item
            worker.join()

        return wrapper

    return decorate
'''

ZERO_GPU_SCRIPT = """
import os, sys
from pathlib import Path
import spaces
from explorer import MirrorApp, Settings
from explorer.settings import inference_device, zero_gpu
assert zero_gpu() and inference_device() == "cpu"
# the general checks off, as in the other service tests: they run in this process after the GPU job, not in it
a = MirrorApp(Settings(work_dir=Path(sys.argv[1]), model_roots=(Path(sys.argv[2]),), general_checks=False))
s = a.session()
a.loader.load_pasted(s, "\\n".join(sys.argv[3:]))
events = list(a.trainer.train(s, sys.argv[2], "auto", {"batch_size": 8, "max_steps": 3, "device": "cpu"}))
assert events[-1].kind == "done", events[-1]
assert sum(e.kind == "step" for e in events) == 3
assert len(spaces.calls) == 1 and 60 <= spaces.calls[0] <= 600, spaces.calls
assert s.run.model_zip.is_file() and a.searcher.search(s, "cat", 2)[0]["tuned"]
print("ok", os.getpid())
"""


def test_training_runs_inside_spaces_gpu_and_returns_files(tmp_path, tiny_bert):
    """On ZeroGPU the job runs in another process: only its yielded events and files come back."""
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "spaces.py").write_text(FAKE_SPACES)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", ZERO_GPU_SCRIPT, str(tmp_path / "work"), str(tiny_bert), *WORDS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and out.stdout.startswith("ok"), out.stdout + out.stderr[-3000:]


def test_the_servers_memory_budget_reaches_the_training_step(app, tiny_bert):
    """The attack shape (a few words and one very long string) through the service: with the server's budget the
    long string's batch is split to fit, or the run is refused before its first step; never an unbounded step."""
    long_string = " ".join(["cat dog car bus"] * 40)  # ~160 tokens: the tiny BERT's limit is 128
    words = [*WORDS, long_string]
    for budget, expect in ((138 * 2**20, "split"), (133 * 2**20, "refused")):
        server = endless_app(app, train_memory_bytes=budget)
        s = server.session()
        server.loader.load_pasted(s, "\n".join(words))
        settings = {"batch_size": 16, "max_steps": 1, "max_length": 128, "device": "cpu"}
        last = list(server.trainer.train(s, str(tiny_bert), "sentences", settings))[-1]
        if expect == "split":
            assert last.kind == "done" and any("split to fit" in n for n in s.run.stats["notes"]), last
        else:
            assert last.kind == "error" and "lower the max length" in last.text, last
