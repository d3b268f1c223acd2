"""Issue 58: does a glibc allocator setting bring down what the server's memory grows past MIRROR_REQUEST_MEMORY_MB?
tests/test_abuse_memory.py's method against the real server (`python app.py`), a fresh server per setting and
repeat, the settings interleaved:

    .venv/bin/python bench/bench_allocator.py [--repeats 3] [--bodies 8] [--mb 8] [--held 80] [--start warm-body]

`--bodies` pastes of `--mb` MB are sent at once from as many addresses (their runs refused once their text is read:
the bodies' memory alone) against MIRROR_REQUEST_MEMORY_MB `--held`, after what `--start` says: `warm-body` one such
paste alone first, MIRROR_WARM_UP=0 (the test's way; its growth reported too); `idle` the app's warm-up on and
finished (the server's CPU quiet); `at-once` the warm-up on, the bodies 1 s after the server answers. Reported per
setting: the peak RSS (VmHWM, reset just before, read 3 s after the last answer) over the RSS before, the RSS then,
and how many bodies were read. Settings:

- `default`: glibc's own (an arena per thread up to 8 x cores, the mmap threshold rising to 32 MB after a large free)
- `arena2`: MALLOC_ARENA_MAX=2
- `mmap1m`: MALLOC_MMAP_THRESHOLD_=1048576 (blocks of 1 MiB or more mmapped, given back to the system when freed)
- `notrim`: without the malloc_trim(0) the server makes once a handler has read a large body, and after jobs
  (explorer.resources.models.release_memory), which `default` has
- `arena2+mmap1m`: both

JSON: bench/out/allocator.json (or --out). The runs recorded: bench/results/allocator-issue58.json, bench/RESULTS.md
"Files and memory: the leftovers".
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import common  # noqa: F401  the repository on sys.path

from tests.server import Page, serve  # noqa: E402
from tests.test_abuse_memory import paste, send  # noqa: E402

MB = 2**20
SETTINGS = {
    "default": {},
    "arena2": {"MALLOC_ARENA_MAX": "2"},
    "mmap1m": {"MALLOC_MMAP_THRESHOLD_": str(MB)},
    "notrim": {},
    "arena2+mmap1m": {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": str(MB)},
}
# app.py with release_memory a no-op (patched before ui.handlers imports it)
NO_TRIM = f"""import runpy, sys
sys.path.insert(0, {str(common.ROOT)!r})
import explorer.resources.models as models
models.release_memory = lambda collect=True: None
sys.argv = ["app.py", *sys.argv[1:]]
runpy.run_path({str(common.ROOT / "app.py")!r}, run_name="__main__")
"""


def one(setting: str, bodies: int, mb: int, held: int, start: str = "warm-body") -> dict:
    env = {
        "MIRROR_MAX_UPLOAD_MB": str(mb + 1),
        "MIRROR_REQUEST_MEMORY_MB": str(held),
        "MIRROR_TRUSTED_PROXIES": "127.0.0.1",
        "MIRROR_GENERAL_CHECKS": "0",
        **SETTINGS[setting],
        # warm-body: no warm-up thread (torch is imported by the first paste's /train, alone); otherwise the app's own
        "MIRROR_WARM_UP": "0" if start == "warm-body" else "1",
    }
    import tests.test_abuse_memory as method

    method.BODY_MB = mb
    texts = [paste(k) for k in range(bodies + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        command = None
        if setting == "notrim":
            (Path(tmp) / "notrim.py").write_text(NO_TRIM)
            command = [str(Path(tmp) / "notrim.py")]
        return measure(Path(tmp), env, command, texts, bodies, start)


def idle(served, quiet_s: float = 5.0, most_s: float = 600.0) -> float:
    """Wait until the server's CPU stays under 0.1 s per `quiet_s` (its warm-up done); the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < most_s:
        cpu = served.cpu()
        time.sleep(quiet_s)
        if served.cpu() - cpu < 0.1 * quiet_s:
            break
    return time.monotonic() - started


def measure(tmp: Path, env: dict, command: list[str] | None, texts: list[str], bodies: int, start: str) -> dict:
    with serve(tmp / "server", env, command=command, timeout=300) as served:
        pages = [Page(served.url, headers={"X-Forwarded-For": f"10.58.1.{k + 1}"}) for k in range(bodies + 1)]
        waited = idle(served) if start == "idle" else 1.0
        if start != "idle":
            time.sleep(1)
        fresh = served.rss()
        if start == "warm-body":
            first = send(served, pages[-1], texts[-1], call=False)
            assert "settings must be" in first, first[:200]
            time.sleep(3)
        before = served.rss()
        served.reset_peak()
        answers: list[str] = [""] * bodies
        threads = [
            threading.Thread(target=lambda k=k: answers.__setitem__(k, send(served, pages[k], texts[k], k % 2 == 1)))
            for k in range(bodies)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(3)  # what the events do after their answers (Gradio's ends, the sessions' strings)
        peak, after = served.rss("VmHWM"), served.rss()
    read = sum("settings must be" in a for a in answers)
    return {
        "start": start,
        "waited_s": round(waited, 1),
        "rss_fresh_mb": round(fresh / MB, 1),
        "first_body_growth_mb": round((before - fresh) / MB, 1),  # the server's first large request, alone
        "rss_before_mb": round(before / MB, 1),
        "peak_growth_mb": round((peak - before) / MB, 1),
        "rss_after_growth_mb": round((after - before) / MB, 1),
        "read": read,
        "refused": sum(a.startswith("429") for a in answers),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bodies", type=int, default=8)
    parser.add_argument("--mb", type=int, default=8)
    parser.add_argument("--held", type=int, default=80)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument(
        "--start",
        choices=["warm-body", "at-once", "idle"],
        default="warm-body",
        help="warm-body: one paste alone first, no warm-up thread (the test's way); at-once: the app's warm-up on, "
        "the bodies 1 s after the server answers (bench_abuse49's way); idle: the warm-up on and done first",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "allocator.json")
    args = parser.parse_args()
    rows = []
    for repeat in range(args.repeats):
        for setting in args.settings:
            row = {"repeat": repeat, "setting": setting, **one(setting, args.bodies, args.mb, args.held, args.start)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{args.bodies} x {args.mb} MB against MIRROR_REQUEST_MEMORY_MB {args.held}: median of {args.repeats}")
    print(f"{'setting':14} {'first +MB':>9} {'peak +MB':>9} {'after +MB':>10} {'read':>5}")
    for setting in args.settings:
        mine = [r for r in rows if r["setting"] == setting]
        peak = statistics.median(r["peak_growth_mb"] for r in mine)
        after = statistics.median(r["rss_after_growth_mb"] for r in mine)
        first = statistics.median(r["first_body_growth_mb"] for r in mine)
        read = statistics.median(r["read"] for r in mine)
        print(f"{setting:14} {first:9.1f} {peak:9.1f} {after:10.1f} {read:5.0f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
