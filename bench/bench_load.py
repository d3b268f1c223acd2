"""Load: the running app under parallel clients. `python app.py` is started on a free port (bundled model),
then 20 gradio_client sessions issue searches in parallel while one more session runs a training, and each
client also connects anew (`Client(url)`: /config, /info) at the start of every round.

    .venv/bin/python bench/bench_load.py [--clients 20] [--searches 50] [--rounds 3] [--procs 4]

Each client is its own session, and /search needs a tuned model in that session, so every client first
tunes the bundled model for one step on its own 50 words (setup, not timed). Then, per round, all clients
search at once (`--searches` each, k=10, one query per call, back to back) while one extra client tunes on
the 411-word example (`--train-steps` steps). The clients live in `--procs` worker processes (threads in
each): gradio_client costs about as much CPU per call as the server does, and one process of 20 client
threads is held to one core by the GIL. The rounds reuse the same sessions, so the server's memory should
not grow from one round to the next. Reported per round: errors, p50/p99 search latency, searches per
second, connect time (a new `Client()` per client, all at once at round start, while the searches and the
training run: each fetches /config, which Gradio deep-copies), the server's CPU seconds, and its RSS (with its
child processes, from /proc) before, at its peak during the round (sampled every 0.25 s), and after.
Everything runs on one machine: the clients' CPU is taken from the server's. JSON: bench/out/load.json.

    .venv/bin/python bench/bench_load.py --in-process [--search-concurrency 0,4,0,4]

measures the app's search path alone (no Gradio, no clients): 20 sessions, each tuned as above, searched by
20 threads at once (30 searches each) with MirrorApp(search_concurrency=N) for each N given (0: unlimited),
to choose MIRROR_SEARCH_CONCURRENCY. JSON: bench/out/load-inprocess.json.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from common import ROOT, print_table, write_json

EXAMPLE = ROOT / "examples" / "small_words.txt"
QUERIES = ["kitten", "sad", "car", "apple", "river", "doctor", "blue", "run", "house", "music"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    """Resident memory of `pid` and all its descendants, in MB (VmRSS from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(work: Path, port: int, env_extra: dict[str, str]) -> subprocess.Popen:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "GRADIO_ANALYTICS_ENABLED": "False",
        "MIRROR_WORK_DIR": str(work / "sessions"),
        **env_extra,
    }
    log = open(work / "server.log", "w")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        [sys.executable, "app.py", "--port", str(port)], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"app.py exited with {proc.returncode}: see {work / 'server.log'}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
                if response.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("app.py did not answer within 180 s")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def search_loop(
    i: int, client, searches: int, latencies: list[float], errors: list[str], connects: list[float]
) -> None:
    """One client connects anew, then searches back to back (list.append is atomic: the threads share the lists)."""
    from gradio_client import Client

    t0 = time.perf_counter()
    try:
        Client(client.src, verbose=False, download_files=False)
        connects.append(time.perf_counter() - t0)
    except Exception as exc:
        errors.append(f"connect {type(exc).__name__}: {exc}"[:200])
    for n in range(searches):
        t0 = time.perf_counter()
        try:
            result = client.predict(queries=QUERIES[(i + n) % len(QUERIES)], k=10, api_name="/search")
            if len(result[0]["tuned"]) != 10:
                raise RuntimeError(f"{len(result[0]['tuned'])} hits instead of 10")
        except Exception as exc:  # counted, not fatal: the point is to see them
            errors.append(f"{type(exc).__name__}: {exc}"[:200])
            continue
        latencies.append(time.perf_counter() - t0)


def train_once(trainer, steps: int, out: dict) -> None:
    """The training that runs during a round: the 411-word example, `steps` steps."""
    if not steps:
        return
    t0 = time.perf_counter()
    try:
        summary, _, _ = trainer.predict(
            texts=EXAMPLE.read_text(), settings={"max_steps": steps, "epochs": 100}, api_name="/train"
        )
        out.update(steps=summary["steps"], train_s=summary["seconds"])
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"[:200]
    out["wall_s"] = time.perf_counter() - t0


