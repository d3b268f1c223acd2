"""Shared cores (issue 54): jobs at once against the same jobs alone, through the real server and across processes.

    .venv/bin/python bench/bench_concurrency.py [--policy both|on|off] [--map-strings 20000] [--run-words 3000]

For each policy (`on`: this project's, mirror/cores.py; `off`: MIRROR_SHARE_CORES=0, the OpenMP runtimes' own
defaults, i.e. before issue 54) a server (`python app.py`, bundled model, general checks on) is started and these
jobs are timed, each by a visitor of its own (a gradio_client Client), first alone, then two at once:

- run: /train on `--run-words` words of examples/en_top10k.txt, `--run-steps` steps, with its general checks
- map: /map of a prepared run of `--map-strings` strings (words and STS-B sentences): both layouts, on a fresh
  server each time (a server keeps one layout per run)
- export: /export parquet of a fresh selection of that run (every string but a few: not one already written)
- search: /search, one query per call, back to back: its p50 alone and while a run trains

Reported per job: wall seconds alone and at once (and the ratio), the server's CPU seconds for a pair against the sum
of the two alone. Across processes, the issue's own case: two `mirror_tune` runs of the sentences preset on 10
one-line descriptions (50 steps) in two processes at once, each process's training seconds against one alone.
Aims (issue 54, 2 cores): each of two jobs at once <= 2.3x its time alone, their CPU <= 1.15x the two alone, a
search's p50 during a run <= 3x idle. JSON: bench/out/concurrency.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from common import EXAMPLES, ROOT, cpu_seconds, print_table, write_json

QUERIES = ["kitten", "sad", "car", "apple", "river", "doctor", "blue", "run", "house", "music"]
OFF = {"MIRROR_SHARE_CORES": "0"}
TRAIN_ONE = """
import json, sys, time
from mirror.config import MirrorConfig
from mirror.train import mirror_tune
texts = [l.strip() for l in open(sys.argv[1], encoding="utf-8") if l.strip()][:10]
started = time.perf_counter(); cpu = time.process_time()
result = mirror_tune(texts, MirrorConfig.preset("sentences", model="bundled", device="cpu"))
print(json.dumps({"steps": result.stats()["steps"], "wall": time.perf_counter() - started,
                  "cpu": time.process_time() - cpu}))
"""


def words(n: int, start: int = 0) -> list[str]:
    lines = (EXAMPLES / "en_top10k.txt").read_text(encoding="utf-8").splitlines()
    return [w for w in lines if w.strip()][start : start + n]


def sentences(n: int) -> list[str]:
    lines = (EXAMPLES / "stsb_train_sentences.txt").read_text(encoding="utf-8").splitlines()
    return [s for s in lines if s.strip()][:n]


class Server:
    """`python app.py` on a free port with its own work folder; `env` on top of ours."""

    def __init__(self, env: dict[str, str], work: Path):
        from tests.server import free_port

        work.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        full = {**os.environ, **env, "MIRROR_WORK_DIR": str(work), "PYTHONUNBUFFERED": "1"}
        full.update(GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        for name in ("GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OMP_WAIT_POLICY"):  # this process's policy is not the server's
            if name not in env:
                full.pop(name, None)
        self.log = open(work.parent / f"server-{self.port}.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "app.py", "--port", str(self.port)],
            cwd=ROOT,
            env=full,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        import urllib.request

        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(self.url, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"the server did not start: {work.parent}")

    def client(self):
        from gradio_client import Client

        return Client(self.url, verbose=False)

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


def timed(job: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    out = job()
    return time.perf_counter() - started, out


def together(jobs: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Start the jobs at once (a thread each); each one's wall seconds."""
    walls: dict[str, float] = {}
    errors: list[BaseException] = []

    def one(name: str, job: Callable[[], object]) -> None:
        try:
            walls[name] = timed(job)[0]
        except BaseException as exc:  # noqa: BLE001 - reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=one, args=item) for item in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return walls


