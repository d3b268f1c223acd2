"""What the twin maps cost the visitor's machine while they are used: Chromium's CPU (every process of a headless
Chromium, /proc) over a scripted minute of use of a map of `--points` synthetic strings (wheel zooms, drags, hovers
and a Reset view on both maps, then a taller window and back), the app's renderer (sized to one map: ui/twinmap.js) against regl-scatterplot's
default one (the window's size, what the app used before), in turns (A B A B ...) on one server and one browser.

Each map draw on the shared WebGL renderer clears its canvas, fills a float framebuffer of the canvas's size, runs a
gamma pass over it and copies one map's part into the map's own canvas: in a browser without a GPU (software WebGL,
as headless Chromium here and a visitor's machine with graphics acceleration off) that is work per pixel of the
renderer's canvas, drawn or not.

    .venv/bin/python bench/bench_map_cpu.py [--points 20000] [--rounds 2]

Needs chromium and playwright (requirements-dev.txt). Prints a table; JSON: bench/out/map_cpu.json.
"""

from __future__ import annotations

import argparse
import statistics
import time

import common  # puts the project on sys.path

from tests.server import free_port  # noqa: E402
from tests.test_browser import CHROMIUM_ARGS, chromium_or_skip  # noqa: E402
from tests.twinmap_data import build_demo, synthetic_twin_map  # noqa: E402

# the library's default renderer, whatever twinmap.js asks: the app before this bench's change
WINDOW_SIZED = """
Object.defineProperty(window, "reglScatterplot", {
  configurable: true,
  set(lib) {
    const make = lib.createRenderer;
    Object.defineProperty(window, "reglScatterplot", { value: { ...lib, createRenderer: () => make() }, writable: true });
  },
});
"""


def use_the_maps(page) -> None:
    """A minute's use, compressed: zoom in and out, pan, hover points on each map, Reset view; then the window made
    taller and back, zooming each map at both sizes."""
    for m in ("base", "tuned"):
        box = page.locator(f'#tm .tm-map[data-map="{m}"] canvas.tm-gl').bounding_box()
        cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        for i in range(8):
            page.mouse.move(cx + 10 * i, cy - 5 * i)
            page.mouse.wheel(0, -120 if i < 4 else 120)
            page.wait_for_timeout(50)
        page.mouse.move(cx, cy)
        page.mouse.down()
        page.mouse.move(cx + 120, cy + 60, steps=20)
        page.mouse.up()
        for i in range(30):
            page.mouse.move(box["x"] + box["width"] * (i + 1) / 32, box["y"] + box["height"] * ((i * 7) % 31 + 1) / 32)
            page.wait_for_timeout(20)
    page.get_by_role("button", name="Reset view").click()
    page.wait_for_timeout(500)
    # the window made taller and back (a maximised window, a turned phone; a full-page screenshot does the same):
    # the library's renderer follows the window's size, the app's the map's
    for height in (2400, 1000):
        page.set_viewport_size({"width": 1300, "height": height})
        page.wait_for_timeout(500)
        for m in ("base", "tuned"):
            box = page.locator(f'#tm .tm-map[data-map="{m}"] canvas.tm-gl').bounding_box()
            for i in range(4):
                page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
                page.mouse.wheel(0, -120 if i < 2 else 120)
                page.wait_for_timeout(50)


def measure(browser, url: str, window_sized: bool) -> dict[str, float]:
    """Chromium's CPU for the page's load until both maps are drawn (and a second after), then for a use of them."""
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    if window_sized:
        page.add_init_script(WINDOW_SIZED)
    before = common.cpu_seconds(*common.chromium_pids())
    page.goto(url)
    page.wait_for_selector("#tm .tm[data-state=ready]")
    page.wait_for_function("Number(document.querySelector('#tm .tm').dataset.drawn) > 0")
    page.wait_for_timeout(1000)
    pids = common.chromium_pids()
    loaded = common.cpu_seconds(*pids) - before
    before, t = common.cpu_seconds(*pids), time.perf_counter()
    use_the_maps(page)
    seconds = time.perf_counter() - t
    used = common.cpu_seconds(*pids) - before
    page.close()
    return {"load_cpu_s": loaded, "use_cpu_s": used, "use_wall_s": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    demo = build_demo(synthetic_twin_map(args.points, 8))
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    results: dict[str, list[dict[str, float]]] = {"app (map-sized renderer)": [], "library default (window-sized)": []}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_or_skip(), args=CHROMIUM_ARGS)
            for _ in range(args.rounds):
                for name in results:
                    results[name].append(measure(browser, f"http://127.0.0.1:{port}/", "default" in name))
            browser.close()
    finally:
        demo.close()
    rows = [
        {
            "renderer": name,
            "load + draw: Chromium CPU s": statistics.median(r["load_cpu_s"] for r in runs),
            "use: Chromium CPU s": statistics.median(r["use_cpu_s"] for r in runs),
            "use: wall s": statistics.median(r["use_wall_s"] for r in runs),
            "runs": len(runs),
        }
        for name, runs in results.items()
    ]
    common.print_table(rows, list(rows[0]))
    for column in ("load + draw: Chromium CPU s", "use: Chromium CPU s"):
        print(f"{column}, window-sized / map-sized: {rows[1][column] / max(rows[0][column], 1e-9):.2f}x (medians)")
    common.write_json("map_cpu", {"machine": common.machine(), "points": args.points, "rows": rows, "runs": results})


if __name__ == "__main__":
    main()
