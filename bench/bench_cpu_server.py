"""A victim's run through the real server while a stranger fires short jobs over HTTP back to back (issue 58, the
Medium rows "CPU is charged to whoever's job is running" and "turns let a stranger slow any run"): what the victim is
charged, and how much longer its run takes.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_cpu_server.py [--strings 2000] [--steps 10] [--repeats 2]
        [--strangers search,export,evaluate]

`python app.py` (tests.server.serve: the bundled model, general checks off, no CPU budget) with `MIRROR_LOG_CPU=1`,
which logs each metered job as it ends (explorer.resources.cpu: what, whose, CPU seconds charged, wall, how long runs
paused meanwhile) and each request's and event's server work charged to its visitor (ui.web.tabs: "server work for
…"); the bench reads the victim's charge from there. Two visitors, each its own signed cookie and gradio_client
Client: the stranger trains a run of its own first (something to search and export); the victim runs /train
(`--strings` of examples/en_top10k.txt, `--steps` steps, fp32) once to warm, then per repeat alone and once while the
stranger, for the whole run, fires one of: searches of its run (/search, 8 queries each), one-row Parquet exports of
its run (/export, `--export-format` all by default, a new row each time: nothing cached), or evaluations (the page's
Evaluate, SimLex and WordSim, raw HTTP). Reported per victim run: CPU charged (the server's log), the run job's wall
(the log) and the /train call's wall (the client), the time runs were paused for interactive work, the stranger's jobs
and CPU charged (of which its requests' server work), the victim's own requests' server work, the server process's
CPU. Aims: the victim's charge with a stranger searching <= 1.2x alone; a stream of short jobs slows a run at most
`PAUSE_FACTOR` (2x) its work + 1 s by pausing it (explorer.resources.turns; contention for the cores comes on top).
JSON: bench/out/cpu-server.json.
"""

from __future__ import annotations

import argparse
import itertools
import re
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import common  # puts the project on sys.path
from common import cpu_seconds, print_table, write_json

from explorer.resources.turns import PAUSE_FACTOR, PAUSE_FLOOR_S  # noqa: E402

LINE = re.compile(
    r"cpu job: (?P<what>[^|]+?) \| visitor (?P<who>[0-9a-f]+) \| charged (?P<charged>[\d.]+) s \| "
    r"wall (?P<wall>[\d.]+) s \| runs paused (?P<paused>[\d.]+) s"
)


def cookie_of(url: str) -> tuple[str, str]:
    """A new visitor's signed cookie (the server sets it on a first answer) and the hash the log names it by."""
    import hashlib

    import httpx

    r = httpx.get(url + "config", timeout=60)
    value = r.cookies["mirror_visitor"]
    return value, hashlib.sha256(value.split(".")[0].encode()).hexdigest()[:12]


class Visitor:
    def __init__(self, url: str):
        from gradio_client import Client

        self.url = url
        self.cookie, self.hash = cookie_of(url)
        self.client = Client(url, verbose=False, headers={"Cookie": f"mirror_visitor={self.cookie}"})

    def page(self):
        from tests.server import Page

        return Page(self.url, cookies=False, headers={"Cookie": f"mirror_visitor={self.cookie}"})