def client_worker(url: str, ids: list[int], searches: int, rounds: int, barrier, results) -> None:
    """One worker process: its clients tune their model (setup), then search back to back in every round."""
    from gradio_client import Client

    words = EXAMPLE.read_text().split()
    clients = [Client(url, verbose=False, download_files=False) for _ in ids]
    for i, client in zip(ids, clients, strict=True):
        own = words[(i * 50) % 400 :][:50]
        client.predict(texts="\n".join(own), settings={"max_steps": 1}, api_name="/train")
    barrier.wait()  # setup done
    for _ in range(rounds):
        latencies: list[float] = []
        errors: list[str] = []
        connects: list[float] = []
        threads = [
            threading.Thread(target=search_loop, args=(i, c, searches, latencies, errors, connects))
            for i, c in zip(ids, clients, strict=True)
        ]
        barrier.wait()  # round start
        cpu0 = sum(os.times()[:2])
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        results.put((latencies, errors, sum(os.times()[:2]) - cpu0, connects))
        barrier.wait()  # round end


def default_loaded_runs() -> int:
    import app as mx

    return mx.Settings.from_env().loaded_runs


def in_process(values: list[int], searches: int = 30) -> None:
    """Searches straight into app.searcher.search from 20 threads, for each search_concurrency value."""
    import app as mx

    words = EXAMPLE.read_text().split()
    rows = []
    for limit in values:
        with tempfile.TemporaryDirectory(prefix="mirror-load-") as tmp:
            app = mx.MirrorApp(mx.Settings(work_dir=Path(tmp), loaded_runs=24, search_concurrency=limit or 10**6))
            sessions = []
            for i in range(20):
                s = app.session()
                app.loader.load_pasted(s, "\n".join(words[(i * 50) % 400 :][:50]))
                assert list(app.trainer.train(s, "bundled", "auto", {"max_steps": 1}))[-1]["kind"] == "done"
                sessions.append(s)
            latencies: list[float] = []

            def loop(s, latencies=latencies, app=app) -> None:
                for _ in range(searches):
                    t0 = time.perf_counter()
                    app.searcher.search(s, "kitten", 10)
                    latencies.append(time.perf_counter() - t0)

            threads = [threading.Thread(target=loop, args=(s,)) for s in sessions]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
        row = {
            "search_concurrency": limit or "unlimited",
            "searches": len(latencies),
            "p50 ms": round(1000 * percentile(latencies, 0.5)),
            "p99 ms": round(1000 * percentile(latencies, 0.99)),
            "searches/s": round(len(latencies) / wall, 1),
        }
        print(row, flush=True)
        rows.append(row)
    print()
    print_table(rows, list(rows[0]))
    write_json("load-inprocess.json", {"rows": rows})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--searches", type=int, default=50, help="searches per client per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--procs", type=int, default=4, help="worker processes the clients are spread over")
    parser.add_argument("--train-steps", type=int, default=10, help="steps of the training during a round (0: none)")
    parser.add_argument("--loaded-runs", type=int, default=None, help="MIRROR_LOADED_RUNS (default: the app's, 32)")
    parser.add_argument("--out", default="load.json")
    parser.add_argument("--in-process", action="store_true", help="the app's search path alone (see above)")
    parser.add_argument("--search-concurrency", default="0,4,0,4,0,4", help="with --in-process: values to try")
    args = parser.parse_args()
    if args.in_process:
        in_process([int(v) for v in args.search_concurrency.split(",")])
        return

    from gradio_client import Client

    env_extra = {} if args.loaded_runs is None else {"MIRROR_LOADED_RUNS": str(args.loaded_runs)}
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="mirror-load-") as tmp:
        port = free_port()
        server = start_server(Path(tmp), port, env_extra)
        url = f"http://127.0.0.1:{port}/"
        workers = []
        try:
            rss_idle = rss_mb(server.pid)
            print(f"server pid {server.pid} up, RSS {rss_idle:.0f} MB; setting up {args.clients} sessions")
            t0 = time.perf_counter()
            barrier, results = ctx.Barrier(args.procs + 1), ctx.Queue()
            for p in range(args.procs):
                ids = list(range(p, args.clients, args.procs))
                workers.append(
                    ctx.Process(target=client_worker, args=(url, ids, args.searches, args.rounds, barrier, results))
                )
                workers[-1].start()
            trainer = Client(url, verbose=False, download_files=False)
            barrier.wait(timeout=1800)
            setup_s = time.perf_counter() - t0
            rss_ready = rss_mb(server.pid)
            print(f"setup {setup_s:.0f} s, RSS {rss_ready:.0f} MB")
            rounds = []
            for r in range(1, args.rounds + 1):
                before = rss_mb(server.pid)
                training: dict = {}
                trainer_thread = threading.Thread(target=train_once, args=(trainer, args.train_steps, training))
                peak = [before]
                sampling = threading.Event()

                def sample(peak=peak, sampling=sampling) -> None:
                    while not sampling.wait(0.25):
                        peak[0] = max(peak[0], rss_mb(server.pid))

                sampler = threading.Thread(target=sample, daemon=True)
                barrier.wait()  # round start
                t_round, cpu0 = time.perf_counter(), cpu_seconds(server.pid)
                trainer_thread.start()
                sampler.start()
                parts = [results.get(timeout=1800) for _ in range(args.procs)]
                search_wall, server_cpu = time.perf_counter() - t_round, cpu_seconds(server.pid) - cpu0
                sampling.set()
                sampler.join()
                barrier.wait()  # round end
                trainer_thread.join()
                time.sleep(2)  # let the training's clean-up settle
                latencies = [x for lat, _, _, _ in parts for x in lat]
                errors = [e for _, errs, _, _ in parts for e in errs]
                connects = [x for *_, con in parts for x in con]
                result = {
                    "round": r,
                    "searches": len(latencies) + len(errors),
                    "errors": len(errors),
                    "error_samples": sorted(set(errors))[:5],
                    "p50_ms": 1000 * percentile(latencies, 0.50),
                    "p99_ms": 1000 * percentile(latencies, 0.99),
                    "mean_ms": 1000 * statistics.fmean(latencies) if latencies else float("nan"),
                    "searches_per_s": len(latencies) / search_wall,
                    "search_wall_s": search_wall,
                    "server_cpu_s": server_cpu,  # while the searches ran, the training's share included
                    "clients_cpu_s": sum(c for _, _, c, _ in parts),
                    "connects": len(connects),
                    "connect_p50_ms": 1000 * percentile(connects, 0.50),
                    "connect_max_ms": 1000 * max(connects, default=float("nan")),
                    "rss_peak_mb": peak[0],
                    "training": training,
                    "rss_before_mb": before,
                    "rss_after_mb": rss_mb(server.pid),
                }
                rounds.append(result)
                print(
                    f"round {r}: {result['searches']} searches, {result['errors']} errors, p50 {result['p50_ms']:.0f} ms, "
                    f"p99 {result['p99_ms']:.0f} ms, {result['searches_per_s']:.1f}/s over {search_wall:.1f} s; training "
                    f"{training.get('steps', '-')} steps in {training.get('wall_s', 0):.1f} s {training.get('error', '')}; "
                    f"CPU s server {server_cpu:.1f} clients {result['clients_cpu_s']:.1f}; connect p50 "
                    f"{result['connect_p50_ms']:.0f} ms max {result['connect_max_ms']:.0f} ms; "
                    f"RSS {before:.0f} -> peak {peak[0]:.0f} -> {result['rss_after_mb']:.0f} MB"
                )
        finally:
            for w in workers:
                w.join(timeout=30)
                if w.is_alive():
                    w.terminate()
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
    report(args, rounds, setup_s, rss_idle, rss_ready)


