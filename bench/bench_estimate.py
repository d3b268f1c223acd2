"""Estimate vs measured: the Tune tab's calibrated time estimate (ui.plan_md.plan_text: app.planner.plan worded), then the real job the app
runs on the same strings (app.trainer.train: load, base index, training, save, tuned index, downloads) plus the
general checks it runs after training (explorer.compare.forgetting), each size on a fresh MirrorApp with its own work
folder. Calibrations and what finished runs taught the estimator (Estimator.observe) are per process, as in a
server: by default a later size is estimated with what the earlier sizes' runs measured; `--cold` forgets both
before each size, so every size is a first estimate on a fresh server (it calibrates anew). `--warm-up` runs the
server's start-up warm-up first (MirrorApp.warm_up, as app.py does in a background thread: the bundled model, the
base's side of the general checks, the estimate's calibration on the small example, UMAP's kernels), timed, as a
fresh `python app.py` whose visitor arrives after it. Prints estimate vs
measured per phase and in total, with the load average (2 cores shared with other work: the measurements move
with it).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_estimate.py [--sizes 400,1500,10000] [--cold] [--warm-up] [--fp32]
        [--hogs 0,1,2] [--pairs [foldoc|wordnet-glosses]]

`--hogs`: for each number N given, N other training processes run the whole time (each `mirror_tune` of the words
preset on 2,000 words, again and again: another visitor's run, a CLI job beside the server), so the run measured is
one of N + 1 concurrent jobs; its estimate is made with them running (a fresh calibration with `--cold`, or the
probe's speed now against an earlier one).

"searchable after s": from Launch to the run served (the Served event: search and Explore use it), before its general
checks and downloads; "measured s" runs to Done. `--fp32` runs everything as a CPU without native bf16 does.

400 is examples/small_words.txt (411 words), 1500 the first 1,500 of examples/en_top10k.txt, 10000 all of it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from pathlib import Path

from common import EXAMPLES, print_table, write_json

from explorer import MirrorApp, Settings
from explorer.events import Cancelled, Done, Failed, Phase, Served, Step
from explorer.tune.estimate import PHASES, in_fresh_thread
from explorer.tune.inputs import build_config
from ui.plan_md import plan_text

# A job's Phase texts (mirror.job, explorer.service) -> the estimate's phase they belong to.
PHASE_OF = (
    ("Checking the base model", "load"),
    ("Loading the base model", "load"),
    ("Indexing your strings with the base", "base index"),
    ("Starting the training", "training"),
    ("Saving the tuned model", "save"),
    ("Indexing your strings with the tuned", "tuned index"),
    ("Checking general similarity", "general checks"),
    ("Preparing downloads", "downloads"),
    # a pairs run that chooses its blend (issue 60): not a phase of the estimate's, measured on its own
    ("Saving the unblended tuned model", "blend choice"),
    ("Choosing the blend", "blend choice"),
)


# --pairs [NAME]: each size is that many rows of examples/pairs/NAME.tsv (default foldoc; wordnet-glosses: a general
# dictionary's words and glosses, scripts/make_pairs_wordnet_glosses.py), each text paired with its term
PAIRS: list[str] = [""]


def texts_of(size: int) -> tuple[list[str], str]:
    if PAIRS[0]:
        return pairs_of(size)[0], f"{PAIRS[0]}.tsv[:{size}]"
    if size == 400:
        return (EXAMPLES / "small_words.txt").read_text(encoding="utf-8").splitlines(), "small_words.txt"
    lines = (EXAMPLES / "en_top10k.txt").read_text(encoding="utf-8").splitlines()
    return lines[:size], f"en_top10k.txt[:{size}]"


def pairs_of(size: int) -> tuple[list[str], list[str]]:
    """The first `size` rows of the check half of examples/pairs/<--pairs>.tsv: definitions and their terms."""
    import csv

    with open(EXAMPLES / "pairs" / f"{PAIRS[0]}.tsv", encoding="utf-8", newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["half"] == "check"][:size]
    return [r["text"] for r in rows], [r["term"] for r in rows]


def load() -> float:
    return round(os.getloadavg()[0], 2)


def run_size(size: int, work: Path, cold: bool, warm_up: bool = False) -> dict:
    from explorer.tune.estimate import Estimator
    from mirror import checks

    if cold:  # a fresh server: no calibration, nothing learned from runs, the base's check scores not kept
        Estimator._process[0].clear()
        Estimator._observed.clear()
        checks._KEPT_SIDES.clear()
    app = MirrorApp(Settings(work_dir=work / f"size-{size}", warm_up=warm_up))
    row: dict = {"size": size}
    if warm_up:  # in a thread of its own, as app.py starts it
        t = time.perf_counter()
        in_fresh_thread(app.warm_up, "mirror-warm-up")
        row["warm_up_s"] = round(time.perf_counter() - t, 2)
    # the visitor's requests in another thread, as Gradio runs a handler (the job trains in a thread of its own)
    return in_fresh_thread(lambda: visit(app, size, row), "visitor")


def visit(app: MirrorApp, size: int, row: dict) -> dict:
    """The visitor: loads the strings, asks for the plan, launches the run; the row with the estimate vs measured."""
    session = app.session()
    raw, source = texts_of(size)
    partners = pairs_of(size)[1] if PAIRS[0] else None
    app.loader.set_texts(session, raw, source, partners=partners, columns=("definition", "term"))
    row.update(strings=len(session.texts), load_before=load())
    t = time.perf_counter()
    markdown = plan_text(app, session, "bundled", "auto", {})
    row["estimate_call_s"] = round(time.perf_counter() - t, 2)  # includes the calibration
    config, _ = build_config(
        session.texts, "bundled", "auto", {}, app.settings.max_steps, pairs=bool(PAIRS[0]), partners=session.partners
    )  # (the page's plan: its epochs scheduled on the rows that train)
    est, why = app.planner.estimate_of(session, config)  # the numbers behind that Markdown (calibrated: cached now)
    assert est.calibration is not None, why
    row.update(markdown=markdown, calibration_s=round(est.calibration.seconds, 2), steps=est.steps)
    row["calibration"] = dataclasses.asdict(est.calibration)
    row["estimated"] = {name: round(s, 2) for name, s in est.phases}

    measured = dict.fromkeys((*PHASES, "blend choice"), 0.0)
    current, mark = "load", time.perf_counter()
    started, steps = mark, []
    for ev in app.trainer.train(session, "bundled", "auto", {}):
        if isinstance(ev, Step):
            steps.append(round(time.perf_counter() - started, 3))
        if isinstance(ev, Served):  # the tuned model is searchable from here; its checks and downloads follow
            row["served_s"] = round(time.perf_counter() - started, 2)
        if isinstance(ev, Phase | Step | Done):
            phase = "training" if isinstance(ev, Step) else current
            if isinstance(ev, Phase):
                phase = next((p for prefix, p in PHASE_OF if ev.text.startswith(prefix)), current)
            now = time.perf_counter()
            measured[current] += now - mark
            current, mark = phase, now
        if isinstance(ev, Failed | Cancelled):
            raise SystemExit(f"size {size}: the run ended with {ev}")
        if isinstance(ev, Done):
            row["summary"] = ev.run.summary
            run = ev.run
    row["job_s"] = round(time.perf_counter() - started, 2)
    row["steps_at_s"] = steps  # seconds from the job's start to each training step's end
    row["checks_in_run_s"] = (run.stats.get("forgetting") or {}).get("seconds")
    row["measured"] = {name: round(s, 2) for name, s in measured.items()}
    row["load_after"] = load()
    row["estimated_total"] = round(est.total, 1)
    row["measured_total"] = round(sum(measured.values()), 1)
    row["ratio"] = round(row["measured_total"] / row["estimated_total"], 2)
    return row


HOG = """
import sys
from mirror.config import MirrorConfig
from mirror.train import mirror_tune
words = [w for w in open(sys.argv[1], encoding="utf-8").read().splitlines() if w.strip()][3000:5000]
while True:
    mirror_tune(words, MirrorConfig.preset("words", model="bundled", device="cpu", max_steps=20))
