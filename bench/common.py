"""Shared helpers for the benchmark scripts: data paths, timing, table printing, JSON output."""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MIRROR_DATA", ROOT.parent / "shared" / "data"))
OUT = ROOT / "bench" / "out"
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

WORDS = DATA / "words" / "en_top10k.txt"
SENTENCES = DATA / "sentences" / "stsb_train_sentences.txt"
SIMLEX = DATA / "wordsim" / "simlex999.txt"
WS353 = DATA / "wordsim" / "wordsim353.tsv"
STS_DEV = DATA / "stsb" / "sts-dev.csv"
STS_TEST = DATA / "stsb" / "sts-test.csv"


def machine() -> dict[str, Any]:
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count()}
    info["cpu"] = platform.processor() or platform.machine()
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    cells = [[_fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=False)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells:
        print("| " + " | ".join(v.ljust(w) for v, w in zip(row, widths, strict=False)) + " |")


def write_json(name: str, payload: dict[str, Any]) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / name
    path.write_text(json.dumps({"machine": machine(), "argv": sys.argv, **payload}, indent=2, default=str))
    print(f"\nwrote {path}")
    return path


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)
