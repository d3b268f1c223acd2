"""Shared helpers for the benchmark scripts: data files (data_path), machine info, table printing, JSON output."""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"  # the data sets the project ships
SHARED = Path(os.environ.get("MIRROR_DATA", ROOT.parent / "shared" / "data"))  # the rest (not in a fresh clone)
OUT = Path(os.environ.get("BENCH_OUT") or ROOT / "bench" / "out")  # where JSON goes (BENCH_OUT: elsewhere)
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# data set: (its copy under examples/, or None where the project does not ship it; its path under SHARED)
DATASETS = {
    "words": ("en_top10k.txt", "words/en_top10k.txt"),
    "sentences": ("stsb_train_sentences.txt", "sentences/stsb_train_sentences.txt"),
    "simlex": ("gold/simlex999.txt", "wordsim/simlex999.txt"),
    "ws353": ("gold/wordsim353.tsv", "wordsim/wordsim353.tsv"),
    "sts_dev": ("gold/sts-dev.csv", "stsb/sts-dev.csv"),
    "sts_test": (None, "stsb/sts-test.csv"),
}


def data_path(name: str) -> Path:
    """The file of data set `name` (a DATASETS key): the copy in examples/, else the one under $MIRROR_DATA
    (default ../shared/data); exits naming both places when neither holds it."""
    shipped, shared = DATASETS[name]
    places = ([EXAMPLES / shipped] if shipped else []) + [SHARED / shared]
    for path in places:
        if path.is_file():
            return path
    shipped_note = "" if shipped else " (examples/ does not ship it)"
    raise SystemExit(
        f"bench data {name!r}{shipped_note} not found: no {' or '.join(str(p) for p in places)}. "
        f"Set MIRROR_DATA to a folder holding {shared}."
    )


def machine() -> dict[str, Any]:
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count()}
    info["cpu"] = platform.processor() or platform.machine()
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def cpu_seconds(*pids: int) -> float:
    """User + system CPU seconds of these processes so far (Linux /proc; a process already gone counts 0)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def chromium_pids() -> list[int]:
    """The process ids of every running Chromium process (pgrep)."""
    import subprocess

    out = subprocess.run(["pgrep", "-f", "chromium"], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


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


def peer_training_args(config: Any, out: str, device: str, bf16: bool, **extra: Any) -> Any:
    """sentence-transformers' trainer arguments for the peer run of `config` (MNRL at the same batch, lr, weight
    decay, clipping and seed, a constant schedule, nothing saved or logged): what bench_speed and bench_gpu time."""
    from sentence_transformers import SentenceTransformerTrainingArguments

    return SentenceTransformerTrainingArguments(
        output_dir=out,
        num_train_epochs=config.epochs,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.lr,
        weight_decay=config.weight_decay,
        max_grad_norm=config.grad_clip,
        lr_scheduler_type="constant",
        warmup_steps=0,
        save_strategy="no",
        report_to="none",
        logging_steps=1000,
        seed=config.seed,
        use_cpu=device == "cpu",
        bf16=bf16,
        disable_tqdm=True,
        **extra,
    )