def report(args: argparse.Namespace, rounds: list[dict], setup_s: float, rss_idle: float, rss_ready: float) -> None:
    """Print the rounds as a table and write them, with the run's settings and setup figures, to JSON."""
    rows = [
        {
            "round": r["round"],
            "searches": r["searches"],
            "errors": r["errors"],
            "p50 ms": round(r["p50_ms"]),
            "p99 ms": round(r["p99_ms"]),
            "searches/s": round(r["searches_per_s"], 1),
            "server CPU ms/search": round(1000 * r["server_cpu_s"] / max(1, r["searches"])),
            "training": f"{r['training'].get('steps', '-')} steps, {r['training'].get('wall_s', 0):.1f} s",
            "connect p50 ms": round(r["connect_p50_ms"]),
            "connect max ms": round(r["connect_max_ms"]),
            "RSS before MB": round(r["rss_before_mb"]),
            "RSS peak MB": round(r["rss_peak_mb"]),
            "RSS after MB": round(r["rss_after_mb"]),
        }
        for r in rounds
    ]
    print()
    print_table(rows, list(rows[0]))
    write_json(
        args.out,
        {
            "clients": args.clients,
            "procs": args.procs,
            "searches_per_client": args.searches,
            "train_steps": args.train_steps,
            "loaded_runs": args.loaded_runs or default_loaded_runs(),
            "setup_s": setup_s,
            "rss_idle_mb": rss_idle,
            "rss_ready_mb": rss_ready,
            "rounds": rounds,
        },
    )


if __name__ == "__main__":
    main()
