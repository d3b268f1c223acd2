"""Compile and cache the numba kernels the Explore tab's maps run on (explorer/compare/layout.py `warm_up`): ~40 s of
one core on a fresh install, paid here instead of by the server's first map, or by every test process that lays one
out. scripts/bootstrap.sh runs it in the background while pip installs the rest: it needs only numpy and umap-learn,
so layout.py is loaded from its file (the explorer package would import torch and gradio)."""

import importlib.util
import sys
import time
from pathlib import Path

LAYOUT = Path(__file__).resolve().parents[1] / "explorer" / "compare" / "layout.py"

if __name__ == "__main__":
    start = time.perf_counter()
    try:
        spec = importlib.util.spec_from_file_location("mirror_layout_warm_up", LAYOUT)
        layout = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(layout)
        layout.warm_up()
    except Exception as exc:  # noqa: BLE001 - the install goes on; the first map compiles them
        print(f"[setup] the maps' kernels were not compiled ahead ({type(exc).__name__}: {exc})", file=sys.stderr)
        sys.exit(1)
    print(f"[setup] the maps' kernels compiled and cached in {time.perf_counter() - start:.0f} s", file=sys.stderr)
