"""Durable runs: every finished run kept under `<work dir>/runs/<run id>/`, reachable by its id from any session,
any browser and after a restart, until the operator's age or size budget removes it (never one in use).

A run folder holds model/, base_index/, tuned_index/, the two download zips and run.json (the RunInfo, paths
relative to the folder). Run ids are 32 random hex digits: holding the id is what gives access to the run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from explorer.runs.sessions import RunInfo, disk_usage, evict
from mirror.errors import MirrorError
from mirror.exports import prune_exports

RUN_FILE = "run.json"
RUN_ID = re.compile(r"^[0-9a-f]{32}$")
LAST_USED = ".last_used"


def remember(memory: dict | None, run_id: str | None = None, active: str | None = None) -> dict:
    """What a browser keeps of its runs (gr.BrowserState): the ids of its last 50 runs, plus `run_id`, the run it
    has going (`active`) and the run it serves (`served`: `run_id` when given, else the one it served before), so a
    reloaded page serves it again."""
    memory = memory or {}
    runs = [r for r in memory.get("runs", []) if isinstance(r, str)]
    runs = [*runs, run_id] if run_id and run_id not in runs else runs
    served = run_id or memory.get("served")
    return {"runs": runs[-50:], "active": active, "served": served if isinstance(served, str) else None}


def run_label(info: RunInfo) -> str:
    """What a run is, in a few words: "411 strings from small_words.txt · bundled", and for a blend
    "blend α=0.5 of 411 strings from … (run 1a2b3c4d)" (otherwise it reads exactly like its parent)."""
    label = f"{info.n_texts:,} strings from {info.corpus} · {info.base_model}"
    alpha = info.stats.get("blend_alpha")
    if alpha is None:
        return label
    parent = str(info.stats.get("blended_from") or "")
    return f"blend α={float(alpha):g} of {label}" + (f" (run {parent[:8]})" if parent else "")


class RunStore:
    """Run folders by id: save a finished run's RunInfo, load it back, list some, remove old ones."""

    def __init__(self, root: Path, forget: Callable[[Path], None] = lambda folder: None):
        self.root = root
        self.forget = forget  # called before a run folder is removed (drop it from memory)

    def folder(self, run_id: str) -> Path:
        """Where the run with this id lives (or will); MirrorError for anything that is not a run id."""
        if not isinstance(run_id, str) or not RUN_ID.match(run_id.strip()):
            raise MirrorError("that is not a run id (32 letters a-f and digits, as in a run's link)")
        return self.root / run_id.strip()

    def save(self, info: RunInfo) -> None:
        """Write run.json (atomically) next to the run's files."""
        data = dataclasses.asdict(info)
        for key in ("folder", "model_zip", "index_zip"):
            data[key] = os.path.relpath(data[key], info.folder) if key != "folder" else "."
        tmp = info.folder / (RUN_FILE + ".tmp")
        tmp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
        os.replace(tmp, info.folder / RUN_FILE)
        self.touch(info.folder)

    def load(self, run_id: str) -> RunInfo:
        """The RunInfo of a finished run, or MirrorError when there is none (never was, or expired)."""
        folder = self.folder(run_id)
        try:
            data: dict[str, Any] = json.loads((folder / RUN_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise MirrorError(f"no run {run_id.strip()[:8]}… on this server (it may have expired)") from None
        fields = {f.name for f in dataclasses.fields(RunInfo)}
        data = {k: v for k, v in data.items() if k in fields}
        data.update(folder=folder, model_zip=folder / data["model_zip"], index_zip=folder / data["index_zip"])
        self.touch(folder)
        return RunInfo(**data)

    def describe(self, run_ids: Iterable[str]) -> list[dict[str, Any]]:
        """Short descriptions of the runs among `run_ids` that still exist, newest first (for a run list)."""
        out = []
        for run_id in dict.fromkeys(run_ids):
            try:
                info = self.load(run_id)
            except MirrorError:
                continue
            label = f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(info.created))} · {run_label(info)}"
            out.append({"id": info.folder.name, "label": label, "created": info.created})
        return sorted(out, key=lambda r: -r["created"])

    @staticmethod
    def touch(folder: Path) -> None:
        try:
            (folder / LAST_USED).touch()
        except OSError:
            pass

    def sweep(self, max_age: float, max_bytes: int, keep: set[Path], min_idle: float) -> list[Path]:
        """Remove runs unused for `max_age` seconds, then, while all runs hold more than `max_bytes`, the runs'
        exports (oldest first, any run's), then the least recently used runs. Runs in `keep` (being made or served now) and runs used in the last `min_idle`
        seconds are never removed; a folder without run.json is a run being made (or a crashed one, removed
        once it is `max_age` old)."""
        now = time.time()
        entries = []
        for folder in self.root.iterdir() if self.root.is_dir() else []:
            marker = folder / LAST_USED
            try:
                last = marker.stat().st_mtime if marker.exists() else folder.stat().st_mtime
            except OSError:
                continue
            if folder.is_dir() and folder not in keep and now - last > min_idle:
                entries.append((last, folder))
        expired = [f for last, f in sorted(entries) if now - last > max_age]
        finished = lambda folder: (folder / RUN_FILE).is_file()  # noqa: E731 - a run being made stays
        held = disk_usage(self.root)
        if held > max_bytes:  # the runs' exports go first, even of runs in use: they can be made again
            runs = [f for f in self.root.iterdir() if f.is_dir()]
            held -= prune_exports(runs, held, max_bytes)
        return evict(entries, expired, held, max_bytes, self.forget, finished)
