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

import base64
import re
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np

from mirror.errors import MirrorError

HERE = Path(__file__).resolve().parent
VENDOR = HERE / "vendor"  # regl-scatterplot, built by scripts/build_vendor.sh; served by the app (no CDN)
LIBRARY = VENDOR / "regl-scatterplot.min.js"
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
</div>
<div class="tm-maps">
<div class="tm-map" data-map="base"><div class="tm-title">Base</div><canvas class="tm-gl" aria-label="Base map"></canvas><canvas class="tm-ov" aria-hidden="true"></canvas></div>
<div class="tm-map" data-map="tuned"><div class="tm-title">Tuned</div><canvas class="tm-gl" aria-label="Tuned map"></canvas><canvas class="tm-ov" aria-hidden="true"></canvas></div>
</div>
<div class="tm-legend"></div>
<div class="tm-foot"></div>
<div class="tm-hint">wheel or pinch: zoom · drag: pan · shift+drag (or Lasso, Box): select · click: neighbours · Esc: clear the selection</div>
<div class="tm-empty"></div>
<div class="tm-tip" hidden></div>
</div>"""


_served: list[Path] = []


def _serve_vendor() -> None:
    """Let Gradio's file route serve ui/vendor (once per process: set_static_paths appends to a global list)."""
    if not _served:
        gr.set_static_paths([VENDOR])
        _served.append(VENDOR)


def _asset(name: str) -> str:
    return (HERE / name).read_text(encoding="utf-8")


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
                "examples": [str(x) for x in (c.get("examples") or [])][:3],
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


def _b64(values: Any, dtype: str) -> str:
    """A typed array's little-endian bytes as base64 (the page reads it with atob into a Float32Array etc.)."""
    return base64.b64encode(np.ascontiguousarray(values, dtype=dtype).tobytes()).decode("ascii")


def _array(values: Any, name: str) -> np.ndarray:
    """An (n, 2) float array of finite positions, or MirrorError naming the first bad point."""
    try:
        xy = np.asarray(values, dtype=np.float64).reshape(-1, 2)
    except (TypeError, ValueError) as exc:
        raise MirrorError(f"map data: {name} positions must be pairs of numbers [x, y]") from exc
    bad = np.flatnonzero(~np.isfinite(xy).all(axis=1))
    if len(bad):
        raise MirrorError(f"map data: point {int(bad[0])} {name} is not a finite position")
    return xy


def twin_map_value(data: dict[str, Any] | None) -> dict[str, Any] | None:
    """The component's value for the service's twin-map dict (None or no points: the empty state).

    The service's columns (`ids`, `texts`, `base`/`tuned` as (n, 2) arrays, `base_cluster`/`tuned_cluster`,
    `moved`) go to the page as base64 typed arrays, one per column (`ids` Int32, `base`/`tuned` Float32 x0, y0,
    x1, y1, ..., `bc`/`tc` Uint16, `moved` Uint8 = round(255 * moved)) and the texts as one array: 20,000 strings
    are ~0.5 MB of positions and ids instead of one JSON object per point. A value already in this form (it has
    `n`) is returned as is.
    """
    if data is None:
        return None
    if not isinstance(data, dict):
        raise MirrorError("map data must be a dict")
    if "n" in data and "ids" not in data or isinstance(data.get("ids"), str):
        return data
    texts = [str(t) for t in (data.get("texts") or [])]
    if not texts:
        return {"n": 0, "texts": [], "note": str(data.get("note") or "")}
    n = len(texts)
    base, tuned = _array(data["base"], "base"), _array(data["tuned"], "tuned")
    ids = np.asarray(data.get("ids", range(n)), dtype=np.int64)
    bc = np.asarray(data["base_cluster"], dtype=np.int64)
    tc = np.asarray(data["tuned_cluster"], dtype=np.int64)
    moved = np.nan_to_num(np.asarray(data.get("moved", np.zeros(n)), dtype=np.float64), nan=0.0, posinf=1.0)
    if not (len(base) == len(tuned) == len(ids) == len(bc) == len(tc) == len(moved) == n):
        raise MirrorError("map data: every column needs one value per string")
    if n and (min(bc.min(), tc.min()) < 0 or max(bc.max(), tc.max()) >= 2**16):
        raise MirrorError("map data: cluster ids must be in 0..65535")
    clusters = data.get("clusters") or {}
    queries = [
        {
            "text": str(q["text"]),
            "base": [float(v) for v in _array(q["base"], "query base")[0]],
            "tuned": [float(v) for v in _array(q["tuned"], "query tuned")[0]],
        }
        for q in data.get("queries") or []
    ]
    method = str(data.get("method") or "")
    return {
        "n": n,
        "texts": texts,
        "ids": _b64(ids, "<i4"),
        "base": _b64(base, "<f4"),
        "tuned": _b64(tuned, "<f4"),
        "bc": _b64(bc, "<u2"),
        "tc": _b64(tc, "<u2"),
        "moved": _b64(np.rint(255 * np.clip(moved, 0.0, 1.0)), "<u1"),
        "clusters": {
            "base": _clusters(clusters.get("base"), "base", set(bc.tolist())),
            "tuned": _clusters(clusters.get("tuned"), "tuned", set(tc.tolist())),
        },
        "queries": queries,
        "method": method if method in METHODS else "",
        "n_total": int(data.get("n_total", n)),
        "n_shown": int(data.get("n_shown", n)),
        "note": str(data.get("note") or ""),
        "seconds": float(data.get("seconds", 0.0)),
    }


def decode_value(value: dict[str, Any]) -> dict[str, Any]:
    """A component value's columns back as numpy arrays (what the page decodes; for tests and the API)."""

    def col(name: str, dtype: str) -> np.ndarray:
        return np.frombuffer(base64.b64decode(value[name]), dtype=dtype)

    return {
        "texts": value["texts"],
        "ids": col("ids", "<i4"),
        "base": col("base", "<f4").reshape(-1, 2),
        "tuned": col("tuned", "<f4").reshape(-1, 2),
        "bc": col("bc", "<u2"),
        "tc": col("tc", "<u2"),
        "moved": col("moved", "<u1") / 255.0,
    }


class TwinMap(gr.HTML):
    """Two linked WebGL scatter maps (regl-scatterplot), Base | Tuned. Its value is the service's twin-map dict (or
    None).

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
        # the vendored library from this server's own file route (a relative URL: it works under a proxy's prefix);
        # Gradio loads a component's `head` scripts once per page, before its js_on_load runs
        _serve_vendor()
        version = int(LIBRARY.stat().st_mtime)
        super().__init__(
            head=f'<script src="gradio_api/file={LIBRARY}?v={version}"></script>',
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
