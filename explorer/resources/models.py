"""Encoders in memory: the base models (shared by every session) and the tuned runs (LRU within a memory budget).

Which model names a server accepts is mirror.encoder's `check_model_name` (one policy for the app and the CLIs);
this module adds the server's own limits: MIRROR_MODEL_ROOTS, MIRROR_ALLOW_HUB and the hub download size.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.resources.hubcache import HUB_DIR, HubCache
from explorer.settings import Settings, inference_device
from mirror.config import BUNDLED_MODEL
from mirror.errors import MirrorError

if TYPE_CHECKING:
    from explorer.resources.record import RunInfo
    from index.store import VectorIndex
    from mirror.encoder import Encoder

log = logging.getLogger(__name__)
BASE_MODELS_KEPT = 3
# An index whose rows differ from what its encoder computes now by more than this (largest component of a unit
# vector; bf16 noise is ~0.005) was built by other weights: rebuilt when its run loads (VectorIndex.drift).
STALE_DRIFT = 0.02
REBUILT_NOTE = (
    "This run was made by an earlier version whose tuned index could hold the base model's vectors (on CPUs with "
    "native bf16). Its tuned index was rebuilt from the saved tuned model just now: Search, What moved, the maps "
    "and the downloads show the tuned model."
)


@dataclass
class IndexPair:
    """One corpus indexed with both encoders."""

    base: VectorIndex
    tuned: VectorIndex

    @property
    def nbytes(self) -> int:
        return sum(len(index) * index.dim * 4 for index in (self.base, self.tuned))


@dataclass
class Loaded:
    """The in-memory side of a RunInfo: the tuned encoder and its indexes (rebuilt from disk after eviction)."""

    tuned: Encoder
    base: Encoder
    main: IndexPair
    rebuilt: list[str] = field(default_factory=list)  # tuned indexes found stale on load and rebuilt

    @property
    def nbytes(self) -> int:
        """Memory this run holds on its own (the base encoder is shared): tuned weights (and their bf16 inference
        copy, once built) and index vectors."""
        model = self.tuned.model
        weights = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
        weights += self.tuned.twin_nbytes
        return weights + self.main.nbytes


def fresh_index(folder: Path, encoder: Encoder, rebuilt: list[str]) -> VectorIndex:
    """The index saved in `folder`, loaded with `encoder`; rebuilt from its texts with that encoder (and saved over
    the old one, its name added to `rebuilt`) when its rows are not what the encoder computes (STALE_DRIFT)."""
    from index.store import VectorIndex

    index = VectorIndex.load(folder, encoder, gpu=False)
    drift = index.drift()
    if drift is None or drift <= STALE_DRIFT:
        return index
    log.warning("%s: rows differ from its encoder by %.3f: rebuilding it", folder.name, drift)
    index = VectorIndex.build(encoder, index.texts, gpu=False)
    index.save(folder)
    rebuilt.append(folder.name)
    return VectorIndex.load(folder, encoder, gpu=False)


def release_memory(collect: bool = True) -> None:
    """Hand freed heap back to the OS after a big job or an evicted model (glibc keeps it in its per-thread
    arenas otherwise: under load the server's RSS grew ~400 MB per training round; with this it stays flat)."""
    if collect:
        import gc

        gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)


def kept(table: OrderedDict, key: Any, value: Any, most: int) -> None:
    """`table[key] = value`, then its least recently used entries past `most` dropped (the caller holds its lock)."""
    table[key] = value
    while len(table) > most:
        table.popitem(last=False)


