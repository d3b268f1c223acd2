"""What an idle server costs: `python app.py` with nobody using it, against the same app on Gradio's stock queue
(which looks for work every 1 ms and for progress every 10 ms; the app's queue every 20 and 50 ms: ui.handlers.
quiet_queue). Both are started side by side with the warm-up off (MIRROR_WARM_UP=0: only the idle loop is measured),
given `--settle` seconds, then their CPU seconds (user + system, /proc) are read over `--seconds` of nothing.

    .venv/bin/python bench/bench_idle.py [--seconds 30] [--settle 10]

Prints a table; JSON: bench/out/idle.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import common  # puts the project on sys.path

from tests.server import serve  # noqa: E402

# the same app with ui.handlers.quiet_queue made a no-op before app.py imports it: Gradio's queue as it comes
STOCK = "import sys, ui.handlers as h; h.quiet_queue = lambda demo: None; import app; sys.exit(app.main(sys.argv[1:]))"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--settle", type=float, default=10.0)
    args = ap.parse_args()
    env = {"MIRROR_WARM_UP": "0", "MIRROR_GENERAL_CHECKS": "0"}
    labels = {"ours": "app.py (quiet_queue)", "stock": "Gradio's stock queue"}
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        with serve(Path(tmp) / "ours", env) as ours, serve(Path(tmp) / "stock", env, command=["-c", STOCK]) as stock:
            pids = {"ours": ours.proc.pid, "stock": stock.proc.pid}
            time.sleep(args.settle)
            before = {name: common.cpu_seconds(pid) for name, pid in pids.items()}
            time.sleep(args.seconds)
            used = {name: common.cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    rows = [
        {"server": labels[name], "cpu_s": round(cpu, 2), "core_share": cpu / args.seconds} for name, cpu in used.items()
    ]
    common.print_table(rows, ["server", "cpu_s", "core_share"])
    ratio = used["stock"] / max(used["ours"], 1e-9)
    print(f"idle for {args.seconds:.0f} s: Gradio's stock queue used {ratio:.1f}x the CPU of the app's")
    common.write_json("idle.json", {"seconds": args.seconds, "rows": rows, "ratio": ratio})


if __name__ == "__main__":
    main()
