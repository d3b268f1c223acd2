"""Mirror Explorer web app: tune an encoder on your strings, then search, evaluate and map what changed.

`python app.py` serves on 127.0.0.1:7860 (--host/--port, or GRADIO_SERVER_NAME/GRADIO_SERVER_PORT).
Everything heavy lives in `mirror/` and `index/` and is imported inside handlers, so importing this
module loads neither torch nor faiss. Handlers are plain methods of `MirrorApp` that take and return
plain values (tests call them directly); `build_demo` only wires them to components.

Settings come from environment variables (defaults suit a CPU Space):
  MIRROR_WORK_DIR           per-session folders (default: $GRADIO_TEMP_DIR/mirror-explorer, i.e. <tmp>/gradio/...)
  MIRROR_SESSION_TTL        seconds an idle session's folder and state are kept (default: 7200)
  MIRROR_MAX_UPLOAD_MB      largest text/pairs upload or paste (default: 20)
  MIRROR_MAX_MODEL_MB       largest model zip upload (default: 600)
  MIRROR_MAX_STRINGS        strings kept from one input (default: 20000)
  MIRROR_MAX_STEPS          cap on training steps per run, 0 = none (default: 1000)
  MIRROR_MAX_RUN_SECONDS    a run still training after this long is stopped, nothing saved, 0 = none (default: 1800)
  MIRROR_TRAIN_MEMORY_MB    memory a training step may plan for (default: auto, from the memory available)
  MIRROR_DISK_MB            disk for all sessions; idle sessions are removed oldest first past it (default: 10240)
  MIRROR_SESSION_DISK_MB    disk for one session (default: 2048)
  MIRROR_UPLOAD_QUOTA_MB    bytes one client may upload per hour (default: 2048)
  MIRROR_MAX_MAP_POINTS     most strings drawn in the Map tab (default: 3000)
  MIRROR_MODEL_ROOTS        folders (os.pathsep-separated) from which local models may be loaded (default: none)
  MIRROR_ALLOW_HUB          1/0: allow Hugging Face Hub model ids (default: 1)
  MIRROR_MAX_HUB_MB         largest hub model download, asked of the hub before downloading (default: 2048)
  MIRROR_TRAIN_CONCURRENCY  training runs at once (default: 1, one per GPU)
  MIRROR_LOADED_RUNS        tuned models kept in memory across sessions, LRU (default: 32)
  MIRROR_LOADED_MB          ... and at most this much memory for them: weights + vectors (default: 3072)
  MIRROR_SEARCH_CONCURRENCY searches encoding at once, the others wait in arrival order (default: 4; on 2 cores
                            20 parallel searches ran ~1.3x faster with p99 -30% than unlimited, bench/RESULTS.md)
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import hashlib
import html
import json
import logging
import math
import os
import queue
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gradio as gr

from mirror.config import BUNDLED_MODEL, DEVICES, POOLINGS, PRECISIONS, MirrorConfig, detect_mode
from mirror.data import SUFFIXES, CleanStats, clean_texts, decode, parse_text, table_columns
from mirror.errors import MirrorError

try:  # Hugging Face Spaces helper; on ZeroGPU it must be imported before torch touches CUDA
    import spaces  # type: ignore[import-not-found]
except ImportError:  # everywhere else: training runs in-process
    spaces = None

if TYPE_CHECKING:
    from index.store import VectorIndex
    from mirror.encoder import Encoder

log = logging.getLogger("mirror.app")

ROOT = Path(__file__).resolve().parent
EXAMPLES_DIR = ROOT / "examples"
EXAMPLES: dict[str, tuple[str, str]] = {
    "small": ("Small demo list: 411 everyday words in 20 themes (tunes in seconds)", "small_words.txt"),
    "words10k": ("10,000 most frequent English words (MirrorBERT's word setting)", "en_top10k.txt"),
    "sentences10k": ("10.5k STS-B training sentences (MirrorBERT's sentence setting)", "stsb_train_sentences.txt"),
}
GOLD_SETS: dict[str, str] = {
    "SimLex-999": "gold/simlex999.txt",
    "WordSim-353": "gold/wordsim353.tsv",
    "STS-B dev": "gold/sts-dev.csv",
}
HUB_MODELS = [
    (f"{BUNDLED_MODEL} · all-MiniLM-L6-v2 (offline default)", BUNDLED_MODEL),
    ("bert-base-uncased", "bert-base-uncased"),
    ("bert-base-cased", "bert-base-cased"),
    ("roberta-base", "roberta-base"),
    ("distilbert-base-uncased", "distilbert-base-uncased"),
    ("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"),
    ("sentence-transformers/all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2"),
]
MODES = [("Auto (from the strings)", "auto"), ("Words", "words"), ("Sentences", "sentences")]
# Labels of the engine's settings in the Advanced accordion; a field added to MirrorConfig later still
# appears there (and in the API's settings), labelled by its name.
LABELS: dict[str, str] = {
    "pooling": "Pooling",
    "temperature": "Temperature τ",
    "epochs": "Epochs",
    "batch_size": "Batch size",
    "lr": "Learning rate",
    "weight_decay": "Weight decay",
    "max_length": "Max length (tokens)",
    "mask_span": "Mask span k (characters)",
    "mask_min_chars": "Mask strings from (characters)",
    "dropout": "Dropout",
    "grad_clip": "Gradient clipping (0 = off)",
    "seed": "Seed",
    "device": "Device",
    "precision": "Precision",
    "max_steps": "Max steps (empty = all epochs)",
    "bucket_by_length": "Bucket batches by length",
    "log_every": "Loss read-back every N steps",
    "compile": "torch.compile the encoder",
}
CHOICE_FIELDS = {"pooling": POOLINGS, "device": DEVICES, "precision": PRECISIONS}
_DEFAULTS = MirrorConfig()
# name -> "choice" | "bool" | "int" | "float" | "str", for every MirrorConfig field but mode and model.
ADVANCED: dict[str, str] = {
    f.name: (
        "choice"
        if f.name in CHOICE_FIELDS
        else "int"
        if f.name == "max_steps"
        else {bool: "bool", int: "int", float: "float"}.get(type(getattr(_DEFAULTS, f.name)), "str")
    )
    for f in dataclasses.fields(MirrorConfig)
    if f.name not in ("mode", "model")
}


def label(name: str) -> str:
    return LABELS.get(name, name.replace("_", " ").capitalize())


MAX_QUERIES = 20
MAX_QUERY_CHARS = 500
MAX_K = 50
STOP_FILE = "STOP"
MAX_ZIP_RATIO = 20
# A training job whose consumer (the page's or the API client's event stream) has not asked for an event in this
# long is stopped: the tab was closed or the client disconnected, and nobody will see its result.
ABANDONED_S = 20.0
# A Hugging Face model id: "name" or "org/name", each part up to 96 of [A-Za-z0-9_.-], starting alphanumeric.
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?$")
TERMINAL = ("done", "error", "cancelled")
SWEEP_EVERY_S = 60.0
EVICT_MIN_IDLE_S = 300.0  # a session used this recently is never evicted for disk space
# Rough CPU cost of one training step: seconds per (string x padded token x attention factor) for MiniLM-L6
# on 2 cores (bench: 0.45 s per 200 words, ~3 s per 200 STS-B sentences), scaled by model size below.
CPU_STEP_COST = 3.3e-4
GPU_SPEEDUP = 20.0


# ----------------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Settings:
    """Server-side limits and folders, from MIRROR_* environment variables (see the module docstring)."""

    work_dir: Path = Path(tempfile.gettempdir()) / "gradio" / "mirror-explorer"
    session_ttl: float = 7200.0
    max_upload_bytes: int = 20 * 1024 * 1024
    max_model_bytes: int = 600 * 1024 * 1024
    max_strings: int = 20_000
    max_steps: int | None = 1000  # 10k words take 100 steps; a public Space should not train for hours
    max_run_seconds: float | None = 1800.0
    train_memory_bytes: int | None = None  # None: planned from the memory available when the run starts
    disk_bytes: int = 10 * 1024**3
    session_disk_bytes: int = 2 * 1024**3
    upload_quota_bytes: int = 2 * 1024**3  # per client and hour, through Gradio's upload route
    max_map_points: int = 3000
    model_roots: tuple[Path, ...] = ()
    allow_hub: bool = True
    max_hub_bytes: int = 2048 * 1024 * 1024  # bert-large (1.3 GB) fits; a 7B checkpoint does not
    train_concurrency: int = 1
    loaded_runs: int = 32  # 20 active sessions on the bundled model (~95 MB each) stay loaded (bench/RESULTS.md)
    loaded_bytes: int = 3072 * 1024 * 1024  # ... but only ~6 runs of a bert-base-sized model
    search_concurrency: int = 4

    @staticmethod
    def from_env(env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        d = Settings()

        def number(name: str, default: float, minimum: float, kind: type = int) -> Any:
            raw = env.get(name, "").strip()
            if not raw:
                return default
            try:
                value = kind(float(raw)) if kind is int else kind(raw)
            except ValueError:
                raise MirrorError(f"{name}={raw!r} is not a number") from None
            if value < minimum:
                raise MirrorError(f"{name} must be >= {minimum}, got {raw}")
            return value

        roots = tuple(
            Path(p).expanduser().resolve() for p in env.get("MIRROR_MODEL_ROOTS", "").split(os.pathsep) if p.strip()
        )
        max_steps = number("MIRROR_MAX_STEPS", d.max_steps, 0)
        max_run_s = number("MIRROR_MAX_RUN_SECONDS", d.max_run_seconds, 0, float)
        train_mb = number("MIRROR_TRAIN_MEMORY_MB", 0, 64, float) if env.get("MIRROR_TRAIN_MEMORY_MB") else 0
        return Settings(
            work_dir=Path(env.get("MIRROR_WORK_DIR") or default_work_dir(env)).expanduser().resolve(),
            session_ttl=number("MIRROR_SESSION_TTL", d.session_ttl, 60, float),
            max_upload_bytes=int(number("MIRROR_MAX_UPLOAD_MB", 20, 0.001, float) * 1024 * 1024),
            max_model_bytes=int(number("MIRROR_MAX_MODEL_MB", 600, 1, float) * 1024 * 1024),
            max_strings=number("MIRROR_MAX_STRINGS", d.max_strings, 2),
            max_steps=max_steps or None,
            max_run_seconds=max_run_s or None,
            train_memory_bytes=int(train_mb * 2**20) or None,
            disk_bytes=int(number("MIRROR_DISK_MB", d.disk_bytes / 2**20, 100, float) * 2**20),
            session_disk_bytes=int(number("MIRROR_SESSION_DISK_MB", d.session_disk_bytes / 2**20, 10, float) * 2**20),
            upload_quota_bytes=int(number("MIRROR_UPLOAD_QUOTA_MB", d.upload_quota_bytes / 2**20, 1, float) * 2**20),
            max_map_points=number("MIRROR_MAX_MAP_POINTS", d.max_map_points, 10),
            model_roots=roots,
            allow_hub=env.get("MIRROR_ALLOW_HUB", "1").strip().lower() not in ("0", "false", "no", "off"),
            max_hub_bytes=int(number("MIRROR_MAX_HUB_MB", d.max_hub_bytes / 2**20, 1, float) * 2**20),
            train_concurrency=number("MIRROR_TRAIN_CONCURRENCY", d.train_concurrency, 1),
            loaded_runs=number("MIRROR_LOADED_RUNS", d.loaded_runs, 1),
            loaded_bytes=int(number("MIRROR_LOADED_MB", d.loaded_bytes / 2**20, 1, float) * 2**20),
            search_concurrency=number("MIRROR_SEARCH_CONCURRENCY", d.search_concurrency, 1),
        )


def default_work_dir(env: dict[str, str]) -> Path:
    """Inside Gradio's upload folder (its GRADIO_TEMP_DIR rule), so the zips handed out are served in place
    instead of copied into Gradio's cache: one copy on disk, not two. Gradio serves only the files a handler
    returned, never the rest of the folder."""
    return Path(env.get("GRADIO_TEMP_DIR") or Path(tempfile.gettempdir()) / "gradio") / "mirror-explorer"


def zero_gpu() -> bool:
    """True on a Hugging Face ZeroGPU Space, where CUDA exists only inside `spaces.GPU` functions."""
    if spaces is None:
        return False
    try:
        return bool(spaces.config.Config.zero_gpu)
    except AttributeError:  # pragma: no cover - older spaces releases
        return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "true")


def inference_device() -> str:
    """Where the web process runs encoders: CPU on ZeroGPU (no CUDA outside the GPU worker), else auto."""
    return "cpu" if zero_gpu() else "auto"


# ----------------------------------------------------------------------------------------------- sessions


@dataclass
class RunInfo:
    """A tuned model served to one session, with everything in `folder` (model/, base_index/, tuned_index/)."""

    folder: Path
    base_model: str
    pooling: str
    corpus: str
    n_texts: int
    texts_key: str
    stats: dict[str, Any]
    losses: list[float]
    summary: str
    model_zip: Path
    index_zip: Path
    created: float = field(default_factory=time.time)
    extra_corpus: str | None = None  # another upload indexed in extra_base/ + extra_tuned/


@dataclass(eq=False)
class RunHandle:
    """One run from the moment it is asked for, whoever asked (the page's Launch or an API call): its id and
    its stop flag. A stop reaches the job through a file in its folder, across the ZeroGPU process boundary."""

    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    stop: threading.Event = field(default_factory=threading.Event)
    started: bool = False  # holds the session's run: a second Launch is refused
    folder: Path | None = None

    def request_stop(self, why: str = "cancel") -> None:
        self.stop.set()
        if self.folder is not None:
            write_stop(self.folder, why)


def write_stop(folder: Path, why: str) -> None:
    """Ask the job in `folder` to stop between two steps; the first reason given is kept."""
    with contextlib.suppress(OSError):  # the run just ended and removed its folder
        with open(folder / STOP_FILE, "x", encoding="utf-8") as f:
            f.write(why)


@dataclass(eq=False)
class Session:
    """One browser (or API client) session: its folder, loaded strings and served run. Lives in gr.State."""

    id: str
    folder: Path
    texts: list[str] = field(default_factory=list)
    source: str = ""
    stats: CleanStats | None = None
    detected_mode: str = "words"
    mode_reason: str = ""
    run: RunInfo | None = None
    active: RunHandle | None = None  # the run asked for or in progress
    closed: bool = False  # the tab went away (or the state expired) while a run was going: clean up after it
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __deepcopy__(self, memo: dict) -> Session:  # gradio deep-copies state values; share, don't clone
        return self

    def touch(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / ".last_used").touch()


def texts_key(texts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8", "surrogatepass") + b"\n")
    return h.hexdigest()[:16]


@dataclass
class Loaded:
    """The in-memory side of a RunInfo: the tuned encoder and its indexes (rebuilt from disk after eviction)."""

    tuned: Encoder
    base: Encoder
    indexes: dict[str, VectorIndex] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Memory this run holds on its own (the base encoder is shared): tuned weights and index vectors."""
        weights = sum(
            t.numel() * t.element_size() for t in [*self.tuned.model.parameters(), *self.tuned.model.buffers()]
        )
        return weights + sum(len(index) * index.dim * 4 for index in self.indexes.values())


# ----------------------------------------------------------------------------------------------- plain helpers


def disk_usage(folder: Path) -> int:
    """Bytes under `folder`; files that a running job renames or removes during the walk are skipped."""
    total = 0
    for root, _, files in os.walk(folder):  # os.walk skips folders that vanish; Path.rglob raises
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_size
    return total


def release_memory(collect: bool = True) -> None:
    """Hand freed heap back to the OS after a big job or an evicted model (glibc keeps it in its per-thread
    arenas otherwise: under load the server's RSS grew ~400 MB per training round; with this it stays flat)."""
    if collect:
        import gc

        gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)


