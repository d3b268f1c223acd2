"""Synthetic twin-map data in the service's shape (explorer.compare.maps.twin_map) and a tiny Blocks demo around TwinMap."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import gradio as gr  # at module level: handlers' gr.EventData hints are resolved from these globals
import numpy as np

from ui.handlers import quiet_queue

WORDS = ("cat", "dog", "car", "bus", "red", "blue", "sun", "moon", "tree", "rock", "fish", "bird")
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")


def synthetic_twin_map(n: int = 200, k: int = 5, seed: int = 0) -> dict[str, Any]:
    """`n` strings in `k` blobs; the tuned layout is the base one with blobs pulled tighter and a few points moved (the
    service's column form, explorer.compare.maps.twin_map)."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-10, 10, size=(k, 2))
    labels = np.arange(n) % k
    base = centres[labels] + rng.normal(0, 1.6, size=(n, 2))
    tuned = centres[labels] + 0.5 * (base - centres[labels])
    movers = rng.choice(n, size=n // 10, replace=False)
    tuned[movers] = centres[(labels[movers] + 1) % k] + rng.normal(0, 0.5, size=(len(movers), 2))
    tuned_labels = labels.copy()
    tuned_labels[movers] = (labels[movers] + 1) % k
    shift = np.linalg.norm(tuned - base, axis=1)
    moved = shift / shift.max()
    texts = [f"{WORDS[j % len(WORDS)]} {j:03d}" for j in range(n)]
    columns = {
        "ids": np.arange(n) + 1000,  # not the position: the component must pass the service's own ids back
        "texts": texts,
        "base": base,
        "tuned": tuned,
        "base_cluster": labels,
        "tuned_cluster": tuned_labels,
        "moved": moved,
    }

    def clusters(lab: np.ndarray, side: str) -> list[dict[str, Any]]:
        return [
            {
                "id": c,
                "name": f"{side} · {texts[int(np.flatnonzero(lab == c)[0])]} …",
                "colour": COLOURS[c % 5],
                "size": int((lab == c).sum()),
            }
            for c in range(k)
        ]

    queries = [
        {
            "text": "a query",
            "base": [float(centres[0, 0]), float(centres[0, 1])],
            "tuned": [float(centres[1, 0]), float(centres[1, 1])],
        }
    ]
    return {
        **columns,
        "clusters": {"base": clusters(labels, "base"), "tuned": clusters(tuned_labels, "tuned")},
        "queries": queries,
        "method": "umap",
        "n_total": n + 50,
        "n_shown": n,
        "note": f"a sample of {n} strings (synthetic)",
        "seconds": 1.25,
    }


def build_demo(data: dict[str, Any] | None):
    """A Blocks page with only the twin map and the textboxes its click and select handlers fill."""
    from ui.twinmap import TwinMap

    def on_click(evt: gr.EventData) -> str:
        return f"{evt.index}|{evt.text}|{evt.map}"

    def on_select(evt: gr.SelectData) -> str:
        return f"{len(evt.index)}|{','.join(str(i) for i in evt.index)}"

    with gr.Blocks() as demo:
        twin = TwinMap(data, elem_id="tm")
        clicked = gr.Textbox(label="clicked", elem_id="tm-clicked")
        selected = gr.Textbox(label="selected", elem_id="tm-selected")
        twin.click(on_click, None, clicked)
        twin.select(on_select, None, selected)
        empty = TwinMap(None, elem_id="tm-empty", map_height=200)
        load = gr.Button("load", elem_id="tm-load")
        load.click(lambda: data, None, empty)
    quiet_queue(demo)  # as the app's: Gradio's queue polling every 1 ms is CPU the browser tests beside it want
    return demo


if __name__ == "__main__":  # python -m tests.twinmap_data: look at it in a browser
    build_demo(synthetic_twin_map()).launch()


@contextlib.contextmanager
def served(data: dict[str, Any] | None) -> Iterator[str]:
    """The map-only demo of `data` served on a free local port: its URL, closed after."""
    from tests.server import free_port

    demo = build_demo(data)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()
