"""Linked twin maps (Base | Tuned) as a gr.HTML custom component, and the plain helpers that feed it.

The service (`explorer.compare.maps.twin_map`) returns a dict of points, clusters and queries; `twin_map_value` turns it
into the component's compact value (parallel arrays, rounded floats). The drawing, zoom/pan, lasso/box selection,
linked hover, colour-by and locate all run in the browser (ui/twinmap.js, ui/twinmap.css: no network, no CDN).

Events the app listens to (payloads arrive as gr.EventData / gr.SelectData):
- `twinmap.click(fn, ...)`: a point was clicked, or Enter was pressed in the map's Locate box.
  `evt.index` is the point's "i" (int), `evt.text` its string, `evt.map` "base" or "tuned".
- `twinmap.select(fn, ...)`: a lasso, box or legend selection. `evt.index` is the list of the points' "i",
  `evt.value` the list of their strings (both sorted by position), `evt.selected` False when it was cleared.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import gradio as gr

from mirror.errors import MirrorError

HERE = Path(__file__).resolve().parent
METHODS = ("umap", "tsne", "pca")
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f")
_COLOUR = re.compile(r"^#[0-9a-fA-F]{6}$")

HTML_TEMPLATE = """<div class="tm" data-state="empty">
<div class="tm-bar">
<label class="tm-ctl">Colour by <select class="tm-colour" aria-label="Colour by">
<option value="base">base clusters</option><option value="tuned">tuned clusters</option>
<option value="moved">moved most</option></select></label>
<span class="tm-modes" role="group" aria-label="Drag mode">
<button type="button" class="tm-mode" data-mode="pan" aria-pressed="true">Pan</button>
<button type="button" class="tm-mode" data-mode="lasso" aria-pressed="false">Lasso</button>
<button type="button" class="tm-mode" data-mode="box" aria-pressed="false">Box</button></span>
<label class="tm-ctl"><input type="checkbox" class="tm-move"> show movement</label>
<input type="search" class="tm-locate" placeholder="Locate a string…" aria-label="Locate a string">
<button type="button" class="tm-reset">Reset view</button>
<span class="tm-selinfo"></span><button type="button" class="tm-clear" hidden>Clear selection</button>
<span class="tm-hint">wheel: zoom · drag: pan · shift+drag: lasso · click: neighbours</span>
</div>
<div class="tm-maps">
<div class="tm-map" data-map="base"><div class="tm-title">Base</div><canvas aria-label="Base map"></canvas></div>
<div class="tm-map" data-map="tuned"><div class="tm-title">Tuned</div><canvas aria-label="Tuned map"></canvas></div>
</div>
<div class="tm-legend"></div>
<div class="tm-foot"></div>
<div class="tm-empty"></div>
<div class="tm-tip" hidden></div>
</div>"""


def _asset(name: str) -> str:
    return (HERE / name).read_text(encoding="utf-8")


def _xy(value: Any, what: str) -> tuple[float, float]:
    try:
        x, y = (float(v) for v in value)
    except (TypeError, ValueError) as exc:
        raise MirrorError(f"map data: {what} must be a pair of numbers [x, y]") from exc
    if not (math.isfinite(x) and math.isfinite(y)):
        raise MirrorError(f"map data: {what} is not a finite position")
    return round(x, 4), round(y, 4)


def _clusters(items: Any, side: str, used: set[int]) -> list[dict[str, Any]]:
    """The side's clusters with a valid, distinct colour each (the data's own where it is a #rrggbb)."""
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    for j, c in enumerate(items or []):
        cid = int(c["id"])
        colour = str(c.get("colour") or "")
        out.append(
            {
                "id": cid,
                "name": str(c.get("name") or f"cluster {cid}"),
                "colour": colour if _COLOUR.match(colour) else PALETTE[j % len(PALETTE)],
                "size": int(c.get("size", 0)),
            }
        )
        seen.add(cid)
    for cid in sorted(used - seen):  # points naming a cluster the list lacks still get a legend entry
        out.append({"id": cid, "name": f"cluster {cid}", "colour": "#888888", "size": 0})
    if not out:
        raise MirrorError(f"map data: no {side} clusters")
    return out


def twin_map_value(data: dict[str, Any] | None) -> dict[str, Any] | None:
    """The component's value for the service's twin-map dict (None or no points: the empty state).

    Points become parallel arrays (`texts`, `ids`, `base`/`tuned` as flat [x0, y0, x1, y1, ...], `bc`/`tc`
    cluster ids, `moved`), which is what the browser draws from; a value already in this form is returned as is.
    """
    if data is None:
        return None
    if not isinstance(data, dict):
        raise MirrorError("map data must be a dict")
    if "texts" in data and "points" not in data:
        return data
    points = data.get("points") or []
    if not points:
        return {"texts": [], "note": str(data.get("note") or "")}
    texts, ids, base, tuned, bc, tc, moved = [], [], [], [], [], [], []
    for p in points:
        texts.append(str(p["text"]))
        ids.append(int(p["i"]))
        base.extend(_xy(p["base"], f"point {p['i']} base"))
        tuned.extend(_xy(p["tuned"], f"point {p['i']} tuned"))
        bc.append(int(p["base_cluster"]))
        tc.append(int(p["tuned_cluster"]))
        m = float(p.get("moved", 0.0))
        moved.append(round(min(1.0, max(0.0, m)) if math.isfinite(m) else 0.0, 4))
    clusters = data.get("clusters") or {}
    queries = [
        {
            "text": str(q["text"]),
            "base": list(_xy(q["base"], "query base")),
            "tuned": list(_xy(q["tuned"], "query tuned")),
        }
        for q in data.get("queries") or []
    ]
    method = str(data.get("method") or "")
    return {
        "texts": texts,
        "ids": ids,
        "base": base,
        "tuned": tuned,
        "bc": bc,
        "tc": tc,
        "moved": moved,
        "clusters": {
            "base": _clusters(clusters.get("base"), "base", set(bc)),
            "tuned": _clusters(clusters.get("tuned"), "tuned", set(tc)),
        },
        "queries": queries,
        "method": method if method in METHODS else "",
        "n_total": int(data.get("n_total", len(points))),
        "n_shown": int(data.get("n_shown", len(points))),
        "note": str(data.get("note") or ""),
        "seconds": float(data.get("seconds", 0.0)),
    }


class TwinMap(gr.HTML):
    """Two linked canvas scatter maps, Base | Tuned. Its value is the service's twin-map dict (or None).

    Listen with `.click(fn)` (one point: evt.index, evt.text, evt.map) and `.select(fn)` (a selection:
    evt.index = [i, ...], evt.value = [text, ...]); see the module docstring.
    """

    def __init__(
        self,
        value: dict[str, Any] | None = None,
        *,
        map_height: int = 460,
        placeholder: str = "No map yet: tune a model, then draw the map.",
        elem_id: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(
            value=value,
            html_template=HTML_TEMPLATE,
            css_template=_asset("twinmap.css"),
            js_on_load=_asset("twinmap.js"),
            apply_default_css=False,
            elem_id=elem_id,
            map_height=int(map_height),
            placeholder=placeholder,
            **kwargs,
        )

    def postprocess(self, value: Any) -> dict[str, Any] | None:  # type: ignore[override]
        return twin_map_value(value)

    def preprocess(self, payload: Any) -> dict[str, Any] | None:  # type: ignore[override]
        return payload

    def api_info(self) -> dict[str, Any]:
        return {"type": "object", "description": "twin-map value (see ui.twinmap.twin_map_value)"}

    def example_payload(self) -> Any:
        return None

    def example_value(self) -> Any:
        return None