def jobs_in(log: Path, start: int) -> tuple[list[dict], int]:
    """The metered jobs the server logged from byte `start` on, and where the log ends now."""
    text = log.read_bytes()
    rows = [
        {**m.groupdict(), **{k: float(m[k]) for k in ("charged", "wall", "paused")}}
        for m in LINE.finditer(text[start:].decode(errors="replace"))
    ]
    return rows, len(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--strings", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--strangers", default="search,export,evaluate")
    parser.add_argument(
        "--export-format", default="all", help="the stranger's exports: all|parquet|neighbours|projector"
    )
    args = parser.parse_args()
    from tests.server import serve

    words = [w.strip() for w in (common.EXAMPLES / "en_top10k.txt").read_text().splitlines() if w.strip()]
    victim_text = "\n".join(words[: args.strings])
    stranger_words = words[args.strings : args.strings + 500]
    env = {
        "MIRROR_LOG_CPU": "1",
        "MIRROR_GENERAL_CHECKS": "0",
        "MIRROR_VISITOR_CPU_S": "0",
        "MIRROR_ADDRESS_CPU_S": "0",
        "MIRROR_LOG_KB_PER_MINUTE": "4096",
    }
    settings = {"max_steps": args.steps, "precision": "fp32"}
    work = Path(tempfile.mkdtemp(prefix="cpu_server_"))
    with serve(work, env, timeout=300) as served:
        url, log = served.url, served.log
        victim, stranger = Visitor(url), Visitor(url)
        summary, _, _ = stranger.client.predict(
            texts="\n".join(stranger_words),
            model="bundled",
            mode="words",
            settings={**settings, "max_steps": 2},
            api_name="/train",
        )
        stranger_run = summary["run_id"]
        victim.client.predict(
            texts=victim_text, model="bundled", mode="words", settings={**settings, "max_steps": 2}, api_name="/train"
        )  # warm: the model loaded, the kernels chosen, the base index built
        eval_page = stranger.page()

        def search(k: int) -> None:
            queries = "\n".join(stranger_words[(8 * k) % 400 :][:8])
            stranger.client.predict(queries=queries, k=10, run=stranger_run, api_name="/search")

        def export(k: int) -> None:
            stranger.client.predict(
                fmt=args.export_format, rows=[k % len(stranger_words)], run=stranger_run, api_name="/export"
            )

        def evaluate(k: int) -> None:  # noqa: ARG001
            answer = eval_page.event("on_eval", {0: ["SimLex-999", "WordSim-353"]})
            assert answer.get("success"), str(answer)[:500]

        firing: dict[str, Callable[[int], None]] = {"search": search, "export": export, "evaluate": evaluate}
        kinds = [k.strip() for k in args.strangers.split(",") if k.strip()]

        numbers = {kind: itertools.count() for kind in kinds}  # across repeats: each export another row (not cached)

        def victim_run(kind: str | None) -> dict:
            _, start = jobs_in(log, 0)
            stop, errors = threading.Event(), []

            def stream() -> None:
                while not stop.is_set():
                    try:
                        firing[kind](next(numbers[kind]))
                    except Exception as exc:  # noqa: BLE001 - reported in the row
                        errors.append(repr(exc)[:200])
                        time.sleep(0.5)

            helper = threading.Thread(target=stream) if kind else None
            cpu0, t0 = cpu_seconds(served.proc.pid), time.perf_counter()
            if helper:
                helper.start()
            summary, _, _ = victim.client.predict(
                texts=victim_text, model="bundled", mode="words", settings=settings, api_name="/train"
            )
            wall = time.perf_counter() - t0
            stop.set()
            if helper:
                helper.join()
            cpu = cpu_seconds(served.proc.pid) - cpu0
            time.sleep(0.5)  # the last log lines written
            jobs, _ = jobs_in(log, start)
            runs = [j for j in jobs if j["who"] == victim.hash and j["what"] == "a run"]
            assert len(runs) == 1 and summary["steps"] == args.steps, (runs, summary)
            theirs = [j for j in jobs if j["who"] == stranger.hash]
            tabs = [j for j in theirs if j["what"].startswith("server work")]  # its requests' (ui.web.tabs)
            victim_served = [j for j in jobs if j["who"] == victim.hash and j["what"].startswith("server work")]
            work_s = runs[0]["wall"] - runs[0]["paused"]  # the turns' bound: paused <= (factor - 1) x work + floor
            bound = (PAUSE_FACTOR - 1.0) * work_s + PAUSE_FLOOR_S
            return {
                "stranger": kind or "none",
                "victim_charged_s": round(runs[0]["charged"], 2),
                "run_job_wall_s": round(runs[0]["wall"], 1),
                "train_call_wall_s": round(wall, 1),
                "paused_s": round(runs[0]["paused"], 1),
                "pause_bound_s": round(bound, 1),
                "stranger_jobs": len(theirs) - len(tabs),
                "stranger_charged_s": round(sum(j["charged"] for j in theirs), 2),
                "stranger_server_work_s": round(sum(j["charged"] for j in tabs), 2),
                "victim_server_work_s": round(sum(j["charged"] for j in victim_served), 2),
                "server_cpu_s": round(cpu, 1),
                "errors": len(errors),
                "first_error": errors[0] if errors else "",
            }

        rows = []
        for r in range(args.repeats):
            for kind in [None, *kinds]:
                rows.append(victim_run(kind))
                print(f"repeat {r + 1}: {rows[-1]}", flush=True)
    cols = [
        "stranger",
        "victim_charged_s",
        "run_job_wall_s",
        "train_call_wall_s",
        "paused_s",
        "pause_bound_s",
        "stranger_jobs",
        "stranger_charged_s",
        "stranger_server_work_s",
        "victim_server_work_s",
        "server_cpu_s",
        "errors",
    ]
    print_table(rows, cols)
    alone = [r for r in rows if r["stranger"] == "none"]

    def mean(rs: list[dict], key: str) -> float:
        return sum(r[key] for r in rs) / len(rs)

    ratios = {}
    for kind in kinds:
        busy = [r for r in rows if r["stranger"] == kind]
        ratios[kind] = {
            "charged": round(mean(busy, "victim_charged_s") / mean(alone, "victim_charged_s"), 3),
            "wall": round(mean(busy, "run_job_wall_s") / mean(alone, "run_job_wall_s"), 3),
            "paused_s": round(mean(busy, "paused_s"), 1),
        }
        print(
            f"with a stranger's {kind} jobs back to back / alone: victim charged {ratios[kind]['charged']:.2f}x "
            f"(aim <= 1.2x), run wall {ratios[kind]['wall']:.2f}x, paused {ratios[kind]['paused_s']:.1f} s"
        )
    write_json("cpu-server.json", {"rows": rows, "ratios": ratios, "args": vars(args)})


if __name__ == "__main__":
    main()
