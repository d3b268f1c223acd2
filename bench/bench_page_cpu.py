"""What the page costs the visitor's machine while a run trains: Chromium's CPU (every process of a headless
Chromium, /proc) over `--seconds` of a bundled-model run of 300 words (batch 4, up to 600 steps) drawn on the Tune
tab, and the same page idle. The app (the status line and loss curve redrawn at most once a second, no hidden
Gradio progress: ui/runs.py TrainView) against the same app redrawing twice a second. One server at a time, so
the two runs do not compete.

    .venv/bin/python bench/bench_page_cpu.py [--seconds 20]

Needs chromium and playwright (requirements-dev.txt). Prints a table; JSON: bench/out/page_cpu.json.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

import common  # puts the project on sys.path

from tests.server import serve  # noqa: E402
from tests.test_browser import CHROMIUM_ARGS, chromium_or_skip  # noqa: E402

TWICE = "import sys, ui.runs as r; r.TrainView.REDRAW_S = 0.5; import app; sys.exit(app.main(sys.argv[1:]))"
WORDS = [f"word{i}" for i in range(300)]


def measure(command: list[str] | None, seconds: float, work: Path) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    with serve(work, {"MIRROR_GENERAL_CHECKS": "0", "MIRROR_WARM_UP": "0"}, command=command) as served:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_or_skip(), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            page.goto(served.url)
            page.wait_for_selector("#mx-launch")
            time.sleep(5)
            pids = common.chromium_pids()
            before = common.cpu_seconds(*pids)
            time.sleep(seconds)
            idle = common.cpu_seconds(*pids) - before
            page.get_by_role("tab", name="Paste").click()
            page.locator("#mx-paste textarea").fill("\n".join(WORDS))
            page.locator("#mx-paste-btn").click()
            page.wait_for_selector("text=300 strings", timeout=120_000)
            page.get_by_role("button", name=re.compile(r"^Advanced settings")).click()
            for name, value in (("batch_size", "4"), ("epochs", "100"), ("max_steps", "600")):
                box = page.locator(f"#mx-set-{name} input").first
                box.fill(value)
                box.press("Tab")
            time.sleep(3)
            page.locator("#mx-launch").click()
            page.wait_for_selector("#mx-status :text('Training')", timeout=120_000)
            time.sleep(5)
            pids, server = common.chromium_pids(), served.proc.pid
            before, trained = common.cpu_seconds(*pids), common.cpu_seconds(server)
            time.sleep(seconds)
            training = common.cpu_seconds(*pids) - before
            trained = common.cpu_seconds(server) - trained
            browser.close()
    return {"idle": idle, "training": training, "server": trained}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    variants = {"app (once a second)": None, "twice a second": ["-c", TWICE]}
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-page-") as tmp:
        for i, (label, command) in enumerate(variants.items()):
            got = measure(command, args.seconds, Path(tmp) / str(i))
            rows.append(
                {
                    "page": label,
                    "chromium_idle_s": round(got["idle"], 2),
                    "chromium_training_s": round(got["training"], 2),
                    "core_share_training": got["training"] / args.seconds,
                    "server_training_s": round(got["server"], 2),
                }
            )
    common.print_table(rows, list(rows[0]))
    ratio = rows[1]["chromium_training_s"] / max(rows[0]["chromium_training_s"], 1e-9)
    print(f"over {args.seconds:.0f} s of training: Chromium used {ratio:.1f}x the CPU drawing it twice a second")
    common.write_json("page_cpu.json", {"seconds": args.seconds, "rows": rows, "ratio": ratio})


if __name__ == "__main__":
    main()
