"""Issue 60 (Low): the labels *Locate a string* writes on the twin maps stay inside each map and do not overlap,
near the map's edges, for strings drawn on top of each other, and for a label longer than the space beside its
point (a phone's narrow map), in headless Chromium.

The labels are drawn on the maps' 2-D overlay canvas (ui/twinmap.js), so there is no element to measure: an init
script records every fillText on an overlay canvas (its text box from measureText, in the canvas's CSS pixels) since
the canvas was last cleared, which is the label set of the frame on screen, whatever code placed them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.test_browser import review_shot
from tests.twinmap_data import served, synthetic_twin_map

pytestmark = [pytest.mark.slow, pytest.mark.browser]

LONG = "zz a definition long enough to need most of a phone's map"  # 57 characters: cut to 48, then to fit
EXTRA = {  # every string the test locates ("zz"), at the corners and edges of the layout and in a pile
    "zz corner top left": (-14.0, 14.0),
    "zz corner top right": (14.0, 14.0),
    "zz corner bottom left": (-14.0, -14.0),
    "zz corner bottom right": (14.0, -14.0),
    "zz right edge middle": (14.0, 0.5),
    "zz pile one": (2.0, 2.0),
    "zz pile two": (2.02, 2.01),
    "zz pile three": (2.01, 1.98),
    "zz pile four": (1.99, 2.02),
    LONG: (0.3, -3.0),
}

# per overlay canvas: the text boxes drawn since its last clearRect (what the frame on screen shows)
RECORDER = """
(() => {
  const P = CanvasRenderingContext2D.prototype, clear = P.clearRect, fill = P.fillText;
  const mine = (ctx) => ctx.canvas.classList && ctx.canvas.classList.contains("tm-ov");
  P.clearRect = function (...a) {
    if (mine(this)) this.canvas.__labels = [];
    return clear.apply(this, a);
  };
  P.fillText = function (text, x, y, ...rest) {
    if (mine(this)) {
      const m = this.measureText(text);
      const left = this.textAlign === "right" ? x - m.width : this.textAlign === "center" ? x - m.width / 2 : x;
      (this.canvas.__labels = this.canvas.__labels || []).push({
        text, x: left, w: m.width,
        y: y - m.actualBoundingBoxAscent, h: m.actualBoundingBoxAscent + m.actualBoundingBoxDescent,
      });
    }
    return fill.call(this, text, x, y, ...rest);
  };
})();
"""


def labelled_data() -> dict[str, Any]:
    data = synthetic_twin_map(200, 5)
    texts = list(data["texts"]) + list(EXTRA)
    xy = np.array(list(EXTRA.values()))
    n = len(texts)
    return {
        **data,
        "ids": np.arange(n) + 1000,
        "texts": texts,
        "base": np.vstack([data["base"], xy]),
        "tuned": np.vstack([data["tuned"], xy * [1.0, 0.98]]),
        "base_cluster": np.concatenate([data["base_cluster"], np.zeros(len(EXTRA), int)]),
        "tuned_cluster": np.concatenate([data["tuned_cluster"], np.zeros(len(EXTRA), int)]),
        "moved": np.concatenate([data["moved"], np.zeros(len(EXTRA))]),
        "queries": [],
        "n_total": n,
        "n_shown": n,
    }


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with served(labelled_data()) as url:
        yield url


def labels(page, map_: str) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The label boxes of `map_`'s frame on screen (canvas CSS pixels) and the canvas's size."""
    return page.evaluate(
        """(m) => {
          const cv = document.querySelector(`#tm .tm-map[data-map="${m}"] canvas.tm-ov`);
          return [cv.__labels || [], {w: cv.clientWidth, h: cv.clientHeight}];
        }""",
        map_,
    )


def overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]
    )


def check(page, want: int) -> None:
    for map_ in ("base", "tuned"):
        boxes, size = labels(page, map_)
        assert len(boxes) >= want, (map_, boxes)
        for b in boxes:
            assert b["x"] >= 0 and b["x"] + b["w"] <= size["w"], (map_, "cut at the left or right edge", b, size)
            assert b["y"] >= 0 and b["y"] + b["h"] <= size["h"], (map_, "cut at the top or bottom edge", b, size)
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                assert not overlap(a, b), (map_, "labels overlap", a, b)


@pytest.mark.parametrize(
    "viewport,name",
    [({"width": 1300, "height": 1000}, "desktop"), ({"width": 390, "height": 844}, "phone")],
)
def test_located_labels_stay_inside_the_map_and_apart(server, browser, viewport, name):
    from playwright.sync_api import expect

    page = browser.new_page(viewport=viewport)
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.add_init_script(RECORDER)
    try:
        page.goto(server)
        page.wait_for_selector("#tm .tm[data-state=ready]")
        root = page.locator("#tm .tm")
        page.locator("#tm .tm-locate").fill("zz")
        expect(root).to_have_attribute("data-located", str(len(EXTRA)))
        page.wait_for_timeout(400)  # the overlay paints on the next animation frame
        page.locator("#tm .tm-maps").scroll_into_view_if_needed()
        review_shot(page, f"twinmap_labels_{name}_located.png", full_page=False)
        # the five corner and edge strings at least keep their labels (the pile may leave some out)
        check(page, want=6)
        drawn = [b["text"] for b in labels(page, "base")[0]]
        assert any(t.startswith("zz corner top right") for t in drawn), drawn
        assert any(t.startswith("zz corner bottom left") for t in drawn), drawn

        # zoomed in on a corner: the labels of points still in view stay inside, those out of view are not drawn
        box = page.locator("#tm .tm-map[data-map=base] canvas.tm-gl").bounding_box()
        page.mouse.move(box["x"] + box["width"] - 30, box["y"] + 30)
        page.mouse.wheel(0, -300)
        page.wait_for_function("Number(document.querySelector('#tm .tm').dataset.zoom) > 1.2")
        page.wait_for_timeout(400)
        review_shot(page, f"twinmap_labels_{name}_zoomed.png", full_page=False)
        check(page, want=1)
        assert not errors, errors
    finally:
        page.close()