class ModelCache:
    """Base encoders (an LRU of BASE_MODELS_KEPT) and tuned runs (an LRU within MIRROR_LOADED_RUNS and
    MIRROR_LOADED_MB), each loaded once however many threads ask for it at the same time."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._base: OrderedDict[tuple[str, str], Encoder] = OrderedDict()
        self._base_lock = threading.Lock()
        self._key_locks: dict[tuple[str, str], threading.Lock] = {}
        self.runs: OrderedDict[str, Loaded] = OrderedDict()  # run folder -> loaded run, least recent first
        # a session's other corpus (explorer.compare.searching.index_corpus): its folder -> both indexes, in the
        # same memory budget as the runs
        self.corpora: OrderedDict[str, IndexPair] = OrderedDict()
        self._run_locks: dict[str, threading.Lock] = {}
        self._runs_lock = threading.Lock()
        # hub models on this server's disk, in its accounts (MirrorApp gives it the server's room: `hub.server_room`)
        self.hub = HubCache(
            settings.work_dir / HUB_DIR,
            settings.hub_disk_bytes,
            server_room=lambda n: None,
            max_download=settings.max_hub_bytes,
        )
        self._touched: dict[str, float] = {}  # run folder -> when its last use was marked on disk

    def warm_up(self) -> None:
        """Load the bundled base encoder (and torch) ahead of the first request; failures are only logged."""
        import logging

        try:
            self.base_encoder(BUNDLED_MODEL)
        except Exception:  # the first request will report the problem to the user
            logging.getLogger("mirror.app").exception("could not pre-load the bundled model")

    def check_model(self, model: str) -> str:
        """The model name, or MirrorError when this server does not allow it (the one policy, with this
        server's roots and hub switch)."""
        from mirror.names import check_model_name

        return check_model_name(model, allow_hub=self.settings.allow_hub, roots=self.settings.model_roots)

    def check_download(self, model: str) -> str:
        """The (checked) model name, or MirrorError when it is a hub model over MIRROR_MAX_HUB_MB to download."""
        from mirror.names import looks_local

        model = self.check_model(model)
        if model == BUNDLED_MODEL or looks_local(model, here=False) or self.hub.has(model):
            return model
        if self.hub.size(model) is None:  # the hub cannot say: offline, or no such model; said now, not after a wait
            from mirror.hub import offline_message

            raise MirrorError(offline_message(model, server=True))
        return model

    def using(self, model: str) -> contextlib.AbstractContextManager:
        """Around a job that loads `model` by name (a training run): a hub model's files stay on disk meanwhile (and
        come back, priced, if they went)."""
        from mirror.names import looks_local

        hub = model != BUNDLED_MODEL and not looks_local(model, here=False)
        return self.hub.use(model) if hub else contextlib.nullcontext()

    def weights_budget(self) -> int:
        """What one model's weights may take in memory (fp32): MIRROR_LOADED_MB, and at most half the memory free
        now; checked from its config before it is loaded or downloaded (mirror.encoder.check_weights)."""
        from mirror.memory import available_bytes

        return min(self.settings.loaded_bytes, available_bytes())

    def cached_base(self, model: str, pooling: str = "auto") -> Encoder | None:
        """The base encoder when it is loaded already; never loads (or downloads) one."""
        with self._base_lock:
            return self._base.get((model, pooling))

    def base_encoder(self, model: str, pooling: str = "auto") -> Encoder:
        """The read-only base encoder, loaded once per process."""
        from mirror.encoder import load_encoder

        model = self.check_model(model)
        key = (model, pooling)
        with self._base_lock:
            if key in self._base:
                self._base.move_to_end(key)
                return self._base[key]
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        # One load per model (two users asking for bert-base load it once) without blocking other models:
        # a hub download can take minutes while searches on the cached models go on.
        with key_lock:
            with self._base_lock:
                if key in self._base:
                    return self._base[key]
            with self.using(model):  # a hub model: priced, room made, then downloaded
                encoder = load_encoder(
                    model,
                    pooling=pooling,
                    device=inference_device(),
                    allowed_roots=list(self.settings.model_roots),
                    # the bundled model is the operator's own (86 MB): only what visitors name is priced
                    max_weights=None if model == BUNDLED_MODEL else self.weights_budget(),
                    cache_dir=self.hub.root,
                )
            encoder.model.eval()
            with self._base_lock:
                kept(self._base, key, encoder, BASE_MODELS_KEPT)
            return encoder

    def loaded(self, run: RunInfo) -> Loaded:
        """The run's tuned encoder and indexes, from the LRU or loaded from its folder. A use of the run: its age
        (MIRROR_RUN_TTL) starts again (marked on disk at most once a minute)."""
        key = str(run.folder)
        self._mark_used(run.folder)
        with self._runs_lock:
            if key in self.runs:
                self.runs.move_to_end(key)
                return self.runs[key]
            run_lock = self._run_locks.setdefault(key, threading.Lock())
        with run_lock:  # parallel searches of an evicted run load it once
            with self._runs_lock:
                if key in self.runs:
                    return self.runs[key]
            return self._load_run(run, key)

    def _load_run(self, run: RunInfo, key: str) -> Loaded:
        from index.store import VectorIndex
        from mirror.encoder import load_encoder

        base = self.base_encoder(run.base_model, run.pooling)
        tuned = load_encoder(run.folder / "model", device=inference_device(), allowed_roots=[run.folder])
        tuned.model.eval()

        rebuilt: list[str] = []

        def pair(base_dir: str, tuned_dir: str) -> IndexPair:
            return IndexPair(
                VectorIndex.load(run.folder / base_dir, base, gpu=False),
                fresh_index(run.folder / tuned_dir, tuned, rebuilt),
            )

        item = Loaded(tuned=tuned, base=base, main=pair("base_index", "tuned_index"))
        item.rebuilt = rebuilt
        self._admit(key, item)
        return item

    def corpus(self, folder: Path, loaded: Loaded) -> IndexPair:
        """A session's other corpus (indexed in `folder` with `loaded`'s two encoders), kept in memory within the
        runs' budget and loaded again from disk once evicted."""
        from index.store import VectorIndex

        key = str(folder)
        with self._runs_lock:
            if key in self.corpora:
                self.corpora.move_to_end(key)
                return self.corpora[key]
        pair = IndexPair(
            VectorIndex.load(folder / "extra_base", loaded.base, gpu=False),
            VectorIndex.load(folder / "extra_tuned", loaded.tuned, gpu=False),
        )
        self._admit(key, pair, self.corpora)
        return pair

    def _mark_used(self, folder: Path) -> None:
        now = time.monotonic()
        if now - self._touched.get(str(folder), -math.inf) > 60.0:
            self._touched[str(folder)] = now
            with contextlib.suppress(OSError):
                (folder / ".last_used").touch()

    def _admit(self, key: str, item: Loaded | IndexPair, table: OrderedDict | None = None) -> None:
        """Keep `item` (a run, or a session's other corpus), evicting the least recently used ones down to the
        count and memory limits (other corpora first: they are the cheapest to load again)."""
        table = self.runs if table is None else table
        with self._runs_lock:
            table[key] = item
            evicted = []
            held = sum(x.nbytes for x in self.runs.values()) + sum(x.nbytes for x in self.corpora.values())
            while len(self.corpora) > (1 if table is self.corpora else 0) and held > self.settings.loaded_bytes:
                evicted.append(self.corpora.popitem(last=False))
                held -= evicted[-1][1].nbytes
            while len(self.runs) > 1 and (
                len(self.runs) > self.settings.loaded_runs or held > self.settings.loaded_bytes
            ):
                evicted.append(self.runs.popitem(last=False))
                held -= evicted[-1][1].nbytes
        if evicted:
            del evicted
            release_memory(collect=False)

    def forget(self, folder: Path) -> None:
        """Drop the loaded runs (and their load locks) under one folder: a session's, or one run's."""
        prefix = str(folder)
        with self._runs_lock:
            for table in (self.runs, self._run_locks, self.corpora, self._touched):
                for key in [k for k in table if k == prefix or k.startswith(prefix + "/")]:
                    del table[key]