def prepare(server: Server, args: argparse.Namespace) -> tuple[str, int]:
    """A run of `--map-strings` strings (words and STS-B sentences) to map and export: (its id, its strings)."""
    corpus = words(args.map_strings // 2) + sentences(args.map_strings - args.map_strings // 2)
    print(f"  preparing a run of {len(corpus):,} strings to map and export...", flush=True)
    big = server.client().predict(
        texts="\n".join(corpus), model="bundled", settings={"max_steps": 1}, api_name="/train"
    )
    return big[0]["run_id"], int(big[0]["strings"])


def server_jobs(env: dict[str, str], work: Path, args: argparse.Namespace, big: tuple[str, int] | None) -> dict:
    """Every in-server job alone and in pairs. A map's layout is kept per run (a second /map of a run is a sample of
    it, explorer.compare.maps.sample_of): every measurement with a map starts a fresh server on the same work folder
    (runs are kept on disk), so each lays its map out anew."""
    server = Server(env, work)
    run_id, n_strings = big or prepare(server, args)
    run_text = "\n".join(words(args.run_words, start=1000))
    settings = {"max_steps": args.run_steps, "device": "cpu"}
    counter = {"export": 0}
    clients: dict[int, object] = {}

    def searcher_of(srv: Server):
        if id(srv) not in clients:
            clients[id(srv)] = srv.client()
        return clients[id(srv)]

    def run() -> object:
        return server.client().predict(texts=run_text, model="bundled", settings=settings, api_name="/train")

    def map_job() -> object:
        return server.client().predict(n=0, queries="", run=run_id, api_name="/map")

    def export_job() -> object:
        counter["export"] += 1
        rows = list(range(n_strings - counter["export"]))  # a selection not written yet
        return server.client().predict(fmt="parquet", rows=rows, run=run_id, api_name="/export")

    def fresh() -> None:
        """A new server process (no map laid out yet), warmed: its models loaded, the checks' base side scored."""
        nonlocal server
        server.stop()
        server = Server(env, work)
        searcher_of(server).predict(queries="warm", k=10, run=run_id, api_name="/search")

    def searches(stop: Callable[[], bool], at_least: int = 20) -> list[float]:
        client, out = searcher_of(server), []
        while len(out) < at_least or not stop():
            q = QUERIES[len(out) % len(QUERIES)]
            out.append(timed(lambda q=q: client.predict(queries=q, k=10, run=run_id, api_name="/search"))[0])
        return out

    try:
        run()  # warm: the checks' base side, the kernels of every shape
        searches(lambda: True, 5)
        jobs = {"run": run, "map": map_job, "export": export_job}
        alone: dict[str, dict[str, float]] = {}
        for name, job in jobs.items():
            if name == "map":
                fresh()
            cpu0 = server.cpu()
            wall = timed(job)[0]
            alone[name] = {"wall": wall, "cpu": server.cpu() - cpu0}
            print(f"  {name} alone: {wall:.1f} s, {alone[name]['cpu']:.1f} s of CPU", flush=True)
        idle = searches(lambda: True)
        pairs = []
        for a, b in (("run", "map"), ("run", "export"), ("map", "export")):
            if "map" in (a, b):
                fresh()
            cpu0 = server.cpu()
            walls = together({a: jobs[a], b: jobs[b]})
            cpu = server.cpu() - cpu0
            row = {"jobs": f"{a} + {b}", "cpu": cpu, "cpu_ratio": cpu / (alone[a]["cpu"] + alone[b]["cpu"])}
            for name in (a, b):
                row[f"{name}_wall"] = walls[name]
                row[f"{name}_ratio"] = walls[name] / alone[name]["wall"]
            pairs.append(row)
            print(f"  {row}", flush=True)
        done = threading.Event()
        during: list[float] = []
        searching = threading.Thread(target=lambda: during.extend(searches(done.is_set)))
        searching.start()
        run_wall = timed(run)[0]
        done.set()
        searching.join()
    finally:
        server.stop()
    search = {
        "idle_p50": statistics.median(idle),
        "during_run_p50": statistics.median(during),
        "ratio": statistics.median(during) / statistics.median(idle),
        "n_during": len(during),
        "run_wall_with_searches": run_wall,
    }
    print(f"  search: {search}", flush=True)
    return {"alone": alone, "pairs": pairs, "search": search, "run_id": run_id, "strings": n_strings}


def cli_pair(env: dict[str, str], work: Path) -> dict[str, object]:
    """The issue's case across processes: one training process alone, then two at once."""
    script = work / "train_one.py"
    script.write_text(TRAIN_ONE)
    data = EXAMPLES / "stsb_train_sentences.txt"
    full = {**os.environ, **env, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    for name in ("GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OMP_WAIT_POLICY"):
        if name not in env:
            full.pop(name, None)

    def start() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(script), str(data)], env=full, stdout=subprocess.PIPE, text=True)

    def result(proc: subprocess.Popen) -> dict:
        out, _ = proc.communicate(timeout=1800)
        return json.loads(out.strip().splitlines()[-1])

    alone = result(start())
    both = [start(), start()]
    pair = [result(p) for p in both]
    row = {"alone": alone["wall"], "alone_cpu": alone["cpu"], "at_once": [p["wall"] for p in pair]}
    row["ratio"] = max(row["at_once"]) / alone["wall"]
    row["cpu_ratio"] = sum(p["cpu"] for p in pair) / (2 * alone["cpu"])
    print(f"  two processes: {row}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", choices=["both", "on", "off"], default="both")
    parser.add_argument("--map-strings", type=int, default=20_000)
    parser.add_argument("--run-words", type=int, default=2000)
    parser.add_argument("--run-steps", type=int, default=20)
    parser.add_argument("--skip-server", action="store_true", help="only the two training processes")
    parser.add_argument("--skip-processes", action="store_true", help="only the jobs through the server")
    args = parser.parse_args()
    results: dict[str, object] = {}
    root = Path(tempfile.mkdtemp(prefix="mirror-concurrency-"))
    big = None  # the run to map and export: made once, kept on disk, opened by the next policy's servers
    for policy in ["off", "on"] if args.policy == "both" else [args.policy]:
        env = OFF if policy == "off" else {}
        print(f"policy {policy}", flush=True)
        if not args.skip_processes:
            results[policy] = {"processes": cli_pair(env, root)}
        if not args.skip_server:
            results.setdefault(policy, {})["server"] = out = server_jobs(env, root / "work", args, big)
            big = (out["run_id"], out["strings"])
    rows = []
    for policy, r in results.items():
        p = r.get("processes")
        if p:
            rows.append(
                {
                    "policy": policy,
                    "jobs": "2 training processes",
                    "a": f"{max(p['at_once']):.1f} s / {p['alone']:.1f} s = {p['ratio']:.2f}x",
                    "b": "",
                    "cpu": f"{p['cpu_ratio']:.2f}x",
                }
            )
        for pair in (r.get("server") or {}).get("pairs", []):
            a, b = pair["jobs"].split(" + ")
            rows.append(
                {
                    "policy": policy,
                    "jobs": pair["jobs"],
                    "a": f"{a} {pair[a + '_ratio']:.2f}x",
                    "b": f"{b} {pair[b + '_ratio']:.2f}x",
                    "cpu": f"{pair['cpu_ratio']:.2f}x",
                }
            )
        if "server" in r:
            s = r["server"]["search"]
            rows.append(
                {
                    "policy": policy,
                    "jobs": "search during a run",
                    "a": f"p50 {s['during_run_p50'] * 1000:.0f} ms / {s['idle_p50'] * 1000:.0f} ms = {s['ratio']:.2f}x",
                    "b": "",
                    "cpu": "",
                }
            )
    print()
    print_table(rows, ["policy", "jobs", "a", "b", "cpu"])
    write_json("concurrency.json", {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
