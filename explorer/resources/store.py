"""Durable runs: every finished run kept under `<work dir>/runs/<run id>/`, reachable by its id from any session,
any browser and after a restart, until MIRROR_RUN_TTL after its last use (opened, searched; a run list naming it is
not a use). Its disk is charged to the visitor who made it (explorer.resources.accounts), and only its age removes it,
or its own visitor's next run when that visitor is past its budget: never someone else's.

A run folder holds model/, base_index/, tuned_index/, the two download zips, run.json (the RunInfo, paths
relative to the folder) and .owner. Run ids are 32 random hex digits: holding the id is what gives access to the
run, to read it: whoever opens it by its link writes nothing into it (their other corpora and exports go to their
own session's folder, a blend is their own new run).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from explorer.resources.accounts import LAST_USED, RUN_FILE, last_used, stale_unfinished
from explorer.resources.record import RunInfo, from_json, to_json
from explorer.resources.runfacts import blend_name
from mirror.errors import MirrorError

RUN_ID = re.compile(r"^[0-9a-f]{32}$")


def remember(memory: dict | None, run_id: str | None = None, active: str | None = None) -> dict:
    """What a browser keeps of its runs (gr.BrowserState): the ids of its last 50 runs, plus `run_id`, the run it
    has going (`active`) and the run it serves (`served`: `run_id` when given, else the one it served before), so a
    reloaded page serves it again. Ids only: whether the `active` run is still live, and in which status, the
    registry of live runs says (explorer.runs.live), never this copy."""
    memory = memory or {}
    runs = [r for r in memory.get("runs", []) if isinstance(r, str)]
    runs = [*runs, run_id] if run_id and run_id not in runs else runs
    served = run_id or memory.get("served")
    return {"runs": runs[-50:], "active": active, "served": served if isinstance(served, str) else None}


PAIRS_FILE = "pairs.json"  # a pairs run's partners, each string's in the run's order, and the two columns


def write_partners(folder: Path, partners: list[str | None], columns: tuple[str, str]) -> None:
    """Keep a pairs run's partners with it, so that its strings loaded again (a reload, a link) tune with them too."""
    (folder / PAIRS_FILE).write_text(json.dumps({"columns": list(columns), "partners": partners}), encoding="utf-8")


def read_partners(folder: Path, n: int) -> tuple[list[str | None], tuple[str, str]] | None:
    """A run's partners and their columns (write_partners), or None: no pairs, or not `n` of them."""
    try:
        kept = json.loads((folder / PAIRS_FILE).read_text(encoding="utf-8"))
        partners, columns = kept["partners"], tuple(kept["columns"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (partners, columns) if isinstance(partners, list) and len(partners) == n and len(columns) == 2 else None


def run_label(info: RunInfo) -> str:
    """What a run is, in a few words: "411 strings from small_words.txt · bundled", and for a blend
    "blend α=0.5 of 411 strings from … (run 1a2b3c4d)" (otherwise it reads exactly like its parent)."""
    label = f"{info.n_texts:,} strings from {info.corpus} · {info.base_model}"
    alpha, parent = info.record.origin.alpha, info.record.origin.parent or ""
    if alpha is None:
        return label
    return f"{blend_name(alpha)} of {label}" + (f" (run {parent[:8]})" if parent else "")


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

    def save(self, info: RunInfo, checks_pending: bool = False) -> None:
        """Write run.json (atomically) next to the run's files (explorer.resources.record.to_json); `checks_pending`: it is
        served before its general checks, which are still to come."""
        tmp = info.folder / (RUN_FILE + ".tmp")
        tmp.write_text(json.dumps(to_json(info, checks_pending), indent=1, default=str), encoding="utf-8")
        os.replace(tmp, info.folder / RUN_FILE)
        self.touch(info.folder)

    def load(self, run_id: str, use: bool = True) -> RunInfo:
        """The RunInfo of a finished run, or MirrorError when there is none (never was, or expired). `use`: it is
        being opened or searched (its age starts again); a run list only describes it."""
        folder = self.folder(run_id)
        try:
            data: dict[str, Any] = json.loads((folder / RUN_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise MirrorError(f"no run {run_id.strip()[:8]}… on this server (it may have expired)") from None
        if use:
            self.touch(folder)
        return from_json(data, folder)

    def describe(self, run_ids: Iterable[str]) -> list[dict[str, Any]]:
        """Short descriptions of the runs among `run_ids` that still exist, newest first (for a run list)."""
        out = []
        for run_id in dict.fromkeys(run_ids):
            try:
                info = self.load(run_id, use=False)  # listed, not used: a page listing its runs keeps none alive
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

    def sweep(self, max_age: float, keep: set[Path], unfinished_age: float) -> list[Path]:
        """Remove the runs unused for `max_age` seconds, and the folders without run.json (a run a restart cut short)
        untouched for `unfinished_age`; never one in `keep` (being made now). Disk budgets never remove a run:
        explorer.resources.accounts refuses the writer instead."""
        now, removed = time.time(), []
        for folder in self.root.iterdir() if self.root.is_dir() else []:
            if not folder.is_dir() or folder in keep:
                continue
            if now - last_used(folder) > max_age or stale_unfinished(folder, now, unfinished_age):
                self.forget(folder)
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
        return removed


def tuned_weights(run: Path) -> Path:
    """The unblended tuned model of a run folder: tuned_model/ of a blend, model/ otherwise."""
    return run / "tuned_model" if (run / "tuned_model").is_dir() else run / "model"