"""


def hogs(n: int):
    """`n` training processes running until stopped (the other jobs sharing the machine)."""
    import subprocess
    import sys

    from common import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", HOG, str(EXAMPLES / "en_top10k.txt")]
    return [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="400,1500,10000", help="comma-separated: 400, 1500 and/or 10000")
    parser.add_argument("--cold", action="store_true", help="every size estimated as on a fresh server")
    parser.add_argument("--warm-up", action="store_true", help="the server's start-up warm-up first (timed)")
    parser.add_argument(
        "--fp32", action="store_true", help="as a CPU without native bf16 runs it (precision auto = fp32 everywhere)"
    )
    parser.add_argument("--hogs", default="0", help="comma-separated: other training processes running meanwhile")
    parser.add_argument(
        "--pairs",
        nargs="?",
        const="foldoc",
        default="",
        help="sizes of rows of examples/pairs/PAIRS.tsv (default foldoc; or wordnet-glosses), each text with its term",
    )
    args = parser.parse_args()
    PAIRS[0] = args.pairs
    if args.fp32:
        import mirror.precision

        mirror.precision.cpu_has_native_bf16 = lambda: False
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    levels = [int(h) for h in args.hogs.split(",") if h.strip()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-estimate-") as tmp:
        for n_hogs in levels:
            others = hogs(n_hogs)
            try:
                if others:
                    time.sleep(20)  # the other jobs past their start (loading, tokenizing): training
                for size in sizes:
                    row = run_size(size, Path(tmp) / f"hogs-{n_hogs}", args.cold, args.warm_up)
                    row["jobs"] = n_hogs + 1
                    rows.append(row)
                    print(f"\n{size}, {n_hogs + 1} job(s) at once: {row['markdown']}")
                    print(f"   estimated {row['estimated']}")
                    print(f"   measured  {row['measured']}", flush=True)
            finally:
                for proc in others:
                    proc.kill()
                    proc.wait()
    table = [
        {
            "jobs at once": r.get("jobs", 1),
            "strings": r["strings"],
            "steps": r["steps"],
            "warm-up s": r.get("warm_up_s", "-"),
            "calibration s": r["calibration_s"],
            "estimate call s": r["estimate_call_s"],
            "estimated s": r["estimated_total"],
            "measured s": r["measured_total"],
            "measured / estimated": r["ratio"],
            "training est / meas s": f"{r['estimated']['training']:.0f} / {r['measured']['training']:.0f}",
            "indexes est / meas s": (
                f"{r['estimated']['base index'] + r['estimated']['tuned index']:.0f} / "
                f"{r['measured']['base index'] + r['measured']['tuned index']:.0f}"
            ),
            "checks est / meas s": f"{r['estimated']['general checks']:.0f} / {r['measured']['general checks']:.0f}",
            "blend choice meas s": f"{r['measured']['blend choice']:.0f}",
            "searchable after s": r.get("served_s", "-"),
            "load avg before -> after": f"{r['load_before']} -> {r['load_after']}",
        }
        for r in rows
    ]
    print()
    print_table(table, list(table[0]))
    name = (
        "estimate"
        + ("-cold" if args.cold else "")
        + ("-warm-up" if args.warm_up else "")
        + ("-fp32" if args.fp32 else "")
        + (f"-pairs{'' if args.pairs == 'foldoc' else '-' + args.pairs}" if args.pairs else "")
    )
    write_json(f"{name}.json", {"rows": rows, "cold": args.cold, "warm_up": args.warm_up, "fp32": args.fp32})


if __name__ == "__main__":
    main()
