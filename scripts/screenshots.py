"""The README's and the manual's pictures of the app, taken from the real app in headless Chromium.

    .venv/bin/python scripts/screenshots.py [--out docs/img] [--batch-size 32] [--max-steps 26] [--url URL]

Starts `app.py` on a free port (the bundled model, offline, a throw-away work folder), loads the bundled small example
(411 words) in tab ① Tune, launches a short run (a few dozen steps at a small batch: under a minute on 2 busy cores),
waits for it to end and its downloads to appear, then writes:

    docs/img/tune.png          tab ① after the run: the plan, the progress, the loss curve, the summary, the downloads
    docs/img/search.png        tab ② with two queries: tuned and base hits side by side
    docs/img/explore-maps.png  tab ④'s linked twin maps (base | tuned), a point hovered on the base map
    docs/img/explore-checks.png tab ④'s space health and general checks

A changed page gets new pictures by running this again: 4.5-6 minutes on 2 cores shared with other work (load average
12-15), most of it the general checks and the first UMAP; the run itself trains ~30-40 s.
`--url` drives a server that is already running instead of starting one. Needs Chromium (`scripts/ensure_chromium.sh`
or Playwright's own).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
WIDTH = 1024  # a README shows an image at most ~880 px wide: 1024 keeps the two-column layout and readable text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(port: int, workdir: Path) -> subprocess.Popen:
    env = dict(os.environ, MIRROR_WORK_DIR=str(workdir), HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False")
    log = open(workdir / "app.log", "wb")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(
        [sys.executable, str(ROOT / "app.py"), "--port", str(port)], cwd=ROOT, env=env, stdout=log, stderr=log
    )


def wait_until_up(url: str, proc: subprocess.Popen | None, timeout: float = 300) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"app.py exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise SystemExit(f"{url} did not answer in {timeout:.0f} s")


def launch_browser(playwright):
    exe = next((p for p in CHROMIUM_PATHS if os.access(p, os.X_OK)), None)
    return playwright.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)


def clip_between(page, top_selector: str, bottom_selector: str, pad: int = 12, top_pad: int = 4) -> dict:
    """The page's full width from the top of one element to the bottom of another (page coordinates)."""
    top = page.locator(top_selector).first.bounding_box()
    bottom = page.locator(bottom_selector).first.bounding_box()
    scroll = page.evaluate("window.scrollY")
    y0 = max(0, top["y"] + scroll - top_pad)
    y1 = bottom["y"] + scroll + bottom["height"] + pad
    return {"x": 0, "y": y0, "width": WIDTH, "height": y1 - y0}


def take(page, out: Path, args: argparse.Namespace) -> list[Path]:
    from playwright.sync_api import expect

    written: list[Path] = []
    page.goto(args.url)
    page.wait_for_selector("#mx-launch")

    # tab ①: the small example, a short run
    page.get_by_role("tab", name="Examples").click()
    page.locator("#mx-example-btn").click()
    expect(page.locator("#mx-input")).to_contain_text("411 strings loaded", timeout=120_000)
    expect(page.locator("#mx-estimate")).to_contain_text("Plan:", timeout=300_000)
    page.get_by_role("button", name="Advanced settings").first.click()
    for name, value in (("batch_size", str(args.batch_size)), ("max_steps", str(args.max_steps))):
        box = page.locator(f"#mx-set-{name} input").first
        box.fill(value)
        box.press("Tab")
    expect(page.locator("#mx-estimate")).to_contain_text("Plan:")
    page.get_by_role("button", name="Advanced settings").first.click()  # closed again: the picture shows the run
    page.locator("#mx-launch").click()
    expect(page.locator("#mx-result")).to_contain_text("Done", timeout=600_000)
    expect(page.locator("#mx-model-zip a[href]").first).to_be_visible(timeout=600_000)  # after the general checks
    page.mouse.move(0, 0)
    shot = out / "tune.png"
    page.screenshot(path=shot, clip=clip_between(page, "#mx-estimate", "#mx-downloads"), full_page=True)
    written.append(shot)

    # tab ②: two queries
    page.get_by_role("tab", name="② Search").click()
    page.locator("#mx-queries textarea").fill("kitten\nsad")
    page.locator("#mx-search-btn").click()
    expect(page.locator("#mx-search-hits .mx-query")).to_have_count(2, timeout=120_000)
    shot = out / "search.png"
    page.screenshot(path=shot, clip=clip_between(page, "#mx-served", "#mx-search-hits"), full_page=True)
    written.append(shot)

    # tab ④: the maps, a point hovered so the other map rings the same string
    page.get_by_role("tab", name="④ Explore").click()
    page.locator("#mx-map-btn").click()
    root = page.locator("#mx-twinmap .tm")
    expect(root).to_have_attribute("data-state", "ready", timeout=600_000)  # the first UMAP compiles its kernels
    root.scroll_into_view_if_needed()
    page.wait_for_timeout(1500)  # the maps' first frames
    k = int(root.get_attribute("data-n") or "3") // 3
    p = page.evaluate(f"document.querySelector('#mx-twinmap .tm').twinmap.pointScreenXY('base', {k})")
    page.mouse.move(p["x"], p["y"])
    try:
        expect(root).to_have_attribute("data-hovered", str(k), timeout=5_000)
    except AssertionError:
        pass  # a point drawn under another: the picture shows that one's ring instead
    page.wait_for_timeout(500)
    shot = out / "explore-maps.png"
    page.screenshot(path=shot, clip=clip_between(page, "#mx-explore-caption", "#mx-twinmap"), full_page=True)
    written.append(shot)

    page.mouse.move(0, 0)
    expect(page.locator("#mx-health")).to_contain_text("mean cosine", timeout=120_000)
    expect(page.locator("#mx-forgetting")).to_contain_text("general check", timeout=600_000)
    shot = out / "explore-checks.png"
    page.screenshot(path=shot, clip=clip_between(page, "#mx-health", "#mx-forgetting"), full_page=True)
    written.append(shot)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--batch-size", type=int, default=32, help="a small batch: more steps, a loss curve")
    parser.add_argument("--max-steps", type=int, default=26, help="2 epochs of 411 words at batch 32")
    parser.add_argument("--url", default="", help="drive this running server instead of starting app.py")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mirror-shots-") as tmp:
        proc = None
        if not args.url:
            port = free_port()
            proc = start_app(port, Path(tmp))
            args.url = f"http://127.0.0.1:{port}/"
        try:
            wait_until_up(args.url, proc)
            with sync_playwright() as pw:
                browser = launch_browser(pw)
                page = browser.new_page(viewport={"width": WIDTH, "height": 900})
                page.set_default_timeout(60_000)
                try:
                    written = take(page, args.out, args)
                except Exception:
                    page.screenshot(path=args.out.parent / "screenshots-failure.png", full_page=True)
                    raise
                finally:
                    browser.close()
        finally:
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    for path in written:
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    print(f"{time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
