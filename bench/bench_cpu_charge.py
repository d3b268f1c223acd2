"""What a visitor's run is charged while a stranger searches (issue 58, Medium row "CPU is charged to whoever's job
is running"), through the service with the bundled model and real threads (explorer.MirrorApp, no HTTP).

    .venv/bin/python bench/bench_cpu_charge.py [--strings 2000] [--steps 10] [--repeats 2]

A victim's words run (`--strings` of examples/en_top10k.txt, `--steps` steps, general checks off) alone, then again
while a stranger (another visitor, its own served run) searches back to back for the whole run. Reported: the CPU
seconds the victim is charged each time (explorer.resources.cpu), the stranger's, the process's, and the run's wall time;
the aim: the victim's charge with the stranger within 1.2x of alone. JSON: bench/out/cpu-charge.json.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import common  # puts the project on sys.path
from common import print_table, write_json

from explorer import MirrorApp, Settings  # noqa: E402
from explorer.resources.accounts import Owner  # noqa: E402


def run_once(app: MirrorApp, victim, words: list[str], steps: int, stranger=None) -> dict:
    before_v = app.cpu.used(victim.owner)[0]
    before_s = app.cpu.used(stranger.owner)[0] if stranger else 0.0
    cpu0, t0 = time.process_time(), time.perf_counter()
    stop, searches = threading.Event(), [0]

    def searching() -> None:
        while not stop.is_set():
            app.searcher.search(stranger, "\n".join(words[searches[0] % 50 :][:8]), 10)
            searches[0] += 1

    helper = threading.Thread(target=searching) if stranger else None
    if helper:
        helper.start()
    events = list(app.trainer.train(victim, "bundled", "words", {"max_steps": steps, "precision": "fp32"}))
    stop.set()
    if helper:
        helper.join()
    assert events[-1].kind == "done", events[-1]
    return {
        "stranger": "searching" if stranger else "none",
        "victim_charged_s": round(app.cpu.used(victim.owner)[0] - before_v, 2),
        "stranger_charged_s": round(app.cpu.used(stranger.owner)[0] - before_s, 2) if stranger else 0.0,
        "process_cpu_s": round(time.process_time() - cpu0, 2),
        "run_wall_s": round(time.perf_counter() - t0, 1),
        "searches": searches[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--strings", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    words = [w.strip() for w in (common.EXAMPLES / "en_top10k.txt").read_text().splitlines() if w.strip()]
    work = Path(tempfile.mkdtemp(prefix="cpu_charge_"))
    app = MirrorApp(Settings(work_dir=work, general_checks=False, warm_up=False, visitor_cpu_s=0, address_cpu_s=0))
    victim = app.sessions.get(None, Owner("victim", "10.0.0.1"))
    stranger = app.sessions.get(None, Owner("stranger", "10.0.0.2"))
    app.loader.load_pasted(victim, "\n".join(words[: args.strings]))
    app.loader.load_pasted(stranger, "\n".join(words[args.strings : 2 * args.strings]))
    first = list(app.trainer.train(stranger, "bundled", "words", {"max_steps": 2, "precision": "fp32"}))
    assert first[-1].kind == "done", first[-1]  # the stranger has a run to search
    run_once(app, victim, words, 2)  # warm: the model loaded, the kernels chosen
    rows = []
    for _ in range(args.repeats):
        rows.append(run_once(app, victim, words, args.steps))
        rows.append(run_once(app, victim, words, args.steps, stranger))
    cols = ["stranger", "victim_charged_s", "stranger_charged_s", "process_cpu_s", "run_wall_s", "searches"]
    print_table(rows, cols)
    alone = [r["victim_charged_s"] for r in rows if r["stranger"] == "none"]
    busy = [r["victim_charged_s"] for r in rows if r["stranger"] != "none"]
    ratio = (sum(busy) / len(busy)) / (sum(alone) / len(alone))
    print(f"\nvictim charged with a stranger searching / alone: {ratio:.2f}x (aim: <= 1.2x)")
    write_json("cpu-charge.json", {"rows": rows, "ratio": round(ratio, 3), "args": vars(args)})


if __name__ == "__main__":
    main()
