"""The Explore tab's work for one served run: what tuning changed. Linked twin maps, the strings whose
neighbourhood moved most, space health before and after, the forgetting check, exports and the Hub push.

Every figure is computed once per run from the vectors its two indexes already hold (no re-encoding) and kept
with the run in memory (`RunSpace`, the last few runs). Plain values in and out; app.py draws them.
"""

from __future__ import annotations

import numbers
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.resources.accounts import DiskAccounts
from explorer.resources.cpu import CpuAccounts
from explorer.resources.disk import Disk
from explorer.resources.models import ModelCache, kept
from explorer.resources.runfacts import as_trained, blend_of, pairs_about
from explorer.resources.sessions import RunInfo, Session
from explorer.resources.turns import TURNS, FairSlots
from explorer.settings import Settings
from explorer.tune.inputs import split_queries
from mirror.errors import MirrorError

if TYPE_CHECKING:
    import numpy as np

    from index.store import VectorIndex

SPACES_KEPT = 2  # runs whose vectors and figures stay in memory
ALIGNMENT_SAMPLE = 500  # strings encoded again, lightly corrupted, for the alignment figure
EXPORT_FORMATS = ("projector", "parquet", "neighbours", "all")
NO_RUN = "Nothing to explore yet: tune a model in tab ① (or open one of your runs) first."


def vectors_of(index: VectorIndex) -> np.ndarray:
    """The unit rows an index holds, in text order: read back from FAISS when it keeps them, else re-encoded."""
    import numpy as np

    n = len(index)
    try:
        x = index._cpu.reconstruct_n(0, n)  # exact (flat) indexes keep every row
    except (RuntimeError, AttributeError):
        x = index.embed(index.texts)
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