class FairSlots:
    """A counting semaphore that admits waiters in arrival order (threading.Semaphore lets late ones overtake)."""

    def __init__(self, n: int):
        self._free = n
        self._waiting: collections.deque[object] = collections.deque()
        self._cond = threading.Condition()

    def __enter__(self) -> None:
        me = object()
        with self._cond:
            self._waiting.append(me)
            while self._free <= 0 or self._waiting[0] is not me:
                self._cond.wait()
            self._waiting.popleft()
            self._free -= 1
            self._cond.notify_all()  # the next in line may be able to go too

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._free += 1
            self._cond.notify_all()


def message(text: str, kind: str = "error") -> str:
    """A Markdown box for the UI: a quoted line that says what happened, never a traceback."""
    prefix = {"error": "**Error:** ", "warning": "**Note:** ", "info": "", "ok": ""}[kind]
    return f"> {prefix}{text}"


def user_error(exc: BaseException) -> str:
    """What the user reads: a MirrorError's own message, or a short note for a bug (whose traceback is logged)."""
    if isinstance(exc, MirrorError):
        return str(exc)
    if not getattr(exc, "_mx_logged", False):  # log a bug once, however often its message is shown
        log.error("unexpected error in a handler", exc_info=exc)
        with contextlib.suppress(AttributeError):
            exc._mx_logged = True  # type: ignore[attr-defined]
    return f"something went wrong ({type(exc).__name__}: {exc}). Your previous results are kept; please report this."


def is_out_of_memory(exc: BaseException) -> bool:
    """A CUDA or CPU allocation failure (torch raises OutOfMemoryError or a RuntimeError that says so)."""
    text = str(exc).lower()
    return (
        isinstance(exc, MemoryError)
        or type(exc).__name__ == "OutOfMemoryError"
        or "out of memory" in text
        or "can't allocate memory" in text
    )


def status_box(text: str, kind: str = "info") -> str:
    """The run status as HTML (escaped; `code` and **bold** kept): errors in red, done in green."""
    color = {"error": "#dc2626", "warning": "#d97706", "info": "#6b7280", "ok": "#16a34a"}[kind]
    body = html.escape(text)
    body = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", body)
    body = re.sub(r"`(.+?)`", r"<code>\1</code>", body)
    prefix = "<b>Error:</b> " if kind == "error" else ""
    return f'<div class="mx-status-{kind}" style="border-left:4px solid {color};padding:6px 12px">{prefix}{body}</div>'


def progress_bar(label: str, done: int, total: int, right: str = "") -> str:
    """A labelled progress bar (HTML) for the run status; `label` is HTML, `right` plain text."""
    pct = 100.0 * done / total if total else 0.0
    return (
        f'<div class="mx-progress" data-done="{done}" data-total="{total}">'
        '<div style="display:flex;justify-content:space-between;gap:12px;margin-bottom:4px">'
        f'<span>{label}</span><span style="opacity:0.8">{html.escape(right)}</span></div>'
        '<div style="height:12px;border-radius:6px;background:rgba(127,127,127,0.2);overflow:hidden">'
        f'<div style="height:100%;width:{pct:.1f}%;background:var(--color-accent, #f97316);'
        'transition:width 0.3s"></div></div></div>'
    )


def display_name(path: str | Path) -> str:
    return Path(str(path)).name or "upload"


def jsonl_fields(text: str) -> list[str]:
    """String-valued fields of the first JSON object in a .jsonl text (for the column picker)."""
    for line in text.splitlines():
        if line.strip():
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):  # the parse names the line and the problem
                return []
            return [k for k, v in record.items() if isinstance(v, str)] if isinstance(record, dict) else []
    return []


def read_upload(path: str | Path, column: str | None, max_bytes: int) -> tuple[list[str], list[str]]:
    """Raw strings of an uploaded .txt/.csv/.tsv/.jsonl file and its column choices (empty for .txt).

    Raises MirrorError (with the columns attached as `.columns`) for anything unreadable.
    """
    p = Path(path)
    name = display_name(p)
    kind = p.suffix.lower()
    if kind not in SUFFIXES:
        raise MirrorError(f"`{name}`: unsupported file type {kind or '(none)'}; upload one of {', '.join(SUFFIXES)}")
    if not p.is_file():
        raise MirrorError(f"`{name}`: the upload is gone; upload it again")
    size = p.stat().st_size
    if size > max_bytes:
        raise MirrorError(f"`{name}` is {fmt_bytes(size)}; this app accepts files up to {fmt_bytes(max_bytes)}")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise MirrorError(f"`{name}` could not be read ({exc.strerror or exc}); upload it again") from None
    text = decode(data, name)
    columns = table_columns(text, kind) if kind in (".csv", ".tsv") else jsonl_fields(text) if kind == ".jsonl" else []
    try:
        return parse_text(text, kind, name, column or None), columns
    except MirrorError as exc:
        exc.columns = columns  # type: ignore[attr-defined]
        raise


def resolve_mode(mode: str, texts: Sequence[str]) -> tuple[str, str]:
    """The preset to use and why: detected from the strings for "auto"."""
    if mode in ("words", "sentences"):
        return mode, f"{mode} preset chosen by you"
    if mode not in ("auto", "", None):
        raise MirrorError(f"mode must be 'auto', 'words' or 'sentences', got {mode!r}")
    return detect_mode(texts)