@dataclass
class RunSpace:
    """One run's strings under both encoders, and the figures computed from them so far."""

    run: RunInfo
    texts: list[str]
    base: np.ndarray
    tuned: np.ndarray
    cache: dict[Any, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    locks: dict[Any, threading.Lock] = field(default_factory=dict)  # one per key

    def get(self, key: Any, make: Any) -> Any:
        """`make()` once per key (two clicks at once compute it once). One key's work never waits for another's: an
        export waited 78 s for a map's layout to finish (bench/bench_concurrency.py: one lock for the run held both)."""
        with self.lock:
            if key in self.cache:
                return self.cache[key]
            key_lock = self.locks.setdefault(key, threading.Lock())
        with key_lock:
            if key not in self.cache:
                value = make()
                with self.lock:
                    self.cache[key] = value
            return self.cache[key]


class RunExplorer:
    """The Explore tab's service over a session's served run: it reads the run's encoders and indexes from `models`,
    finds a string's neighbours with `search` (tab 2's), encodes in `search_slots`, and asks `disk` before it
    writes an export (fitted to its visitor's account: `accounts`); a map's layout and an export are metered in
    `cpu`, and a training run yields to them (explorer.resources.turns). One per MirrorApp (`app.explore`)."""

    def __init__(
        self,
        settings: Settings,
        models: ModelCache,
        search: Callable[..., list[dict[str, Any]]],
        disk: Disk,
        accounts: DiskAccounts,
        search_slots: FairSlots,
        cpu: CpuAccounts,
    ):
        self.settings, self.models, self.search, self.disk = settings, models, search, disk
        self.accounts, self.search_slots, self.cpu = accounts, search_slots, cpu  # cpu: layouts and exports metered
        self._spaces: OrderedDict[str, RunSpace] = OrderedDict()
        self._lock = threading.Lock()
        self._export_lock = threading.Lock()  # one export written at a time: a repeated one reuses the first

    def space(self, session: Session) -> RunSpace:
        """The served run's vectors (both encoders, the user's strings), loaded once per run."""
        run = session.run
        if run is None:
            raise MirrorError(NO_RUN)
        key = str(run.folder)
        with self._lock:
            if key in self._spaces:
                self._spaces.move_to_end(key)
                return self._spaces[key]
        loaded = self.models.loaded(run)
        space = RunSpace(
            run, list(loaded.main.tuned.texts), vectors_of(loaded.main.base), vectors_of(loaded.main.tuned)
        )
        with self._lock:
            kept(self._spaces, key, space, SPACES_KEPT)
        return space

    def forget(self, folder: Path) -> None:
        """Drop what is kept of the runs under `folder` (a removed run or session)."""
        with self._lock:
            for key in [k for k in self._spaces if k == str(folder) or k.startswith(str(folder) + "/")]:
                del self._spaces[key]

    # ---------------------------------------------------------------- the maps

    def twin_map(self, session: Session, n_points: Any = None, queries: str = "") -> dict[str, Any]:
        """Aligned 2-D layouts of the base and tuned spaces (explorer.compare.maps.twin_map) of every string, or of a
        seeded sample of `n_points` (at most MIRROR_MAX_MAP_POINTS), with `queries` (one per line) placed on both
        and the run it is of (`run`: the page names it, ui.render.run_caption)."""
        import explorer.compare.maps as maps

        space = self.space(session)
        # the queries as a search takes them (explorer.tune.inputs: 20 of 500 characters, a text past its length
        # refused before it is split, and before a layout is paid for); none typed, none placed
        qs = [] if not queries or (isinstance(queries, str) and queries.isspace()) else split_queries(queries)
        cap = self.settings.max_map_points
        n = cap if n_points is None or n_points == "" else maps.check_points(n_points, cap)
        n = min(n, len(space.texts))
        moved = self._metadata(space)["moved"]  # on every string, not just the map's sample
        most = min(cap, len(space.texts))  # one layout per run, of every string it may draw: smaller counts sample it

        def layout() -> dict[str, Any]:
            with self.cpu.metered(session.owner, "a map", interactive=True):
                return maps.twin_map(space.texts, space.base, space.tuned, max_points=most, moved=moved)

        full = space.get(("map", most), layout)
        data = dict(maps.sample_of(full, n))
        if n < len(space.texts) and n == cap:  # the operator's cap, not the user's choice: say so
            data["note"] += f" This server draws at most {cap:,} strings (MIRROR_MAX_MAP_POINTS)."
        if qs:
            loaded = self.models.loaded(space.run)
            shown = data["ids"]
            data["queries"] = maps.place_queries(
                qs,
                loaded.base.encode(qs),
                loaded.tuned.encode(qs),
                data,
                space.base[shown],
                space.tuned[shown],
            )
        data["run"] = space.run
        return data

    def neighbours(self, session: Session, text: str, k: int = 10) -> list[dict[str, Any]]:
        """The base and tuned neighbours of one string (a clicked point, or typed): the Search tab's comparison."""
        text = (text or "").strip()
        if not text:
            raise MirrorError("click a point on a map (or type a string) to see its neighbours")
        return self.search(session, text, k, hide_query=True)

    # ---------------------------------------------------------------- what moved, space health

    def moved(self, session: Session, text_filter: str = "", limit: int | None = 500) -> list[dict[str, Any]]:
        """The user's strings ranked by how much their top-10 neighbourhood changed (mirror.moved), filtered by
        text (case-insensitive), at most `limit` rows."""
        from mirror import moved

        space = self.space(session)
        rows = space.get("moved", lambda: self._moved_rows(space))
        return moved.filter_rows(rows, text_filter)[:limit]

    def moved_csv(self, session: Session, text_filter: str = "") -> Path:
        """The what-moved table (every string, or those matching the filter) as a CSV file of the run's, named for
        the filter. Its folder is named by the file's contents: a link handed out never serves other rows later (two
        pages on one run with two filters get two files)."""
        from mirror import exports, moved

        rows = self.moved(session, text_filter, limit=None)
        data = moved.moved_csv(rows).encode("utf-8")
        folder = self.space(session).run.folder
        where, mine = self.exports_dir(session, folder)
        name = exports.moved_csv_name(f"mirror-{folder.name[:12]}", text_filter)
        out = exports.content_folder(where, f"{mine}moved", name.encode() + b"\0" + data) / name
        with self._export_lock:
            if out.is_file():
                return exports.write_once(out, data)  # the same file again (recently used)
            self.disk.check(session)
            exports.write_once(out, data)
            # charged to the visitor who asked (its older exports going first), as every export
            self.accounts.fit(session.owner, out.parent)
            return out

    def exports_dir(self, session: Session, run: Path) -> tuple[Path, str]:
        """Where the session's exports of the run in `run` go, and what their names start with: the run's own
        exports/ for its visitor (reused by each of its sessions), else the session's own exports/, the run's id
        first (a run opened by its link is read only). Either way they are charged to the visitor who asked, and
        each is one entry of an exports/ folder, which a budget removes oldest first (mirror.exports)."""
        from explorer.resources.accounts import read_owner

        owner = read_owner(run)
        if owner is None or owner.visitor == session.owner.visitor:
            return run / "exports", ""
        return session.folder / "exports", f"{run.name}-"

    def health(self, session: Session) -> dict[str, Any]:
        """Mean cosine, alignment and uniformity of the user's strings under both encoders, and what changed."""
        import numpy as np

        import explorer.compare.health as health

        space = self.space(session)

        def make() -> dict[str, Any]:
            loaded = self.models.loaded(space.run)
            n = len(space.texts)
            idx = np.sort(np.random.default_rng(0).choice(n, size=min(n, ALIGNMENT_SAMPLE), replace=False))
            views = health.positive_views([space.texts[i] for i in idx], loaded.tuned.mask_token or "[MASK]")
            with self.search_slots:
                pos_b, pos_t = loaded.base.encode(views), loaded.tuned.encode(views)
            blend = blend_of(space.run)
            who = "Tuning" if blend is None or as_trained(blend[0]) else "The blend"  # α 1: the weights as trained
            pairs_b, pairs_t = (space.base[idx], pos_b), (space.tuned[idx], pos_t)
            return health.compare_health(space.base, space.tuned, pairs_b, pairs_t, who)

        return space.get("health", make)

    # ---------------------------------------------------------------- exports and the Hub

    def export(self, session: Session, fmt: str, rows: Sequence[int] | None = None) -> Path:
        """One export of the served run's strings (all, or the `rows` selected on the map): Embedding Projector
        TSV, Parquet (text, both embeddings, map coordinates), neighbours CSV, or all three zipped."""
        from mirror import exports

        if fmt not in EXPORT_FORMATS:
            raise MirrorError(f"unknown export {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}")
        space = self.space(session)
        picked = _checked_rows(rows, len(space.texts))
        coords = self._coords(space)
        key = exports.export_key(fmt, picked, coords)
        prefix = exports.export_prefix(f"mirror-{space.run.folder.name[:12]}", picked, key)
        # One file per run, format, selection and map, whoever asks: a repeated export is the same file again, and
        # an export with other contents is another folder (another link): a file handed out never changes.
        where, mine = self.exports_dir(session, space.run.folder)
        out = where / f"{mine}{fmt}-{key}"
        with self._export_lock:
            done = exports.export_path(out, fmt, prefix)
            if done.is_file():
                out.touch()  # recently used: the last of the run's exports to go
                return done
            self.disk.check(session)
            with self.cpu.metered(session.owner, "an export", interactive=True):
                path = exports.export_bundle(
                    space.texts,
                    space.base,
                    space.tuned,
                    out,
                    fmt=fmt,
                    rows=picked,
                    metadata=self._metadata(space),
                    coords=coords,
                    prefix=prefix,
                    about=pairs_about(space.run),
                )
            # Charged to the visitor who asked: within its disk budget, its older exports going first; an export that
            # alone does not fit is refused (and removed).
            self.accounts.fit(session.owner, out)
            return path

    def _metadata(self, space: RunSpace) -> dict[str, list[Any]]:
        """Per string: how much its neighbourhood moved (always known once asked for; computed here if not)."""

        rows = space.get("moved", lambda: self._moved_rows(space))
        score = {r["i"]: r["moved"] for r in rows}
        return {"moved": [round(float(score.get(i, 0.0)), 4) for i in range(len(space.texts))]}

    @staticmethod
    def _moved_rows(space: RunSpace) -> list[dict[str, Any]]:
        """Every string's neighbourhood change (mirror.moved): a page waits for it, so a training run yields."""
        from mirror import moved

        with TURNS.interactive():
            return moved.neighbour_changes(space.texts, space.base, space.tuned)

    def _coords(self, space: RunSpace) -> dict[str, list[float]] | None:
        """Map coordinates of every string when the last map drawn showed them all, else None."""
        import numpy as np

        with space.lock:  # another key may land meanwhile
            drawn = [v for k, v in space.cache.items() if isinstance(k, tuple) and k[0] == "map"]
        full = [d for d in drawn if d["n_shown"] == len(space.texts)]
        if not full:
            return None
        d = full[-1]
        order = np.argsort(d["ids"])
        return {
            f"{side}_{axis}": [round(float(v), 4) for v in np.asarray(d[side])[order, j]]
            for side in ("base", "tuned")
            for j, axis in enumerate("xy")
        }

    def push(self, session: Session, repo_id: str, token: str, private: bool = True) -> str:
        """Push the served run's tuned model (with its model card) to the Hugging Face Hub; returns its URL."""
        import explorer.share.hub as hub

        run = session.run
        if run is None:
            raise MirrorError(NO_RUN)
        if not self.settings.allow_hub:
            raise MirrorError("this server does not talk to the Hugging Face Hub (MIRROR_ALLOW_HUB is off)")
        if run.checks_pending:  # its card is written once they are in: a push now would carry no checks
            raise MirrorError("this run's general checks are still running; push in a few seconds, when they are in")
        return hub.push_model(
            run.folder / "model", repo_id, token, private=private, max_bytes=self.settings.max_model_bytes
        )


def _checked_rows(rows: Sequence[int] | None, n: int) -> list[int] | None:
    """A selection as row numbers in range, or None for all; MirrorError for anything else."""
    if rows is None or len(rows) == 0:
        return None
    whole = [r for r in rows if isinstance(r, numbers.Real) and not isinstance(r, bool) and float(r).is_integer()]
    if len(whole) != len(rows):  # 1.5, NaN, "3", true: no row has that number
        raise MirrorError("a selection is a list of whole row numbers")
    picked = sorted({int(r) for r in whole})
    if picked[0] < 0 or picked[-1] >= n:
        raise MirrorError(f"a selection names rows outside 0..{n - 1}")
    return picked


def neighbours_changed(loaded: Any, k: int = 10) -> float:
    """The share (0-1) of the run's strings' k nearest neighbours that are not the base's, from the vectors its two
    indexes hold (no re-encoding): the mean of what the Explore tab's "what moved" ranks."""
    from mirror.moved import changed_share

    return round(changed_share(vectors_of(loaded.main.base), vectors_of(loaded.main.tuned), k), 4)