def coerce_overrides(values: dict[str, Any]) -> dict[str, Any]:
    """UI/API values -> MirrorConfig overrides: blanks dropped, ints made ints, max_steps 0 = no limit."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name not in ADVANCED:
            raise MirrorError(f"unknown setting {name!r}; settings are {', '.join(ADVANCED)}")
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        kind, title = ADVANCED[name], label(name).split(" (")[0]
        if kind in ("choice", "str"):
            out[name] = str(value).strip()
            continue
        if kind == "bool":
            if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
                value = value.strip().lower() in ("true", "1")
            if not isinstance(value, (bool, int)):
                raise MirrorError(f"{title} must be true or false, got {value!r}")
            out[name] = bool(value)
            continue
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            raise MirrorError(f"{title}: {value!r} is not a number") from None
        if not math.isfinite(number):
            raise MirrorError(f"{title} must be a finite number, got {value!r}")
        if kind == "int":
            if number != int(number):
                raise MirrorError(f"{title} must be a whole number, got {value}")
            number = int(number)
        if name == "max_steps" and number == 0:
            continue
        out[name] = number
    return out


def build_config(
    texts: Sequence[str], model: str, mode: str, overrides: dict[str, Any], max_steps_cap: int | None = None
) -> tuple[MirrorConfig, list[str]]:
    """The validated run config for these strings, plus notes for the user (e.g. the server's step cap)."""
    resolved, _ = resolve_mode(mode, texts)
    config = MirrorConfig.preset(resolved, model=model, **coerce_overrides(overrides))
    notes: list[str] = []
    if max_steps_cap:
        total = planned_steps(len(texts), config)
        if total > max_steps_cap:
            config = dataclasses.replace(config, max_steps=max_steps_cap)
            notes.append(f"this server caps a run at {max_steps_cap} steps (MIRROR_MAX_STEPS); {total} were planned")
    return config, notes


def planned_steps(n: int, config: MirrorConfig) -> int:
    from math import ceil

    per_epoch = ceil(n / config.batch_size)
    if per_epoch > 1 and n % config.batch_size == 1:  # mirror.train merges a last batch of one string
        per_epoch -= 1
    total = config.epochs * per_epoch
    return min(total, config.max_steps) if config.max_steps else total


def model_cost_factor(model: str) -> float:
    """Compute per token relative to the bundled MiniLM-L6 (6 layers x 384), guessed from the model name."""
    name = model.lower()
    if model == BUNDLED_MODEL or "minilm" in name:
        return 1.0 if "l12" not in name else 2.0
    if "large" in name:
        return 28.0
    if "distil" in name:
        return 4.0
    if "small" in name or "tiny" in name or "mini" in name:
        return 1.0
    return 8.0  # a base-size model: 12 layers x 768


def estimate_seconds(
    texts: Sequence[str], config: MirrorConfig, device: str, threads: int = 2
) -> tuple[int, float, float]:
    """(steps, training seconds, indexing seconds): a rough guess to set expectations, not a promise."""
    import numpy as np

    steps = planned_steps(len(texts), config)
    if not texts:
        return steps, 0.0, 0.0
    sample = list(texts[:: max(1, len(texts) // 2000)])
    tokens = np.array([2 + max(1, len(t) // 4) for t in sample])
    padded = min(config.max_length, float(np.percentile(tokens, 95)))
    per_string = (
        CPU_STEP_COST * padded * (1 + padded / 64) * model_cost_factor(config.model) * 2 / max(1, min(threads, 16))
    )
    per_step = per_string * min(config.batch_size, len(texts))
    # Indexing: one view, no backward pass, both encoders: ~1/3 of a training pass over the strings, twice.
    index_s = 2 * len(texts) * per_string / 3
    if device == "cuda":
        per_step, index_s = per_step / GPU_SPEEDUP, index_s / GPU_SPEEDUP
    return steps, steps * per_step + 3.0, index_s


def fmt_bytes(n: float) -> str:
    for unit, size in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if n >= size:
            return f"{n / size:.1f}".rstrip("0").rstrip(".") + f" {unit}"
    return f"{int(n)} bytes"


def fmt_seconds(s: float) -> str:
    if s < 1:
        return "under a second"
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def split_queries(text: str) -> list[str]:
    """One query per line (blank lines dropped), at most MAX_QUERIES of at most MAX_QUERY_CHARS each."""
    queries = [" ".join(line.split()) for line in str(text or "").splitlines()]
    queries = [q for q in queries if q]
    if not queries:
        raise MirrorError("type a query (one per line) to search for")
    if len(queries) > MAX_QUERIES:
        raise MirrorError(f"{len(queries)} queries; search at most {MAX_QUERIES} at a time")
    for q in queries:
        if len(q) > MAX_QUERY_CHARS:
            raise MirrorError(f"a query is {len(q)} characters long; keep queries under {MAX_QUERY_CHARS}")
    return queries


def clamp_k(k: Any) -> int:
    try:
        value = int(float(k))
    except (TypeError, ValueError, OverflowError):
        raise MirrorError(f"k must be a whole number between 1 and {MAX_K}, got {k!r}") from None
    if not 1 <= value <= MAX_K:
        raise MirrorError(f"k must be between 1 and {MAX_K}, got {value}")
    return value


def compare_hits(tuned: list[Any], base: list[Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Hits as dicts, each marked `only_here` when the other encoder's top k lacks that string."""
    tuned_texts, base_texts = {h.text for h in tuned}, {h.text for h in base}

    def rows(hits: list[Any], other: set[str]) -> list[dict[str, Any]]:
        return [
            {"rank": h.rank, "text": h.text, "score": round(float(h.score), 4), "only_here": h.text not in other}
            for h in hits
        ]

    return rows(tuned, base_texts), rows(base, tuned_texts)


def render_results(results: list[dict[str, Any]], base_label: str) -> str:
    """Side-by-side HTML tables per query; strings only one side found are highlighted. All text is escaped."""
    new_bg, gone_bg = "rgba(34,197,94,0.18)", "rgba(245,158,11,0.20)"
    legend = (
        f'<p style="margin:0 0 8px 0;font-size:0.9em"><span style="background:{new_bg};padding:1px 6px;border-radius:4px">'
        f'green</span> only the tuned encoder finds it · <span style="background:{gone_bg};padding:1px 6px;'
        'border-radius:4px">amber</span> only the base encoder finds it</p>'
    )

    def table(hits: list[dict[str, Any]], title: str, bg: str, cls: str) -> str:
        body = "".join(
            f'<tr class="{cls if h["only_here"] else ""}" style="background:{bg if h["only_here"] else "transparent"}">'
            f'<td style="padding:2px 8px;opacity:0.7">{h["rank"]}</td>'
            f'<td style="padding:2px 8px">{html.escape(h["text"])}</td>'
            f'<td style="padding:2px 8px;text-align:right;font-variant-numeric:tabular-nums">{h["score"]:.3f}</td></tr>'
            for h in hits
        )
        return (
            f'<div style="flex:1;min-width:260px"><div style="font-weight:600;margin-bottom:4px">{title}</div>'
            f'<table style="width:100%;border-collapse:collapse"><thead><tr><th style="text-align:left;padding:2px 8px;width:2.5em">#</th>'
            f'<th style="text-align:left;padding:2px 8px">string</th><th style="text-align:right;padding:2px 8px;width:5em">cosine</th>'
            f"</tr></thead><tbody>{body}</tbody></table></div>"
        )

    blocks = []
    for r in results:
        changed = sum(h["only_here"] for h in r["tuned"])
        blocks.append(
            f'<div class="mx-query" style="margin-bottom:18px"><div style="font-size:1.05em;margin-bottom:6px">'
            f'Query: <b>{html.escape(r["query"])}</b> <span style="opacity:0.7">· {changed} of {len(r["tuned"])} '
            f'tuned hits are new</span></div><div style="display:flex;gap:18px;flex-wrap:wrap">'
            f"{table(r['tuned'], 'Tuned (mirror)', new_bg, 'mx-only-tuned')}"
            f"{table(r['base'], 'Base · ' + html.escape(base_label), gone_bg, 'mx-only-base')}</div></div>"
        )
    return '<div id="mx-results">' + legend + "".join(blocks) + "</div>"


def zip_folder(folder: Path, out: Path, arcroot: str, extra_files: dict[str, str] | None = None) -> Path:
    """Zip `folder` under `arcroot/`; weights are stored, not deflated (they barely compress)."""
    tmp = out.with_name(out.name + ".tmp")
    with zipfile.ZipFile(tmp, "w") as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                stored = p.suffix in (".safetensors", ".bin", ".faiss", ".pt")
                zf.write(
                    p,
                    f"{arcroot}/{p.relative_to(folder).as_posix()}",
                    zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED,
                )
        for name, text in (extra_files or {}).items():
            zf.writestr(f"{arcroot}/{name}", text)
    os.replace(tmp, out)
    return out


def extract_model_zip(zip_path: Path, dest: Path, max_bytes: int) -> Path:
    """Safely unpack an uploaded model zip (no absolute paths, '..', links or zip bombs); returns the model folder."""
    name = display_name(zip_path)
    if zip_path.suffix.lower() != ".zip":
        raise MirrorError(f"`{name}`: upload the .zip this app gave you (a zipped sentence-transformers folder)")
    if zip_path.stat().st_size > max_bytes:
        raise MirrorError(
            f"`{name}` is {fmt_bytes(zip_path.stat().st_size)}; models up to {fmt_bytes(max_bytes)} are accepted"
        )
    try:
        zf = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError):
        raise MirrorError(f"`{name}` is not a valid zip file") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > 500:
            raise MirrorError(f"`{name}` holds {len(infos)} files; a model folder has a handful")
        unpacked = sum(i.file_size for i in infos)
        if unpacked > max_bytes:
            raise MirrorError(
                f"`{name}` unpacks to {fmt_bytes(unpacked)}; models up to {fmt_bytes(max_bytes)} are accepted"
            )
        packed = sum(i.compress_size for i in infos)
        if unpacked > MAX_ZIP_RATIO * max(packed, 1) and unpacked > 2**20:
            # Weights barely compress (~1.1x); a zip that inflates 20x holds padding, not a model.
            raise MirrorError(f"`{name}` inflates {unpacked / max(packed, 1):.0f}x; a model zip does not: refusing it")
        for info in infos:
            parts = Path(info.filename).parts
            is_link = (info.external_attr >> 16) & 0o170000 == 0o120000
            if info.filename.startswith(("/", "\\")) or ".." in parts or ":" in info.filename or is_link:
                raise MirrorError(f"`{name}` contains an unsafe path ({info.filename!r}); refusing to unpack it")
        dest.mkdir(parents=True, exist_ok=True)
        try:
            zf.extractall(dest)
        except (zipfile.BadZipFile, OSError, RuntimeError) as exc:
            log.warning("model zip %s could not be unpacked: %s", name, exc)  # the server's paths stay in the log
            raise MirrorError(f"`{name}` could not be unpacked (a damaged zip, or the server's disk is full)") from None
    for candidate in [dest, *sorted(p for p in dest.iterdir() if p.is_dir())]:
        if (candidate / "config.json").is_file() or (candidate / "modules.json").is_file():
            return candidate
    raise MirrorError(f"`{name}` does not contain a model folder (no config.json or modules.json at its top)")


# ----------------------------------------------------------------------------------------------- training job


def job_duration(
    texts: list[str], config: dict[str, Any], run_dir: str, roots: list[str], build_base: bool, limits: dict
) -> int:
    """ZeroGPU reservation in seconds for a training job: its GPU estimate plus loading, with a margin."""
    cfg = MirrorConfig.from_dict(config)
    _, train_s, index_s = estimate_seconds(texts, cfg, "cuda")
    return int(min(600, max(60, 1.5 * (train_s + index_s) + 30)))


def _gpu(fn: Callable) -> Callable:
    """`spaces.GPU` with a duration estimated from the job on ZeroGPU; a no-op elsewhere."""
    if spaces is None:
        return fn
    return spaces.GPU(duration=job_duration)(fn)


def read_stop(run: Path) -> str:
    """Why the job in `run` was asked to stop ("cancel", "time", "abandoned"), or "" when it was not."""
    try:
        return (run / STOP_FILE).read_text(encoding="utf-8").strip() or "cancel"
    except OSError:
        return ""


def stopped_text(stats: dict[str, Any], why: str, settings: Settings) -> str:
    """What the user reads when a run stopped before its end."""
    done = f"after {stats.get('steps', 0)} of {stats.get('total_steps', 0)} steps"
    if why == "time":
        limit = fmt_seconds(settings.max_run_seconds or 0)
        return (
            f"Stopped {done}: this server stops a run after {limit} (MIRROR_MAX_RUN_SECONDS); nothing was saved. "
            "Try fewer strings, fewer epochs or a smaller model."
        )
    if why == "abandoned":
        return f"Stopped {done}: the page or API client that started it went away; nothing was saved."
    return f"Cancelled {done}; nothing was saved."


@_gpu
def train_job(
    texts: list[str], config: dict[str, Any], run_dir: str, roots: list[str], build_base: bool, limits: dict
) -> Iterator[tuple]:
    """Tune and index in `run_dir`; yields plain tuples, so it can run inside a ZeroGPU worker process.

    Events: ("phase", text, done, total), ("step", step, total, loss), ("tick",), then one of
    ("done", stats), ("cancelled", stats) or ("error", message). Results are files in run_dir:
    model/ (sentence-transformers), base_index/ (unless build_base is False) and tuned_index/.
    The run stops between steps when a file named STOP appears in run_dir (Cancel, across processes), when
    `limits["max_seconds"]` have passed, or when nobody has asked for an event for ABANDONED_S (the consumer
    went away: a closed tab, a disconnected or cancelled API client). `limits["memory"]` bounds a step.
    """
    run = Path(run_dir)
    stop = run / STOP_FILE
    events: queue.Queue = queue.Queue()
    deadline = time.monotonic() + limits["max_seconds"] if limits.get("max_seconds") else math.inf
    last_pull = [time.monotonic()]

    def should_stop() -> bool:
        now = time.monotonic()
        if now > deadline:
            write_stop(run, "time")
        elif now - last_pull[0] > ABANDONED_S:
            write_stop(run, "abandoned")
        return stop.exists()

    def work() -> None:
        try:
            _tune_and_index(
                texts,
                MirrorConfig.from_dict(config),
                run,
                [Path(r) for r in roots],
                build_base,
                events.put,
                should_stop,
                limits.get("memory"),
            )
        except MirrorError as exc:
            events.put(("error", str(exc)))
        except Exception as exc:  # a bug or an OOM: report it, keep the server alive
            log.exception("training job failed")
            if is_out_of_memory(exc):
                events.put(
                    (
                        "error",
                        f"out of memory ({type(exc).__name__}); try fewer strings, a smaller batch size or max length, or a smaller model",
                    )
                )
            else:
                events.put(("error", f"training failed unexpectedly ({type(exc).__name__}: {exc})"))
        finally:
            events.put(None)

    thread = threading.Thread(target=work, name="mirror-train", daemon=True)
    thread.start()
    try:
        while True:
            last_pull[0] = time.monotonic()
            try:
                item = events.get(timeout=0.5)
            except queue.Empty:
                yield ("tick",)
                continue
            if item is None:
                break
            yield item
    finally:
        if thread.is_alive():  # the consumer closed us (tab closed, client cancelled): stop at the next step
            write_stop(run, "abandoned")
            thread.join()


def _tune_and_index(
    texts: list[str],
    config: MirrorConfig,
    run: Path,
    roots: list[Path],
    build_base: bool,
    emit: Callable[[tuple], None],
    should_stop: Callable[[], bool],
    memory: int | None = None,
) -> None:
    from index.store import VectorIndex
    from mirror.encoder import load_encoder
    from mirror.train import mirror_tune, save_result

    emit(("phase", "Loading the base model", 0, 0))
    encoder = load_encoder(
        config.model, pooling=config.pooling, device=config.device, dropout=config.dropout, allowed_roots=roots
    )
    if build_base:
        msg = "Indexing your strings with the base encoder"
        emit(("phase", msg, 0, len(texts)))
        VectorIndex.build(encoder, texts, gpu=False, on_progress=lambda d, t: emit(("phase", msg, d, t))).save(
            run / "base_index"
        )
    if should_stop():
        emit(("cancelled", {"steps": 0, "total_steps": 0}))
        return
    result = mirror_tune(
        texts, config, on_step=lambda s, t, loss: emit(("step", s, t, loss)), should_stop=should_stop, encoder=encoder
    )
    stats = {
        **result.stats(),
        "summary": result.summary(),
        "pooling": result.config.pooling,
        "mode": result.config.mode,
    }
    stats["losses"] = list(result.losses)
    if result.cancelled:
        emit(("cancelled", stats))
        return
    emit(("phase", "Saving the tuned model", 0, 0))
    save_result(result, run / "model")
    msg = "Indexing your strings with the tuned encoder"
    VectorIndex.build(result.encoder, texts, gpu=False, on_progress=lambda d, t: emit(("phase", msg, d, t))).save(
        run / "tuned_index"
    )
    emit(("done", stats))


# ----------------------------------------------------------------------------------------------- the app


class MirrorApp:
    """Handlers over `mirror` and `index`, with per-session folders and per-process caches.

    Every public method takes plain values (and a Session) and returns plain values or raises MirrorError;
    `build_demo` wraps them for Gradio.
    """

    def __init__(self, settings: Settings | None = None):
        self.settings = settings or Settings.from_env()
        self.settings.work_dir.mkdir(parents=True, exist_ok=True)
        self._base: OrderedDict[tuple[str, str], Encoder] = OrderedDict()
        self._base_lock = threading.Lock()
        self._key_locks: dict[tuple[str, str], threading.Lock] = {}
        self._loaded: OrderedDict[str, Loaded] = OrderedDict()
        self._hub_sizes: dict[str, int] = {}  # hub id -> download bytes, asked once per id
        self._loaded_lock = threading.Lock()
        self._run_locks: dict[str, threading.Lock] = {}
        self._last_sweep = 0.0
        # Training slots, enforced here as well as by the Gradio queue (which makes users wait for one):
        # a caller that bypasses the queue gets a clear "busy" error instead of an extra training.
        self._train_slots = threading.BoundedSemaphore(self.settings.train_concurrency)
        self._running: set[Path] = set()  # session folders with a job in progress: never swept
        self._search_slots = FairSlots(self.settings.search_concurrency)

    def __deepcopy__(self, memo: dict) -> MirrorApp:  # never cloned, whatever holds a reference to it
        return self

    # ---------------------------------------------------------------- sessions

    def session(self, state: Session | None = None) -> Session:
        """The caller's session, or a fresh one (with its own folder) when it has none or it expired."""
        if isinstance(state, Session) and state.folder.is_dir():
            state.touch()
            return state
        self.sweep()
        sid = uuid.uuid4().hex
        s = Session(id=sid, folder=self.settings.work_dir / sid)
        s.touch()
        return s

    def close_session(self, state: Session | None) -> None:
        """gr.State's delete callback (tab closed, or idle past the TTL): drop the folder and cached models.

        A session closed during a run is cleaned up when that run ends.
        """
        if not isinstance(state, Session):
            return
        state.closed = True
        if state.active is None and state.folder not in self._running:
            self._discard(state)

    def _discard(self, session: Session) -> None:
        self._forget(session)
        shutil.rmtree(session.folder, ignore_errors=True)
        release_memory(collect=False)  # no gc pass: Gradio calls this on its event loop, once per expired session

    def sweep(self, force: bool = False) -> list[Path]:
        """Delete session folders idle past the TTL, then the least recently used idle ones while all sessions
        together hold more than MIRROR_DISK_MB. A session with a job running, or used in the last
        EVICT_MIN_IDLE_S, is never removed. Runs at most once a minute unless forced."""
        now = time.time()
        if not force and now - self._last_sweep < SWEEP_EVERY_S:
            return []
        self._last_sweep = now
        folders = []
        for folder in self.settings.work_dir.iterdir() if self.settings.work_dir.is_dir() else []:
            marker = folder / ".last_used"
            try:
                last = marker.stat().st_mtime if marker.exists() else folder.stat().st_mtime
            except OSError:
                continue
            if folder.is_dir() and folder not in self._running:
                folders.append((last, folder))
        removed = [f for last, f in folders if now - last > self.settings.session_ttl]
        idle = sorted((last, f) for last, f in folders if f not in removed and now - last > EVICT_MIN_IDLE_S)
        held = disk_usage(self.settings.work_dir) - sum(disk_usage(f) for f in removed)
        for _, folder in idle:  # oldest first
            if held <= self.settings.disk_bytes:
                break
            held -= disk_usage(folder)
            removed.append(folder)
        for folder in removed:
            self._forget_folder(folder)
            shutil.rmtree(folder, ignore_errors=True)
        return removed

    def check_disk(self, session: Session) -> None:
        """Before a job writes: room in the session's own budget, and idle sessions evicted past the global one."""
        used = disk_usage(session.folder)
        if used > self.settings.session_disk_bytes:
            raise MirrorError(
                f"this session already holds {fmt_bytes(used)} on the server (its limit is "
                f"{fmt_bytes(self.settings.session_disk_bytes)}, MIRROR_SESSION_DISK_MB); reload the page to start afresh"
            )
        self.sweep(force=True)

    def _forget(self, session: Session) -> None:
        self._forget_folder(session.folder)

    def _forget_folder(self, folder: Path) -> None:
        """Drop the loaded runs (and their load locks) of one session folder."""
        prefix = str(folder) + os.sep
        with self._loaded_lock:
            for key in [k for k in self._loaded if k.startswith(prefix)]:
                del self._loaded[key]
            for key in [k for k in self._run_locks if k.startswith(prefix)]:
                del self._run_locks[key]

    # ---------------------------------------------------------------- encoders and loaded runs

    def warm_up(self) -> None:
        """Load the bundled base encoder (and torch) ahead of the first request; failures are only logged."""
        try:
            self.base_encoder(BUNDLED_MODEL)
        except Exception:  # the first request will report the problem to the user
            log.exception("could not pre-load the bundled model")

    def check_model(self, model: str) -> str:
        """The model name, or MirrorError when this server does not allow it.

        Allowed: the bundled model; a Hugging Face id (`name` or `org/name`, when MIRROR_ALLOW_HUB is on);
        a local folder only under a directory listed in MIRROR_MODEL_ROOTS. URLs, `..`, control characters
        and anything else are refused before any file or network access.
        """
        model = str(model or "").strip()
        if not model:
            raise MirrorError("choose a base model (or type a Hugging Face model id)")
        if model == BUNDLED_MODEL:
            return model
        shown = model if len(model) <= 80 else model[:80] + "…"
        if len(model) > 1000 or "://" in model or any(ord(c) < 32 or ord(c) == 127 for c in model):
            raise MirrorError(
                f"`{shown}` is not a model name: use '{BUNDLED_MODEL}' or a Hugging Face id such as "
                "`bert-base-uncased` or `org/name`"
            )
        if _looks_local(model):
            if not self.settings.model_roots:
                raise MirrorError(
                    f"`{shown}`: this server does not load models from local folders; use '{BUNDLED_MODEL}' "
                    "or a Hugging Face model id"
                )
            if not any(_is_under(Path(model).expanduser(), root) for root in self.settings.model_roots):
                raise MirrorError(
                    f"`{shown}`: local model folders are only accepted under the allowed directories (MIRROR_MODEL_ROOTS)"
                )
            return model
        if not HUB_ID.match(model) or ".." in model:
            raise MirrorError(
                f"`{shown}` is not a valid Hugging Face model id (letters, digits, `-`, `_`, `.`, as `name` or "
                "`org/name`)"
            )
        if not self.settings.allow_hub:
            raise MirrorError(f"{model!r}: this server only offers the bundled model (MIRROR_ALLOW_HUB=0)")
        return model

    def check_download(self, model: str) -> str:
        """The (checked) model name, or MirrorError when it is a hub model over MIRROR_MAX_HUB_MB to download."""
        model = self.check_model(model)
        if model == BUNDLED_MODEL or _looks_local(model):
            return model
        size = self._hub_sizes.get(model)
        if size is None:
            from mirror.encoder import hub_download_bytes

            size = hub_download_bytes(model)  # None offline: the load then says the hub is unreachable
            if size is not None:
                self._hub_sizes[model] = size
        if size is not None and size > self.settings.max_hub_bytes:
            raise MirrorError(
                f"`{model}` is a {fmt_bytes(size)} download; this server loads hub models up to "
                f"{fmt_bytes(self.settings.max_hub_bytes)} (MIRROR_MAX_HUB_MB)"
            )
        return model

    def base_encoder(self, model: str, pooling: str = "auto") -> Encoder:
        """The read-only base encoder, loaded once per process (an LRU of three)."""
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
            encoder = load_encoder(
                model, pooling=pooling, device=inference_device(), allowed_roots=list(self.settings.model_roots)
            )
            encoder.model.eval()
            with self._base_lock:
                self._base[key] = encoder
                while len(self._base) > 3:
                    self._base.popitem(last=False)
            return encoder

    def loaded(self, run: RunInfo) -> Loaded:
        """The run's tuned encoder and main indexes, from the LRU or loaded from its folder."""
        key = str(run.folder)
        with self._loaded_lock:
            if key in self._loaded:
                self._loaded.move_to_end(key)
                return self._loaded[key]
            run_lock = self._run_locks.setdefault(key, threading.Lock())
        with run_lock:  # parallel searches of an evicted run load it once
            with self._loaded_lock:
                if key in self._loaded:
                    return self._loaded[key]
            return self._load_run(run, key)

    def _load_run(self, run: RunInfo, key: str) -> Loaded:
        from index.store import VectorIndex
        from mirror.encoder import load_encoder

        base = self.base_encoder(run.base_model, run.pooling)
        tuned = load_encoder(run.folder / "model", device=inference_device(), allowed_roots=[run.folder])
        tuned.model.eval()
        item = Loaded(tuned=tuned, base=base)
        item.indexes["main:base"] = VectorIndex.load(run.folder / "base_index", base, gpu=False)
        item.indexes["main:tuned"] = VectorIndex.load(run.folder / "tuned_index", tuned, gpu=False)
        if run.extra_corpus and (run.folder / "extra_tuned").is_dir():
            item.indexes["extra:base"] = VectorIndex.load(run.folder / "extra_base", base, gpu=False)
            item.indexes["extra:tuned"] = VectorIndex.load(run.folder / "extra_tuned", tuned, gpu=False)
        with self._loaded_lock:
            self._loaded[key] = item
            evicted = []  # least recently used first, down to the count and memory limits; the new run stays
            held = sum(x.nbytes for x in self._loaded.values())
            while len(self._loaded) > 1 and (
                len(self._loaded) > self.settings.loaded_runs or held > self.settings.loaded_bytes
            ):
                evicted.append(self._loaded.popitem(last=False))
                held -= evicted[-1][1].nbytes
        if evicted:
            del evicted
            release_memory(collect=False)
        return item

    # ---------------------------------------------------------------- tab 1: input

    def set_texts(self, session: Session, raw: Sequence[str], source: str) -> dict[str, Any]:
        """Clean, cap and keep the strings; returns what the UI and the API report about them."""
        texts, stats = clean_texts(raw)
        notes = []
        if len(texts) > self.settings.max_strings:
            notes.append(
                f"kept the first {self.settings.max_strings:,} of {len(texts):,} strings (this server's limit, MIRROR_MAX_STRINGS)"
            )
            texts = texts[: self.settings.max_strings]
        if len(texts) < 2:
            raise MirrorError(
                f"`{source}`: found {len(texts)} usable string{'s' if len(texts) != 1 else ''} "
                f"({stats.lines} lines, {stats.empty} empty, {stats.duplicates} duplicates); mirror tuning needs at least 2 distinct strings"
            )
        mode, reason = detect_mode(texts)
        session.texts, session.source, session.stats = texts, source, stats
        session.detected_mode, session.mode_reason = mode, reason
        return {"strings": len(texts), "stats": stats, "mode": mode, "reason": reason, "notes": notes, "source": source}

    def load_file(self, session: Session, path: str | None, column: str | None = None) -> dict[str, Any]:
        if not path:
            raise MirrorError("no file uploaded")
        raw, columns = read_upload(path, column, self.settings.max_upload_bytes)
        info = self.set_texts(session, raw, display_name(path))
        return {**info, "columns": columns}

    def load_pasted(self, session: Session, text: str) -> dict[str, Any]:
        text = str(text or "")
        if not text.strip():
            raise MirrorError("paste some strings first, one per line")
        if len(text.encode("utf-8", "surrogatepass")) > self.settings.max_upload_bytes:
            raise MirrorError(
                f"the pasted text is over {fmt_bytes(self.settings.max_upload_bytes)}; upload a file instead"
            )
        return self.set_texts(session, text.splitlines(), "pasted text")

    def load_example(self, session: Session, key: str) -> dict[str, Any]:
        if key not in EXAMPLES:
            raise MirrorError(f"unknown example {key!r}")
        path = EXAMPLES_DIR / EXAMPLES[key][1]
        if not path.is_file():
            raise MirrorError(f"the example file {path.name} is missing from this installation")
        return self.set_texts(session, path.read_text(encoding="utf-8").splitlines(), path.name)

    def estimate(self, session: Session, model: str, mode: str, overrides: dict[str, Any]) -> str:
        """One Markdown line: planned steps and a rough time on this device."""
        if not session.texts:
            return "Load some strings to see the plan and a time estimate."
        try:
            config, notes = build_config(
                session.texts,
                str(model or BUNDLED_MODEL).strip() or BUNDLED_MODEL,
                mode,
                overrides,
                self.settings.max_steps,
            )
        except MirrorError as exc:
            return message(str(exc), "warning")
        device, threads = _device_and_threads(config.device)
        steps, train_s, index_s = estimate_seconds(session.texts, config, device, threads)
        where = "GPU" if device == "cuda" else f"CPU ({threads} thread{'s' if threads != 1 else ''})"
        extra = f" · {'; '.join(notes)}" if notes else ""
        return (
            f"**Plan:** {steps:,} steps ({config.mode} preset, batch {config.batch_size}, {config.epochs} epoch"
            f"{'s' if config.epochs != 1 else ''}) · **estimated** ~{fmt_seconds(train_s)} training + "
            f"~{fmt_seconds(index_s)} indexing on this {where}{extra}"
        )

    # ---------------------------------------------------------------- tab 1: training

    def request_run(self, session: Session) -> RunHandle:
        """Launch was clicked: the run exists (and can be cancelled) while it still waits in the queue."""
        if session.active is None or not session.active.started:
            session.active = RunHandle()
        return session.active

    def cancel(self, session: Session) -> str:
        """Stop the session's run between two steps, or before it starts (while it waits in the queue)."""
        handle = session.active  # read once: the run may end (and reset it) at any moment
        if handle is None:
            return "Nothing is running. Your model and index (if any) stay served."
        handle.request_stop("cancel")
        if handle.started:
            return "Stopping after the current step… the previous model and index stay served."
        return "Cancelled before it started. The previous model and index stay served."

    def train(self, session: Session, model: str, mode: str, overrides: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Tune on the session's strings in a fresh folder; swap it in only on success. Yields events.

        Events are dicts with "kind": phase (text, done, total), step (step, total, loss, eta), note (text), tick,
        then one of done (run), cancelled (text) or error (text). Never raises for bad input: it yields an error.
        The run is cancellable (session.active, its id and stop flag) before the first event, by `cancel` or by
        the consumer going away;
        it holds one of the server's training slots; the last event comes after the slot is released and the
        run's folder cleaned up.
        """
        handle = session.active
        if handle is not None and handle.started:
            yield {"kind": "error", "text": "A run is already in progress in this session; wait for it or cancel it."}
            return
        handle = handle or RunHandle()  # an API call: no Launch click made one
        session.active = handle
        try:
            if handle.stop.is_set():
                yield {"kind": "cancelled", "text": "Cancelled before it started."}
                return
            if len(session.texts) < 2:
                yield {"kind": "error", "text": "Load at least 2 strings first (step 1 above)."}
                return
            handle.started = True
            yield from self._exclusive(session, self._train(session, handle, model, mode, overrides))
        finally:
            if session.active is handle:
                session.active = None

    def _exclusive(self, session: Session, events: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """Run a job's events holding a training slot; its final event is yielded after the job cleaned up."""
        if not self._train_slots.acquire(blocking=False):
            n = self.settings.train_concurrency
            yield {
                "kind": "error",
                "text": f"this server runs at most {n} training{'s' if n != 1 else ''} at a time "
                "(MIRROR_TRAIN_CONCURRENCY) and all slots are busy; try again when a run finishes",
            }
            return
        terminal = None
        self._running.add(session.folder)
        try:
            with contextlib.closing(events) as job:
                for ev in job:
                    if ev["kind"] in TERMINAL:
                        terminal = ev
                        break
                    yield ev
        finally:
            self._running.discard(session.folder)
            self._train_slots.release()
            release_memory()
            if session.closed:  # the tab went away during the run: nobody will use its folder again
                self._discard(session)
        if terminal is not None:
            yield terminal

    def _train(
        self, session: Session, handle: RunHandle, model: str, mode: str, overrides: dict[str, Any]
    ) -> Iterator[dict[str, Any]]:
        texts, source = list(session.texts), session.source
        try:
            self.check_disk(session)
            config, notes = build_config(texts, self.check_download(model), mode, overrides, self.settings.max_steps)
            yield {"kind": "phase", "text": f"Checking the base model {config.model}", "done": 0, "total": 0}
            base = self.base_encoder(config.model, config.pooling)
        except Exception as exc:  # MirrorError, or a bug: a message either way
            yield {"kind": "error", "text": user_error(exc)}
            return
        for note in notes:
            yield {"kind": "note", "text": note}
        run = session.folder / "runs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{handle.id}"
        run.mkdir(parents=True)
        handle.folder = run
        if handle.stop.is_set():  # cancelled while the base model loaded
            write_stop(run, "cancel")
        key = texts_key(texts)
        prev = session.run
        build_base = True
        if prev and (prev.base_model, prev.pooling, prev.texts_key) == (config.model, base.pooling, key):
            if (prev.folder / "base_index").is_dir():  # same strings, same base: reuse its index
                shutil.copytree(prev.folder / "base_index", run / "base_index")
                build_base = False
        ok = False
        started, started_at = time.perf_counter(), time.time()
        t1: float | None = None
        try:
            limits = {"max_seconds": self.settings.max_run_seconds, "memory": self.settings.train_memory_bytes}
            roots = [str(run)] + [str(r) for r in self.settings.model_roots]
            for ev in train_job(texts, config.to_dict(), str(run), roots, build_base, limits):
                kind = ev[0]
                if kind == "phase":
                    yield {"kind": "phase", "text": ev[1], "done": ev[2], "total": ev[3]}
                elif kind == "step":
                    step, total, loss = ev[1], ev[2], ev[3]
                    session.touch()  # a long run keeps its session from being swept as idle
                    if t1 is None:
                        t1, first = time.perf_counter(), step
                    rate = (time.perf_counter() - t1) / (step - first) if step > first else None
                    eta = rate * (total - step) if rate is not None else None
                    yield {"kind": "step", "step": step, "total": total, "loss": float(loss), "eta": eta}
                elif kind == "tick":
                    yield {"kind": "tick"}
                elif kind == "cancelled" or (kind == "done" and (run / STOP_FILE).exists()):
                    yield {**ev[1], "kind": "cancelled", "text": stopped_text(ev[1], read_stop(run), self.settings)}
                    return
                elif kind == "error":
                    yield {"kind": "error", "text": ev[1]}
                    return
                elif kind == "done":
                    stats = ev[1]
                    yield {"kind": "phase", "text": "Preparing downloads", "done": 0, "total": 0}
                    info = self._finish_run(session, run, config, stats, texts, source, key, build_base, prev)
                    info.stats.update(
                        wall_seconds=round(time.perf_counter() - started, 1),
                        started_at=round(started_at, 3),
                        finished_at=round(time.time(), 3),
                    )
                    ok = True
                    yield {"kind": "done", "run": info}
                    return
            yield {"kind": "error", "text": "the run ended without a result; the previous model stays served"}
        except MirrorError as exc:
            yield {"kind": "error", "text": str(exc)}
        except Exception as exc:
            log.exception("run failed")
            yield {
                "kind": "error",
                "text": f"the run failed unexpectedly ({type(exc).__name__}: {exc}); the previous model stays served",
            }
        finally:
            if not ok:
                shutil.rmtree(run, ignore_errors=True)

    def _finish_run(
        self,
        session: Session,
        run: Path,
        config: MirrorConfig,
        stats: dict[str, Any],
        texts: list[str],
        source: str,
        key: str,
        build_base: bool,
        prev: RunInfo | None,
    ) -> RunInfo:
        """Check the new run loads, zip its downloads, then swap it in (and drop the old one)."""
        readme = (
            "A Mirror Explorer search index (FAISS) of your strings, built with the tuned model.\n"
            "Search it with: python -m index query mirror-index 'your query' --encoder mirror-model\n"
        )
        info = RunInfo(
            folder=run,
            base_model=config.model,
            pooling=stats["pooling"],
            corpus=source,
            n_texts=len(texts),
            texts_key=key,
            stats={k: v for k, v in stats.items() if k not in ("losses",)},
            losses=list(stats.get("losses", [])),
            summary=stats.get("summary", ""),
            model_zip=zip_folder(run / "model", run / "mirror-model.zip", "mirror-model"),
            index_zip=zip_folder(run / "tuned_index", run / "mirror-index.zip", "mirror-index", {"README.txt": readme}),
        )
        self.loaded(info)  # load now: a broken artifact fails here, before the swap
        with session.lock:
            session.run = info
        if prev is not None and prev.folder != run:
            with self._loaded_lock:
                self._loaded.pop(str(prev.folder), None)
                self._run_locks.pop(str(prev.folder), None)
            shutil.rmtree(prev.folder, ignore_errors=True)
        return info

    def use_saved_model(self, session: Session, zip_path: str | None) -> Iterator[dict[str, Any]]:
        """Serve a model zip saved from this app: index the loaded strings with it and its base. Yields events."""
        if not zip_path:
            yield {"kind": "error", "text": "no model zip uploaded"}
            return
        if len(session.texts) < 2:
            yield {"kind": "error", "text": "Load the strings to search first (step 1), then upload the model zip."}
            return
        if session.active is not None and session.active.started:
            yield {"kind": "error", "text": "A run is in progress in this session; wait for it or cancel it."}
            return
        yield from self._exclusive(session, self._use_saved(session, zip_path))

    def _use_saved(self, session: Session, zip_path: str) -> Iterator[dict[str, Any]]:
        from index.store import VectorIndex
        from mirror.encoder import load_encoder

        run = session.folder / "runs" / f"{time.strftime('%Y%m%d-%H%M%S')}-upload-{uuid.uuid4().hex[:8]}"
        prev, texts, source = session.run, list(session.texts), session.source
        handle = session.active = RunHandle(started=True, folder=run)
        ok = False
        try:
            self.check_disk(session)
            yield {"kind": "phase", "text": "Unpacking the model", "done": 0, "total": 0}
            folder = extract_model_zip(Path(zip_path), run / "unpacked", self.settings.max_model_bytes)
            os.replace(folder, run / "model")
            shutil.rmtree(run / "unpacked", ignore_errors=True)
            tuned = load_encoder(run / "model", device=inference_device(), allowed_roots=[run])
            notes = []
            base_model = str((tuned.info.get("config") or {}).get("model") or BUNDLED_MODEL)
            try:  # a name read from an uploaded file: the same checks as one typed by a user, hub size included
                base = self.base_encoder(self.check_download(base_model), tuned.pooling)
            except MirrorError as exc:
                notes.append(
                    f"its base model {base_model!r} is not available here ({exc}); comparing with the bundled model"
                )
                base_model = BUNDLED_MODEL  # with the tuned model's pooling: the served run reloads it that way
                base = self.base_encoder(base_model, tuned.pooling)
            for name, enc in (("base", base), ("tuned", tuned)):
                msg = f"Indexing your strings with the {name} encoder"
                yield {"kind": "phase", "text": msg, "done": 0, "total": len(texts)}
                VectorIndex.build(enc, texts, gpu=False).save(run / f"{name}_index")
            stats = dict(tuned.info.get("stats") or {})
            stats.update(
                pooling=tuned.pooling,
                mode=(tuned.info.get("config") or {}).get("mode", "?"),
                uploaded=display_name(zip_path),
            )
            stats["summary"] = f"uploaded model {display_name(zip_path)}" + (
                f" ({stats['summary']})" if stats.get("summary") else ""
            )
            stats["notes"] = notes
            config = MirrorConfig.preset("words", model=base_model)
            info = self._finish_run(session, run, config, stats, texts, source, texts_key(texts), True, prev)
            ok = True
            yield {"kind": "done", "run": info, "notes": notes}
        except MirrorError as exc:
            yield {"kind": "error", "text": str(exc)}
        except Exception as exc:
            log.exception("model upload failed")  # details (which may name server paths) stay in the log
            yield {
                "kind": "error",
                "text": f"could not use this model ({type(exc).__name__}); is it a zip saved by this app?",
            }
        finally:
            if session.active is handle:
                session.active = None
            if not ok:
                shutil.rmtree(run, ignore_errors=True)

    # ---------------------------------------------------------------- tab 2: search

    def search(self, session: Session, queries: str, k: Any = 10, corpus: str = "main") -> list[dict[str, Any]]:
        """Top-k hits of each query for the tuned and the base encoder, marked where they differ."""
        run = session.run
        if run is None:
            raise MirrorError("Nothing to search yet: tune a model in tab ① (or upload a saved model there) first.")
        qs, k = split_queries(queries), clamp_k(k)
        loaded = self.loaded(run)
        if corpus == "extra" and "extra:tuned" not in loaded.indexes:
            raise MirrorError("no other corpus is indexed yet: upload one below and press “Index it”")
        prefix = "extra" if corpus == "extra" else "main"
        with self._search_slots:  # a few encodes at a time, in arrival order: no thread oversubscription
            tuned_hits = loaded.indexes[f"{prefix}:tuned"].search(qs, k)
            base_hits = loaded.indexes[f"{prefix}:base"].search(qs, k)
        out = []
        for q, th, bh in zip(qs, tuned_hits, base_hits, strict=True):
            tuned, base = compare_hits(th, bh)
            out.append({"query": q, "tuned": tuned, "base": base})
        return out

    def index_corpus(self, session: Session, path: str | None, column: str | None = None) -> str:
        """Index another uploaded corpus with the served tuned and base encoders; returns a summary."""
        from index.store import VectorIndex

        run = session.run
        if run is None:
            raise MirrorError("tune a model first (tab ①): the other corpus is indexed with your tuned encoder")
        if not path:
            raise MirrorError("upload a corpus file first")
        raw, _ = read_upload(path, column, self.settings.max_upload_bytes)
        texts, stats = clean_texts(raw)
        dropped = max(0, len(texts) - self.settings.max_strings)
        texts = texts[: self.settings.max_strings]
        if not texts:
            raise MirrorError(f"`{display_name(path)}` has no non-empty strings")
        self.check_disk(session)
        loaded = self.loaded(run)
        tmp_b, tmp_t = run.folder / ".extra_base.new", run.folder / ".extra_tuned.new"
        VectorIndex.build(loaded.base, texts, gpu=False).save(tmp_b)
        VectorIndex.build(loaded.tuned, texts, gpu=False).save(tmp_t)
        from mirror.encoder import replace_dir

        with session.lock:
            replace_dir(tmp_b, run.folder / "extra_base")
            replace_dir(tmp_t, run.folder / "extra_tuned")
            loaded.indexes["extra:base"] = VectorIndex.load(run.folder / "extra_base", loaded.base, gpu=False)
            loaded.indexes["extra:tuned"] = VectorIndex.load(run.folder / "extra_tuned", loaded.tuned, gpu=False)
            run.extra_corpus = display_name(path)
        return (
            f"Indexed {len(texts):,} strings of `{display_name(path)}` with both encoders ({stats.lines:,} lines, "
            f"{stats.empty:,} empty dropped, {stats.duplicates:,} duplicates removed"
            + (f"; {dropped:,} more dropped: this server's limit is {self.settings.max_strings:,}" if dropped else "")
            + "). Searching it now."
        )

    # ---------------------------------------------------------------- tab 3: evaluate

    def evaluate(self, session: Session, gold: Sequence[str], pairs_path: str | None = None) -> list[dict[str, Any]]:
        """Spearman ρ of cosine vs gold scores, for the base and (when there is one) the tuned encoder."""
        from mirror.evaluate import evaluate_pairs, parse_pairs, read_pairs

        sets: list[tuple[str, list]] = []
        for name in gold or []:
            if name not in GOLD_SETS:
                raise MirrorError(f"unknown gold set {name!r}; choose from {', '.join(GOLD_SETS)}")
            sets.append((name, read_pairs(EXAMPLES_DIR / GOLD_SETS[name])))
        if pairs_path:
            p = Path(pairs_path)
            if p.stat().st_size > self.settings.max_upload_bytes:
                raise MirrorError(f"`{display_name(p)}` is larger than {fmt_bytes(self.settings.max_upload_bytes)}")
            sets.append((display_name(p), parse_pairs(decode(p.read_bytes(), display_name(p)), display_name(p))))
        if not sets:
            raise MirrorError("choose a gold set or upload a pairs file")
        run = session.run
        if run is not None:
            loaded = self.loaded(run)
            encoders = [("base", loaded.base), ("tuned", loaded.tuned)]
        else:
            encoders = [("base", self.base_encoder(BUNDLED_MODEL))]
        rows = []
        for name, pairs in sets:
            row: dict[str, Any] = {"gold set": name, "pairs": len(pairs)}
            for label, enc in encoders:
                row[label] = round(evaluate_pairs(enc, pairs, name).spearman, 4)
            if "tuned" in row:
                row["change"] = round(row["tuned"] - row["base"], 4)
            rows.append(row)
        return rows

    # ---------------------------------------------------------------- tab 4: map

    def project(self, session: Session, n_points: Any = 1000, n_clusters: Any = 8) -> dict[str, list[dict[str, Any]]]:
        """2-D PCA of a sample of the indexed strings under both encoders, coloured by k-means clusters.

        Clusters come from the tuned space and colour both maps, so the same colour is the same group.
        """
        import faiss
        import numpy as np

        run = session.run
        if run is None:
            raise MirrorError("Nothing to map yet: tune a model in tab ① first.")
        try:
            n, k = int(float(n_points)), int(float(n_clusters))
        except (TypeError, ValueError, OverflowError):
            raise MirrorError("points and clusters must be whole numbers") from None
        if not 10 <= n <= self.settings.max_map_points:
            raise MirrorError(f"points must be between 10 and {self.settings.max_map_points}")
        if not 2 <= k <= 20:
            raise MirrorError("clusters must be between 2 and 20")
        loaded = self.loaded(run)
        texts = loaded.indexes["main:tuned"].texts
        if len(texts) > n:
            picks = np.sort(np.random.default_rng(0).choice(len(texts), size=n, replace=False))
            texts = [texts[i] for i in picks]
        k = min(k, len(texts))
        spaces_ = {"base": loaded.base.encode(texts), "tuned": loaded.tuned.encode(texts)}
        km = faiss.Kmeans(spaces_["tuned"].shape[1], k, niter=20, seed=1234, spherical=True, verbose=False)
        km.min_points_per_centroid = 1
        km.train(spaces_["tuned"])
        _, labels = km.index.search(spaces_["tuned"], 1)
        out: dict[str, list[dict[str, Any]]] = {}
        for name, x in spaces_.items():
            xy = pca_2d(x)
            out[name] = [
                {"x": float(a), "y": float(b), "cluster": f"cluster {int(c) + 1}", "text": t}
                for (a, b), c, t in zip(xy, labels[:, 0], texts, strict=True)
            ]
        return out


def pca_2d(x: Any) -> Any:
    """Project rows onto their first two principal components (sign fixed so runs are reproducible)."""
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    centered = x - x.mean(0)
    _, _, vt = np.linalg.svd(centered, full_matrices=False)
    xy = centered @ vt[:2].T
    for j in range(xy.shape[1]):  # make the largest-magnitude coordinate positive
        if xy[np.abs(xy[:, j]).argmax(), j] < 0:
            xy[:, j] *= -1
    return xy


def _is_under(path: Path, root: Path) -> bool:
    try:
        Path(path).resolve().relative_to(Path(root).resolve())
    except (ValueError, OSError):
        return False
    return True


def _looks_local(model: str) -> bool:
    """Whether a model name is a file-system path rather than a hub id (or the bundled name)."""
    if model.startswith(("/", ".", "~", "\\")) or "\\" in model or model.count("/") > 1:
        return True
    try:
        return Path(model).expanduser().exists()
    except (OSError, ValueError):  # too long for the file system: not a usable path either way
        return True


def _device_and_threads(device: str) -> tuple[str, int]:
    import torch

    if zero_gpu() or (device in ("auto", "cuda") and torch.cuda.is_available()):
        return "cuda", torch.get_num_threads()
    return "cpu", torch.get_num_threads()


class UploadQuota:
    """ASGI middleware: each client (first X-Forwarded-For address, else the peer) may send at most `quota` bytes
    per `window` seconds to Gradio's upload route. Gradio has one global upload size limit, which must admit a
    model zip; this bounds what one anonymous visitor can park on the server's disk with it."""

    def __init__(self, app: Callable, quota: int, window: float = 3600.0):
        self.app, self.quota, self.window = app, quota, window
        self.sent: dict[str, collections.deque[tuple[float, int]]] = {}
        self.lock = threading.Lock()

    def used(self, client: str, now: float) -> int:
        log_ = self.sent.setdefault(client, collections.deque())
        while log_ and now - log_[0][0] > self.window:
            log_.popleft()
        if not log_:
            del self.sent[client]
            return 0
        return sum(n for _, n in log_)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST" or not scope["path"].endswith("/upload"):
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        forwarded = headers.get(b"x-forwarded-for", b"").decode("latin-1").split(",")[0].strip()
        client = forwarded or (scope.get("client") or ("?",))[0]
        length = int(headers.get(b"content-length", b"0") or 0) if headers.get(b"content-length", b"").isdigit() else 0
        now = time.monotonic()
        with self.lock:
            over = self.used(client, now) + length > self.quota
            if not over:
                self.sent.setdefault(client, collections.deque()).append((now, length))
        if over:
            body = f"upload quota reached: at most {fmt_bytes(self.quota)} per hour (MIRROR_UPLOAD_QUOTA_MB)".encode()
            await send({"type": "http.response.start", "status": 429, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": body})
            return None
        return await self.app(scope, receive, send)


# ----------------------------------------------------------------------------------------------- gradio wiring

CSS = """
#mx-header h1 {margin-bottom: 0}
.mx-step {font-weight: 600}
#mx-results table td, #mx-results table th {border: none; border-bottom: 1px solid var(--border-color-primary)}
"""

INTRO = """# Mirror Explorer
Mirror-fine-tune a sentence encoder on **your own strings** — no labels needed (MirrorBERT) — then see what changed:
**① Tune** → **② Search** your strings with the tuned and the base encoder side by side → **③ Evaluate** on word and
sentence similarity benchmarks → **④ Map** the embedding space. Runs on the bundled offline model by default."""


def _loss_frame(losses: Sequence[float]) -> Any:
    import pandas as pd

    return pd.DataFrame({"step": list(range(1, len(losses) + 1)), "loss": [float(x) for x in losses]})


def _load_md(info: dict[str, Any]) -> str:
    stats: CleanStats = info["stats"]
    p = MirrorConfig.preset(info["mode"])
    kind = "single words and short terms" if info["mode"] == "words" else "sentences"
    lines = [
        f"**{info['strings']:,} strings** loaded from `{info['source']}`: {stats.lines:,} lines, "
        f"{stats.empty:,} empty dropped, {stats.duplicates:,} duplicate{'s' if stats.duplicates != 1 else ''} removed.",
        f"**Detected:** {kind} → the **{info['mode']} preset** (τ {p.temperature}, {p.epochs} epoch"
        f"{'s' if p.epochs != 1 else ''}, max length {p.max_length} tokens). <small>{info['reason']}</small>",
    ]
    lines += [message(n, "warning") for n in info.get("notes", [])]
    return "\n\n".join(lines)


def _run_md(run: RunInfo, notes: Sequence[str] = ()) -> str:
    s = run.stats
    first, final = s.get("first_loss"), s.get("final_loss")
    loss = f"{final:.4f} (first step {first:.4f})" if isinstance(final, float) and isinstance(first, float) else "n/a"
    seconds = s.get("seconds")
    rows = [
        ("Device", s.get("device", "n/a")),
        ("Training time", f"{seconds:.1f} s" if isinstance(seconds, (int, float)) else "n/a"),
        ("Steps", f"{s.get('steps', 'n/a')} / {s.get('total_steps', 'n/a')}"),
        ("Final loss", loss),
        ("Strings", f"{run.n_texts:,} from `{run.corpus}`"),
        ("Base model", f"`{run.base_model}` ({run.pooling} pooling), {s.get('mode', '?')} preset"),
    ]
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    extra = "".join("\n\n" + message(n, "warning") for n in list(notes) + list(s.get("notes") or []))
    return (
        f"### Done: your tuned model is served\n| Run | |\n|---|---|\n{table}\n\n"
        f"Both encoders indexed your {run.n_texts:,} strings: try the **② Search** tab. Downloads below.{extra}"
    )


def _served_md(session: Session | None) -> str:
    run = session.run if isinstance(session, Session) else None
    if run is None:
        return message(
            "No tuned model yet: tune one in tab ① (or upload a saved model there), then search here.", "info"
        )
    extra = f" · other corpus: `{run.extra_corpus}`" if run.extra_corpus else ""
    return (
        f"Searching **{run.n_texts:,} strings** from `{run.corpus}` · tuned from `{run.base_model}` "
        f"({run.pooling} pooling) at {time.strftime('%H:%M', time.localtime(run.created))}{extra}"
    )


def setting_component(name: str, value: Any) -> gr.components.Component:
    """The input for one MirrorConfig field, by its kind."""
    kind = ADVANCED[name]
    if kind == "choice":
        return gr.Dropdown(list(CHOICE_FIELDS[name]), value=value, label=label(name), elem_id=f"mx-set-{name}")
    if kind == "bool":
        return gr.Checkbox(value=bool(value), label=label(name), elem_id=f"mx-set-{name}")
    if kind == "str":
        return gr.Textbox(value=value, label=label(name), elem_id=f"mx-set-{name}")
    # max length: no BERT-family model offered here takes more than 512 positions; the engine caps it further
    # at the chosen model's own limit (with a note), for API callers too.
    limit = {"maximum": 512, "minimum": 4} if name == "max_length" else {}
    return gr.Number(
        value=value, label=label(name), precision=0 if kind == "int" else None, elem_id=f"mx-set-{name}", **limit
    )


def build_demo(app: MirrorApp | None = None) -> gr.Blocks:
    """The four-tab UI plus the /train and /search API endpoints; `app` defaults to one built from the env."""
    app = app or MirrorApp()
    settings = app.settings
    private = {"api_visibility": "private"}
    train_queue = {"concurrency_id": "train", "concurrency_limit": settings.train_concurrency}
    encode_queue = {"concurrency_id": "encode", "concurrency_limit": 2}

    with gr.Blocks(title="Mirror Explorer", delete_cache=(3600, int(settings.session_ttl))) as demo:
        # A plain function, not the bound method: Gradio deep-copies the config (on every /config request), and a
        # bound method's copy walks into the app and its loaded models (0.7 s and +100 MB per request).
        state = gr.State(None, time_to_live=settings.session_ttl, delete_callback=lambda s: app.close_session(s))
        gr.Markdown(INTRO, elem_id="mx-header")

        with gr.Tabs():
            # ---------------------------------------------------------------- tab 1
            with gr.Tab("① Tune", id="tune"):
                with gr.Row(equal_height=False):
                    with gr.Column(scale=3):
                        gr.Markdown("### 1. Your strings", elem_classes="mx-step")
                        with gr.Tabs():
                            with gr.Tab("Upload a file"):
                                upload = gr.File(
                                    label="A .txt (one string per line), .csv / .tsv or .jsonl file",
                                    file_types=list(SUFFIXES),
                                    type="filepath",
                                    elem_id="mx-upload",
                                )
                                column = gr.Dropdown(
                                    label="Text column", choices=[], visible=False, elem_id="mx-column"
                                )
                            with gr.Tab("Paste"):
                                pasted = gr.Textbox(
                                    label="One string per line",
                                    lines=8,
                                    max_lines=16,
                                    placeholder="cat\ndog\nkitten\n…",
                                    elem_id="mx-paste",
                                )
                                paste_btn = gr.Button("Use these strings", elem_id="mx-paste-btn")
                            with gr.Tab("Examples"):
                                example = gr.Radio(
                                    [(label, key) for key, (label, _) in EXAMPLES.items()],
                                    value="small",
                                    label="Bundled examples",
                                )
                                example_btn = gr.Button("Load example", elem_id="mx-example-btn")
                        input_md = gr.Markdown(
                            "Load some strings: upload a file, paste them, or pick an example.", elem_id="mx-input"
                        )
                    with gr.Column(scale=2):
                        gr.Markdown("### 2. Base model and settings", elem_classes="mx-step")
                        model = gr.Dropdown(
                            HUB_MODELS,
                            value=BUNDLED_MODEL,
                            allow_custom_value=True,
                            label="Base model",
                            info="Pick one or type a Hugging Face model id (hub models need internet access).",
                            elem_id="mx-model",
                        )
                        mode = gr.Radio(MODES, value="auto", label="Preset")
                        with gr.Accordion("Advanced settings", open=False):
                            gr.Markdown(
                                "Every setting of the engine. *Pooling* auto keeps the model's own ([CLS] for plain "
                                "BERT checkpoints); each string is contrasted with the other 2B−2 views of its batch; "
                                "the second view masks k characters of strings at least *mask from* long. Loading "
                                "strings (preset *Auto*) or changing the preset resets these to the preset's values."
                            )
                            fields: dict[str, gr.components.Component] = {}
                            preset = MirrorConfig.preset("words")
                            names = list(ADVANCED)
                            for i in range(0, len(names), 2):
                                with gr.Row():
                                    for name in names[i : i + 2]:
                                        fields[name] = setting_component(name, getattr(preset, name))
                gr.Markdown("### 3. Tune", elem_classes="mx-step")
                estimate_md = gr.Markdown(
                    "Load some strings to see the plan and a time estimate.", elem_id="mx-estimate"
                )
                with gr.Row():
                    launch = gr.Button("Launch mirror tuning", variant="primary", scale=4, elem_id="mx-launch")
                    cancel = gr.Button("Cancel", variant="secondary", scale=1, elem_id="mx-cancel")
                status_md = gr.HTML("", elem_id="mx-status")
                loss_plot = gr.LinePlot(
                    _loss_frame([]),
                    x="step",
                    y="loss",
                    title="Training loss (InfoNCE)",
                    height=260,
                    visible=False,
                    elem_id="mx-loss",
                )
                result_md = gr.Markdown("", elem_id="mx-result")
                with gr.Row():
                    model_file = gr.File(
                        label="Tuned model (.zip of a sentence-transformers folder)",
                        interactive=False,
                        visible=False,
                        elem_id="mx-model-zip",
                    )
                    index_file = gr.File(
                        label="Search index of your strings (.zip)",
                        interactive=False,
                        visible=False,
                        elem_id="mx-index-zip",
                    )
                with gr.Accordion("Reuse a model you tuned here before", open=False):
                    gr.Markdown(
                        "Load your strings in step 1, then upload the model .zip you downloaded: both encoders index them."
                    )
                    saved_zip = gr.File(
                        label="Tuned model .zip",
                        file_types=[".zip"],
                        type="filepath",
                        height=150,
                        elem_id="mx-saved-zip",
                    )
                    saved_md = gr.Markdown("")

            # ---------------------------------------------------------------- tab 2
            with gr.Tab("② Search", id="search"):
                served_md = gr.Markdown(_served_md(None), elem_id="mx-served")
                with gr.Row():
                    queries = gr.Textbox(
                        label="Queries (one per line)",
                        lines=3,
                        placeholder="kitten\nsad",
                        scale=4,
                        elem_id="mx-queries",
                    )
                    with gr.Column(scale=1):
                        k = gr.Slider(1, MAX_K, value=10, step=1, label="Hits per query (k)")
                        corpus = gr.Radio(
                            [("Your strings", "main"), ("Other corpus", "extra")], value="main", label="Search in"
                        )
                search_btn = gr.Button("Search", variant="primary", elem_id="mx-search-btn")
                results = gr.HTML("", elem_id="mx-search-results")
                with gr.Accordion("Search another corpus with your tuned encoder", open=False):
                    other = gr.File(
                        label="A .txt, .csv/.tsv or .jsonl file",
                        file_types=list(SUFFIXES),
                        type="filepath",
                        height=150,
                        elem_id="mx-other",
                    )
                    other_column = gr.Textbox(label="Text column (for .csv/.tsv/.jsonl; empty = detect)")
                    other_btn = gr.Button("Index it", elem_id="mx-other-btn")
                    other_md = gr.Markdown("")

            # ---------------------------------------------------------------- tab 3
            with gr.Tab("③ Evaluate", id="evaluate"):
                gr.Markdown(
                    "Spearman correlation between cosine similarity and human scores, **before and after** tuning. "
                    "SimLex-999 and WordSim-353 suit word models, STS-B dev suits sentence models. A pairs file is "
                    "`w1 w2 score`, `s1<TAB>s2<TAB>score` or the STS-B layout, one pair per line."
                )
                with gr.Row():
                    gold = gr.CheckboxGroup(list(GOLD_SETS), value=["SimLex-999", "WordSim-353"], label="Gold sets")
                    pairs = gr.File(
                        label="…or your own pairs file",
                        file_types=[".txt", ".tsv", ".csv"],
                        type="filepath",
                        height=150,
                    )
                eval_btn = gr.Button("Evaluate", variant="primary", elem_id="mx-eval-btn")
                eval_md = gr.Markdown("")
                eval_table = gr.Dataframe(interactive=False, elem_id="mx-eval-table")
                eval_plot = gr.BarPlot(
                    None,
                    x="bar",
                    y="spearman",
                    color="encoder",
                    title="Spearman ρ (higher is better)",
                    x_title="gold set · encoder",
                    height=320,
                    elem_id="mx-eval-plot",
                )

            # ---------------------------------------------------------------- tab 4
            with gr.Tab("④ Map", id="map"):
                gr.Markdown(
                    "A 2-D PCA of a sample of your strings, embedded by the base and the tuned encoder. Colours are k-means "
                    "clusters of the **tuned** space, used on both maps so a colour is the same group. Hover a point to read it."
                )
                with gr.Row():
                    n_points = gr.Slider(
                        50, settings.max_map_points, value=min(1000, settings.max_map_points), step=50, label="Strings"
                    )
                    n_clusters = gr.Slider(2, 20, value=8, step=1, label="Clusters")
                map_btn = gr.Button("Draw the map", variant="primary", elem_id="mx-map-btn")
                map_md = gr.Markdown("")
                with gr.Row():
                    map_base = gr.ScatterPlot(
                        None,
                        x="x",
                        y="y",
                        color="cluster",
                        tooltip=["text", "cluster"],
                        title="Base encoder",
                        height=420,
                    )
                    map_tuned = gr.ScatterPlot(
                        None,
                        x="x",
                        y="y",
                        color="cluster",
                        tooltip=["text", "cluster"],
                        title="Tuned encoder",
                        height=420,
                    )

        # ---------------------------------------------------------------- API-only endpoints (gradio_client)
        with gr.Column(visible=False):
            api_texts = gr.Textbox(value="", label="texts")
            api_file = gr.File(label="file", type="filepath")
            api_column = gr.Textbox(value="", label="column")
            api_model = gr.Textbox(value=BUNDLED_MODEL, label="model")
            api_mode = gr.Textbox(value="auto", label="mode")
            api_settings = gr.JSON(value={}, label="settings")
            api_train_out = gr.JSON(label="run")
            api_model_zip = gr.File(label="model zip")
            api_index_zip = gr.File(label="index zip")
            api_queries = gr.Textbox(label="queries")
            api_k = gr.Number(value=10, precision=0, label="k")
            api_search_out = gr.JSON(label="results")
            api_train_btn = gr.Button()
            api_search_btn = gr.Button()
            api_cancel_out = gr.Textbox(label="cancelled")
            api_cancel_btn = gr.Button()

        field_list = list(fields.values())

        # ---------------------------------------------------------------- handlers (thin Gradio adapters)

        def preset_updates(resolved: str) -> list[Any]:
            p = MirrorConfig.preset(resolved)
            return [gr.update(value=getattr(p, name)) for name in fields]

        def after_load(
            info: dict[str, Any] | None, session: Session, mode_value: str, model_value: str, error: str | None, *vals
        ):
            overrides = dict(zip(fields, vals, strict=True))
            if error is not None:
                gr.Warning(error)
                return [message(error), *[gr.update() for _ in fields], gr.update(), session]
            updates = [gr.update() for _ in fields]
            if mode_value == "auto":
                updates = preset_updates(info["mode"])
                p = MirrorConfig.preset(info["mode"])
                overrides = {name: getattr(p, name) for name in fields}
            estimate = app.estimate(session, model_value, mode_value, overrides)
            return [_load_md(info), *updates, estimate, session]

        load_outputs = [input_md, *field_list, estimate_md, state]

        def on_upload(path, col, mode_value, model_value, s, *vals):
            session = app.session(s)
            if not path:
                return [
                    gr.update(),
                    gr.update(choices=[], value=None, visible=False),
                    *[gr.update() for _ in fields],
                    gr.update(),
                    session,
                ]
            try:
                info = app.load_file(session, path, None)
                col_update = gr.update(
                    choices=[("(detect)", "")] + [(c, c) for c in info["columns"]],
                    value="",
                    visible=bool(info["columns"]),
                )
                out = after_load(info, session, mode_value, model_value, None, *vals)
            except Exception as exc:  # MirrorError, or a bug: a message, never a traceback
                cols = getattr(exc, "columns", [])
                col_update = gr.update(
                    choices=[("(detect)", "")] + [(c, c) for c in cols], value="", visible=bool(cols)
                )
                out = after_load(None, session, mode_value, model_value, user_error(exc), *vals)
            return [out[0], col_update, *out[1:]]

        def on_column(path, col, mode_value, model_value, s, *vals):
            session = app.session(s)
            if not path:
                return [gr.update(), *[gr.update() for _ in fields], gr.update(), session]
            try:
                info = app.load_file(session, path, col or None)
                return after_load(info, session, mode_value, model_value, None, *vals)
            except Exception as exc:  # MirrorError, or a bug: a message, never a traceback
                return after_load(None, session, mode_value, model_value, user_error(exc), *vals)

        def on_paste(text, mode_value, model_value, s, *vals):
            session = app.session(s)
            try:
                return after_load(app.load_pasted(session, text), session, mode_value, model_value, None, *vals)
            except Exception as exc:  # MirrorError, or a bug: a message, never a traceback
                return after_load(None, session, mode_value, model_value, user_error(exc), *vals)

        def on_example(key, mode_value, model_value, s, *vals):
            session = app.session(s)
            try:
                return after_load(app.load_example(session, key), session, mode_value, model_value, None, *vals)
            except Exception as exc:  # MirrorError, or a bug: a message, never a traceback
                return after_load(None, session, mode_value, model_value, user_error(exc), *vals)

        settings_inputs = [mode, model, state, *field_list]
        upload.change(on_upload, [upload, column, *settings_inputs], [input_md, column, *load_outputs[1:]], **private)
        column.input(on_column, [upload, column, *settings_inputs], load_outputs, **private)
        paste_btn.click(on_paste, [pasted, *settings_inputs], load_outputs, **private)
        example_btn.click(on_example, [example, *settings_inputs], load_outputs, **private)

        def on_mode(mode_value, model_value, s, *vals):
            session = app.session(s)
            resolved = mode_value if mode_value != "auto" else (session.detected_mode if session.texts else "words")
            p = MirrorConfig.preset(resolved)
            overrides = {name: getattr(p, name) for name in fields}
            return [*preset_updates(resolved), app.estimate(session, model_value, mode_value, overrides), session]

        mode.input(on_mode, settings_inputs, [*field_list, estimate_md, state], **private)

        def on_settings(mode_value, model_value, s, *vals):
            session = app.session(s)
            return app.estimate(session, model_value, mode_value, dict(zip(fields, vals, strict=True))), session

        gr.on(
            [model.change, *[f.input for f in field_list]],
            on_settings,
            settings_inputs,
            [estimate_md, state],
            show_progress="hidden",
            **private,
        )

        def on_request(s):
            session = app.session(s)
            app.request_run(session)
            return status_box("Waiting for a free training slot…"), gr.update(interactive=False), session

        def on_train(data: dict, progress=gr.Progress()):  # noqa: B008 - gradio's progress idiom
            """Stream the run to the page: progress bar, live loss curve; then summary and downloads."""
            session = app.session(data[state])
            overrides = {name: data[comp] for name, comp in fields.items()}
            losses: list[float] = []
            last = 0.0
            status = status_box("Starting…")

            def plot(values: Sequence[float]) -> Any:
                return gr.update(value=_loss_frame(values), visible=len(values) > 1)  # a curve needs two points

            def final(box: str, curve: Sequence[float], more: dict | None = None) -> dict:
                done = {status_md: box, loss_plot: plot(curve), launch: gr.update(interactive=True), state: session}
                return {**done, **(more or {})}

            for ev in app.train(session, data[model], data[mode], overrides):
                kind = ev["kind"]
                if kind == "phase":
                    total = ev.get("total") or 0
                    if total:
                        progress((ev["done"], total), desc=ev["text"], unit="strings")
                        right = f"{ev['done']:,} / {total:,} strings"
                        status = progress_bar(f"<b>{html.escape(ev['text'])}…</b>", ev["done"], total, right)
                    else:
                        progress(None, desc=ev["text"])
                        status = status_box(f"**{ev['text']}…**")
                elif kind == "note":
                    gr.Warning(ev["text"])
                elif kind == "step":
                    losses.append(ev["loss"])
                    eta = f"ETA {fmt_seconds(ev['eta'])}" if ev["eta"] is not None else "estimating time left…"
                    label = f"<b>Training</b> · step {ev['step']:,} / {ev['total']:,} · loss {ev['loss']:.4f}"
                    status = progress_bar(label, ev["step"], ev["total"], eta)
                    progress((ev["step"], ev["total"]), desc=f"Training · loss {ev['loss']:.3f} · {eta}", unit="steps")
                elif kind == "error":
                    gr.Warning(ev["text"])
                    yield final(status_box(ev["text"], "error"), losses)
                    return
                elif kind == "cancelled":
                    kept = " Your previous model and index are still served." if session.run else ""
                    yield final(status_box(ev["text"] + kept, "warning"), losses or ev.get("losses", []))
                    return
                elif kind == "done":
                    run: RunInfo = ev["run"]
                    words = run.stats.get("mode") != "sentences"
                    yield final(
                        status_box(f"Tuned and indexed in {run.stats.get('wall_seconds', 0):.0f} s.", "ok"),
                        run.losses,
                        {
                            result_md: _run_md(run),
                            model_file: gr.update(value=str(run.model_zip), visible=True),
                            index_file: gr.update(value=str(run.index_zip), visible=True),
                            served_md: _served_md(session),
                            gold: ["SimLex-999", "WordSim-353"] if words else ["STS-B dev"],
                        },
                    )
                    return
                now = time.monotonic()
                if now - last >= 0.5:
                    last = now
                    yield {status_md: status, loss_plot: plot(losses)} if losses else {status_md: status}
            yield final(status_box("The run ended without a result.", "error"), losses)

        train_outputs = [status_md, loss_plot, result_md, model_file, index_file, served_md, gold, launch, state]
        launch.click(on_request, [state], [status_md, launch, state], queue=False, **private).then(
            on_train, set(settings_inputs), train_outputs, show_progress="hidden", **train_queue, **private
        )

        def on_cancel(s):
            session = app.session(s)
            return status_box(app.cancel(session)), session

        cancel.click(on_cancel, [state], [status_md, state], queue=False, **private)

        def on_saved_zip(path, s, progress=gr.Progress()):  # noqa: B008
            session = app.session(s)
            no = gr.update()
            if not path:
                return no, no, no, no, no, no, session
            for ev in app.use_saved_model(session, path):
                if ev["kind"] == "phase":
                    progress(None, desc=ev["text"])
                elif ev["kind"] == "error":
                    gr.Warning(ev["text"])
                    return message(ev["text"]), no, no, no, no, no, session
                elif ev["kind"] == "done":
                    run = ev["run"]
                    return (
                        message(f"Serving `{display_name(path)}`.", "ok"),
                        _run_md(run),
                        gr.update(value=str(run.model_zip), visible=True),
                        gr.update(value=str(run.index_zip), visible=True),
                        gr.update(value=_loss_frame(run.losses), visible=bool(run.losses)),
                        _served_md(session),
                        session,
                    )
            return no, no, no, no, no, no, session

        saved_zip.upload(
            on_saved_zip,
            [saved_zip, state],
            [saved_md, result_md, model_file, index_file, loss_plot, served_md, state],
            **train_queue,
            **private,
        )

        def on_search(q, k_value, corpus_value, s):
            session = app.session(s)
            try:
                found = app.search(session, q, k_value, corpus_value)
            except Exception as exc:  # MirrorError, or a bug: a message, never a traceback
                gr.Warning(user_error(exc))
                return message(user_error(exc)), session
            label = session.run.base_model if session.run else BUNDLED_MODEL
            return render_results(found, label), session

        search_inputs = [queries, k, corpus, state]
        search_btn.click(on_search, search_inputs, [results, state], concurrency_limit=None, **private)
        queries.submit(on_search, search_inputs, [results, state], concurrency_limit=None, **private)

        def on_other(path, col, s, progress=gr.Progress()):  # noqa: B008
            session = app.session(s)
            try:
                progress(None, desc="Indexing with both encoders")
                text = app.index_corpus(session, path, (col or "").strip() or None)
                return message(text, "ok"), gr.update(value="extra"), _served_md(session), session
            except Exception as exc:  # MirrorError, or a bug: a message, never a traceback
                gr.Warning(user_error(exc))
                return message(user_error(exc)), gr.update(), gr.update(), session

        other_btn.click(
            on_other, [other, other_column, state], [other_md, corpus, served_md, state], **encode_queue, **private
        )

        def on_eval(gold_value, pairs_path, s, progress=gr.Progress()):  # noqa: B008
            import pandas as pd

            session = app.session(s)
            try:
                progress(None, desc="Encoding the pairs")
                rows = app.evaluate(session, gold_value, pairs_path)
            except Exception as exc:  # MirrorError, or a bug: a message, never a traceback
                gr.Warning(user_error(exc))
                return message(user_error(exc)), gr.update(), gr.update(), session
            # one bar per (set, encoder), side by side: BarPlot would stack bars that share an x value
            bars = [
                {"bar": f"{r['gold set']} · {enc}", "encoder": enc, "spearman": r[enc]}
                for r in rows
                for enc in ("base", "tuned")
                if enc in r
            ]
            note = "" if session.run else " (no tuned model yet: showing the bundled base model only)"
            return (
                message(f"Evaluated {len(rows)} set{'s' if len(rows) != 1 else ''}{note}.", "ok"),
                pd.DataFrame([{**r, "change": f"{r['change']:+.4f}"} if "change" in r else r for r in rows]),
                pd.DataFrame(bars),
                session,
            )

        eval_btn.click(
            on_eval, [gold, pairs, state], [eval_md, eval_table, eval_plot, state], **encode_queue, **private
        )

        def on_map(n_value, k_value, s, progress=gr.Progress()):  # noqa: B008
            import pandas as pd

            session = app.session(s)
            try:
                progress(None, desc="Embedding and clustering")
                maps = app.project(session, n_value, k_value)
            except Exception as exc:  # MirrorError, or a bug: a message, never a traceback
                gr.Warning(user_error(exc))
                return message(user_error(exc)), gr.update(), gr.update(), session
            n = len(maps["tuned"])
            return (
                message(f"{n:,} strings, PCA of each space.", "ok"),
                pd.DataFrame(maps["base"]),
                pd.DataFrame(maps["tuned"]),
                session,
            )

        map_btn.click(
            on_map, [n_points, n_clusters, state], [map_md, map_base, map_tuned, state], **encode_queue, **private
        )

        # ---------------------------------------------------------------- named API endpoints

        def api_train(
            texts: str = "",
            file: str | None = None,
            column: str = "",
            model: str = BUNDLED_MODEL,
            mode: str = "auto",
            settings: dict | None = None,
            s: Session | None = None,
        ):
            """Mirror-tune on `texts` (one string per line) or an uploaded `file` (.txt/.csv/.tsv/.jsonl, text
            `column` optional); `model` is 'bundled' or a hub id, `mode` auto|words|sentences, `settings` any
            MirrorConfig fields (e.g. {"max_steps": 20}). Returns the run summary, the model zip and the index zip.
            The tuned model then serves /search for this client's session."""
            session = app.session(s)

            def fail(text: str) -> gr.Error:
                if session is not s:  # a client's first call failed: its new session folder is never reused
                    app.close_session(session)
                return gr.Error(text)

            try:
                if file:
                    info = app.load_file(session, file, (column or "").strip() or None)
                else:
                    info = app.load_pasted(session, texts)
                if settings is not None and not isinstance(settings, dict):
                    raise MirrorError('settings must be a JSON object such as {"max_steps": 20}')
            except Exception as exc:  # MirrorError, or a bug: a message either way
                raise fail(user_error(exc)) from None
            notes = list(info.get("notes", []))
            progress: dict[str, Any] = {"status": "queued"}
            last, first = 0.0, True
            # A generator: the client gets the session state (and the run id) at once, so its /cancel reaches the
            # run, and a disconnected or cancelled client stops pulling events, which stops the run.
            for ev in app.train(session, model or BUNDLED_MODEL, mode or "auto", dict(settings or {})):
                kind = ev["kind"]
                if kind in ("error", "cancelled"):
                    raise fail(ev["text"])
                if kind == "note":
                    notes.append(ev["text"])
                elif first and session.active is not None:  # the state goes out now: /cancel can reach the run
                    progress = {"status": "running", "run_id": session.active.id}
                    first = False
                    yield progress, None, None, session
                if kind == "step":
                    progress.update(step=ev["step"], total_steps=ev["total"], loss=ev["loss"])
                elif kind == "done":
                    run: RunInfo = ev["run"]
                    summary = {**run.stats, "base_model": run.base_model, "strings": run.n_texts, "losses": run.losses}
                    summary["notes"] = notes + list(run.stats.get("notes") or [])
                    summary["run_id"] = progress.get("run_id")
                    yield summary, str(run.model_zip), str(run.index_zip), session
                    return
                if time.monotonic() - last >= 1.0:
                    last = time.monotonic()
                    yield progress, None, None, session
            raise fail("the run ended without a result")

        def api_cancel(s: Session | None = None):
            """Stop this client's run (from another call of the same Client while /train runs)."""
            if not isinstance(s, Session):
                return "Nothing is running.", s
            return app.cancel(s), s

        def api_search(queries: str, k: float = 10, s: Session | None = None):
            """Top-k hits (k <= 50) per query (one per line) with the tuned and the base encoder of this client's
            last /train run: [{query, tuned: [{rank, text, score, only_here}], base: [...]}]."""
            session = app.session(s)
            try:
                return app.search(session, queries, k), session
            except Exception as exc:  # MirrorError, or a bug: a message either way
                if session is not s:
                    app.close_session(session)
                raise gr.Error(user_error(exc)) from None

        api_train_btn.click(
            api_train,
            [api_texts, api_file, api_column, api_model, api_mode, api_settings, state],
            [api_train_out, api_model_zip, api_index_zip, state],
            api_name="train",
            **train_queue,
        )
        api_search_btn.click(
            api_search, [api_queries, api_k, state], [api_search_out, state], api_name="search", concurrency_limit=None
        )
        api_cancel_btn.click(api_cancel, [state], [api_cancel_out, state], api_name="cancel", queue=False)

    demo.queue(default_concurrency_limit=2)
    return demo


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Serve the Mirror Explorer web app.")
    parser.add_argument(
        "--host",
        default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        help="default: $GRADIO_SERVER_NAME or 127.0.0.1",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        help="default: $GRADIO_SERVER_PORT or 7860",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        app = MirrorApp(Settings.from_env())
    except MirrorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    app.sweep(force=True)
    demo = build_demo(app)
    # Warm the bundled model in the background: the page is served at once, the first run starts sooner.
    threading.Thread(target=app.warm_up, name="mirror-warm-up", daemon=True).start()
    from starlette.middleware import Middleware

    # Gradio has one upload size limit for every input; it must admit a model zip, so what one client may send
    # in an hour is bounded separately (UploadQuota). The files handlers return are served by Gradio; nothing
    # else of the work folder is (no allowed_paths).
    limit = max(app.settings.max_upload_bytes, app.settings.max_model_bytes)
    quota = Middleware(UploadQuota, quota=app.settings.upload_quota_bytes)
    demo.launch(
        server_name=args.host,
        server_port=args.port,
        max_file_size=limit,
        css=CSS,
        show_error=False,
        app_kwargs={"middleware": [quota]},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
