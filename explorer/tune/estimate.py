"""Time estimates for a run before it starts: the plan mirror.train will run, priced with costs timed on this machine.

The first estimate for a (model, pooling, device, precision, threads) key calibrates (`calibrate`): a few real
mirror training steps (`mirror_tune` on a throwaway copy of the base encoder, synthetic strings at a few padded
lengths), a few encode batches with the base encoder, and a save, zip and reload of the copy. A step and an encode
batch are each fitted as a + b * tokens (strings x padded length); the job's own plan (mirror.train's batches,
length bucketing and memory splits; encode's length-sorted batches) is then priced phase by phase (`price`). The
first guess from string lengths (shown before a calibration, and the ZeroGPU reservation): explorer/tune/guess.py.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import statistics
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, TypeVar

from explorer.tune.checkcost import forgetting_lengths
from explorer.tune.steps import choice_price, steps_price, train_plan
from mirror.config import MirrorConfig

if TYPE_CHECKING:
    from mirror.encoder import Encoder

Clock = Callable[[], float]
T = TypeVar("T")

# The general checks after a run (and a pairs run's blend choice, on their dev halves) encode their distinct strings
# with the base and the tuned encoder: counted with its tokenizer (forgetting_lengths), the price follows the checks.
FORGETTING_ENCODERS = 2
ENCODE_BATCH = 128  # VectorIndex.build's batch size
# Training steps are timed at the padded length the job's steps have (rounded to a power of 2: a calibration per
# length class, as a token costs ~3x more at 48 tokens than at 5 on the bundled model), with two batch sizes of
# about these many tokens (a line through two points), in one short mirror_tune. Encode batches at three shapes
# (strings, padded tokens): a token costs more in longer strings (attention), so the encode fit has a tokens x
# length term. Small enough that calibrating the bundled model takes a few seconds on 2 quiet CPU cores.
TRAIN_TOKENS = (256, 1024)
# 256: the general checks' long documents pad to 150-256, in batches of CPU_BATCH_TOKENS (16 strings at 256)
ENCODE_SHAPES = ((128, 8), (64, 32), (16, 128), (16, 256))
# Epochs of the timing run (one batch of each size per epoch); the first WARM_EPOCHS pay the warm-up (optimiser
# states, allocations and kernels for new shapes: mostly the first step), the rest are timed (the fastest sample of
# each size counts). 4 and 1 rather than 5 and 2: the calibration must cost less than the small run it prices.
TIMED_EPOCHS, WARM_EPOCHS = 4, 1
PHASES = ("load", "base index", "training", "blend choice", "save", "tuned index", "downloads", "general checks")
IO_PHASES = ("load", "save", "downloads")  # disk and zip: not scaled by the CPU's speed now

# A calibration timed while the machine is this busy (load average per core) says so: on 2 cores shared with other
# work, one 6-step run of the small example took 2.7 to 21 s at a load average of 7-9 (bench/RESULTS.md). A server's
# own warm-up showed 0.25-0.6 per core there; beside one other 2-thread torch job 1.35 (the run took 3.1x its price).
BUSY_LOAD = 1.0
# What the machine gives now, against what it gave when calibrated: one small encode batch (strings, words), timed
# PROBE_REPEATS times (the median) right after a calibration and again with every later estimate (the bundled model:
# ~0.02 s a batch on 2 quiet AVX2 cores, 0.1-0.6 s at a load average of 5: oversubscribed threads wait on each other).
# On a 2-core machine shared with other work the same run took 2-6x its price in both directions (issue 36): the
# ratio scales the compute phases, and the page shows the range between the two speeds.
PROBE_SHAPE = (16, 12)
PROBE_REPEATS = 5
# A probe taken this recently answers for the same model again: the plans a page asks for seconds apart (a file as
# .csv then .txt, a setting changed, a capped plan) are priced at one speed, not at each probe's own noise (the same
# strings read "~28 min" then "56 min" 20 s apart, and "25 min" then "~42 min" 5 s apart, on a busy machine).
PROBE_FRESH_S = 15.0
SPEED_SHOWN = 1.3  # a speed this far from the calibration's (either way) is shown, with the range it spans
PROBE_MIN_S = 0.005  # a probe quicker than this (a tiny model) is timer noise: not used
CHECKS_TIMED_MAX = 2.0  # Estimator.checks_timed: quiet, the warm-up's timing of the checks is ~1.3-1.7x the fit


@dataclass(frozen=True)
class Fit:
    """Seconds of one call as a + b * tokens + c * tokens * length (tokens: strings x padded length), least squares
    over timed calls; c (attention's share, which grows with the length) only where calls of several lengths were
    timed."""

    a: float
    b: float
    c: float = 0.0

    def __call__(self, tokens: float, length: float = 0.0) -> float:
        return self.a + self.b * tokens + self.c * tokens * length

    @staticmethod
    def of(points: Sequence[tuple[float, float, float]]) -> Fit:
        """The fit of (tokens, length, seconds) points, every term kept >= 0 (noise must not make a cost negative):
        a term that comes out negative is dropped and the rest refitted."""
        import numpy as np

        rows = np.array([[1.0, t, t * n] for t, n, _ in points])
        y = np.array([s for _, _, s in points])
        terms = [0, 1, 2] if len({n for _, n, _ in points}) >= 2 and len(points) >= 3 else [0, 1]
        while True:
            coef = np.linalg.lstsq(rows[:, terms], y, rcond=None)[0] if terms else np.zeros(0)
            if len(terms) <= 1 or (coef >= 0).all():
                break
            terms.pop(int(np.argmin(coef)))
        full = dict.fromkeys((0, 1, 2), 0.0) | {t: max(0.0, float(v)) for t, v in zip(terms, coef, strict=True)}
        return Fit(full[0], full[1], full[2])


@dataclass(frozen=True)
class Calibration:
    """Costs timed on this machine for one (model, pooling, device, precision, threads)."""

    step: Fit  # one training step (forward + backward + optimiser, both views)
    encode: Fit  # one inference batch of Encoder.encode
    warmup_s: float  # what a run's first step costs beyond a steady one (optimiser states, kernels for new shapes)
    load_s: float  # loading the model from its folder
    save_s: float  # writing the tuned model
    zip_s: float  # zipping it for the download
    seconds: float  # how long calibrating took
    where: str  # "CPU (2 threads, bf16)"
    load: float = 0.0  # the load average per CPU core while it was timed (0: not known)
    cleanup_s: float = 0.0  # the end of every job: garbage collected, freed heap handed back (release_memory)
    probe_s: float = 0.0  # speed_probe's seconds right after calibrating (0: not taken)


@dataclass(frozen=True)
class Estimate:
    """A job's planned steps and its seconds phase by phase (PHASES order); `calibration` None: a rough guess."""

    steps: int
    phases: tuple[tuple[str, float], ...]
    calibration: Calibration | None
    fresh: bool = False  # calibrated by this very call
    key: tuple = ()  # the Estimator key it was priced under (for `observe` once the run has run)
    slower: float = 1.0  # how many times slower the machine is now than when calibrated (its compute phases scaled)
    quiet: float = 1.0  # how many times slower the machine is now than at its quickest probe here (>= 1)
    busy: bool = False  # other work shares the machine now (load average per core >= BUSY_LOAD)
    split: int = 0  # batches of long strings split to fit the memory the plan is priced with (more, smaller steps)
    memory: int = 0  # that memory (bytes; 0: a rough guess, not planned with one)
    unsplit: int = 0  # the steps the run would take with no batch split (0: none is split)
    # a pairs run whose general checks hold its blend down trains once more (mirror.job._train_again: retry_anchor):
    # that training and its blend choice, priced; not in `total` (most runs do not), said beside it (ui.plan_md)
    retry: float = 0.0
    borrowed: int = 0  # priced with this model's calibration here at steps of this length (not its own: not yet made)

    @property
    def at_calibration(self) -> float:
        """The total at the calibration's speed."""
        return sum(s if name in IO_PHASES else s / self.slower for name, s in self.phases)

    @property
    def at_quietest(self) -> float:
        """The total at the quickest speed this process measured here: the low end of the range a busy machine
        shows (the run takes that if the other work stops)."""
        return sum(s if name in IO_PHASES else s / self.quiet for name, s in self.phases)

    @property
    def total(self) -> float:
        return sum(s for _, s in self.phases)

    def phase(self, name: str) -> float:
        """One phase's seconds; 0 for a phase this estimate does not have (made before it was priced)."""
        return dict(self.phases).get(name, 0.0)


# ---------------------------------------------------------------------------------------------- calibration


def synthetic_texts(n: int, words: int) -> list[str]:
    """`n` distinct strings of at least `words` + 1 words (each string's own number first)."""
    return [f"{i} " + " ".join(["the"] * words) for i in range(n)]


def train_shapes(length: int) -> list[tuple[int, int]]:
    """(strings, padded tokens) of the timed training steps for steps padded to about `length` tokens."""
    small = max(2, TRAIN_TOKENS[0] // length)
    return [(small, length), (max(small + 2, TRAIN_TOKENS[1] // length), length)]


def length_class(padded: Sequence[int]) -> int:
    """The power of 2 nearest the median padded length of a job's steps (at least 4): its calibration's key."""
    if not padded:
        return 8
    return max(4, 2 ** round(math.log2(max(1.0, statistics.median(padded)))))


def calibrate(
    base: Encoder,
    config: MirrorConfig,
    scratch: Path,
    clock: Clock = time.perf_counter,
    length: int = 8,
    like: Calibration | None = None,
) -> Calibration:
    """Time real training steps (padded to `length` tokens), encode batches, a save, a zip and a load of
    `config`'s model on this machine.

    `base` is only read (encoded with): the steps train a deep copy. `scratch` is a folder for the saved copy,
    removed after. Takes a few seconds for the bundled model on 2 CPU cores. Timed in a thread of its own, as a run
    trains in one (its run's, runs.execute): a step there took ~20% longer than in the main thread (bench/RESULTS.md).
    `like`: the calibration of the same model at another padded length: its encodes, save, zip, load and probe hold
    for this one too (none depends on the training length), so only the training steps are timed."""
    return in_fresh_thread(lambda: _calibrate(base, config, scratch, clock, length, like))


def in_fresh_thread(fn: Callable[[], T], name: str = "mirror-calibrate") -> T:
    """`fn()` run in a new thread, waited for: its result, or its exception raised here."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix=name) as pool:
        return pool.submit(fn).result()


def speed_probe(base: Encoder, clock: Clock = time.perf_counter) -> float:
    """Seconds of one small encode batch (PROBE_SHAPE) with `base`, the median of PROBE_REPEATS: what the machine
    gives now. Compared with the same probe taken right after calibrating (Calibration.probe_s)."""
    n, words = PROBE_SHAPE
    texts = synthetic_texts(n, words)
    times = []
    for _ in range(PROBE_REPEATS):
        t = clock()
        base.encode(texts, batch_size=n)
        times.append(clock() - t)
    return statistics.median(times)


def _calibrate(
    base: Encoder, config: MirrorConfig, scratch: Path, clock: Clock, length: int, like: Calibration | None = None
) -> Calibration:
    from explorer.resources.models import release_memory
    from explorer.share.uploads import zip_folder
    from mirror.encoder import load_encoder, resolve_device, resolve_precision, save_encoder
    from mirror.train import mirror_tune

    started = clock()
    device = resolve_device(config.device)
    throwaway = copy.deepcopy(base)
    length = max(4, min(length, throwaway.token_limit))
    (small, _), (big, _) = train_shapes(length)
    # One run (one warm-up): each epoch is a batch of `big` strings, then one of `small` (no bucketing, so in that
    # order), every string truncated to `length` tokens.
    cfg = dataclasses.replace(
        config, batch_size=big, max_length=length, epochs=TIMED_EPOCHS, max_steps=2 * TIMED_EPOCHS, log_every=1
    )
    cfg = dataclasses.replace(cfg, bucket_by_length=False, compile=False)  # a compile is not timed here
    marks = [clock()]
    mirror_tune(synthetic_texts(big + small, length), cfg, on_step=lambda *_: marks.append(clock()), encoder=throwaway)
    times = [b - a for a, b in zip(marks, marks[1:], strict=False)]
    timed = times[2 * WARM_EPOCHS :]
    # the fastest of each: another process's burst (2 cores shared, a load average of 2-8 seen here) must not be
    # taken for this machine's speed; a slower CPU is slower in every sample
    steady = {big: min(timed[0::2]), small: min(timed[1::2])}
    steps = [(n * length, length, t) for n, t in steady.items()]
    warmup = sum(t - steady[n] for n, t in zip([big, small] * WARM_EPOCHS, times, strict=False))
    if like is not None:  # the same model at another length: only the steps differ
        del throwaway
        release_memory()  # the trained copy's memory handed back, as below
        return dataclasses.replace(
            like,
            step=Fit.of(steps),
            warmup_s=max(0.0, warmup),
            seconds=clock() - started,
            load=load_per_core(),
        )
    encodes = []
    for n, length in ENCODE_SHAPES:
        texts = synthetic_texts(n, max(1, length - 3))
        tokens = n * int(base.tokenize(texts)["input_ids"].shape[1])
        base.encode(texts, batch_size=n)  # this shape's kernels, once
        t = clock()
        base.encode(texts, batch_size=n)
        encodes.append((tokens, tokens / n, clock() - t))
    probe_s = speed_probe(base, clock)
    with tempfile.TemporaryDirectory(dir=scratch, prefix=".calibrate-") as tmp:
        t = clock()
        save_encoder(throwaway, Path(tmp) / "model")
        save_s, t = clock() - t, clock()
        zip_folder(Path(tmp) / "model", Path(tmp) / "model.zip", "model")
        zip_s, t = clock() - t, clock()
        load_encoder(Path(tmp) / "model", device=str(device))
        load_s = clock() - t
    del throwaway
    t = clock()
    release_memory()  # what every job ends with (explorer.runs.training), and the copy's memory handed back
    cleanup_s = clock() - t
    amp = str(resolve_precision(device, config.precision, base.model, "train"))  # what its runs train in, measured
    threads, precision = torch_threads(), {"torch.bfloat16": "bf16", "torch.float16": "fp16"}.get(amp, "fp32")
    where = "GPU" if device.type == "cuda" else f"CPU ({threads} thread{'s' if threads != 1 else ''}, {precision})"
    return Calibration(
        step=Fit.of(steps),
        encode=Fit.of(encodes),
        warmup_s=max(0.0, warmup),
        load_s=load_s,
        save_s=save_s,
        zip_s=zip_s,
        cleanup_s=cleanup_s,
        seconds=clock() - started,
        where=where,
        load=load_per_core(),
        probe_s=probe_s,
    )


def load_per_core() -> float:
    """The 1-minute load average per CPU core (0 where the system does not say)."""
    import os

    try:
        return os.getloadavg()[0] / max(1, os.cpu_count() or 1)
    except (AttributeError, OSError):
        return 0.0


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


# ---------------------------------------------------------------------------------------------- the job's plan


def encode_plan(lengths: Sequence[int], encoder: Encoder, batch_size: int = ENCODE_BATCH) -> list[tuple[int, int]]:
    """(strings, padded length) of each batch `encoder.encode` runs over strings of these token lengths: its own
    batching (mirror.encoder.encode_batches: longest first, at most CPU_BATCH_TOKENS padded tokens a batch on a
    CPU), each string with its special tokens and cut at the inference length."""
    from mirror.encoder import CPU_BATCH_TOKENS, encode_batches

    extra = encoder.tokenizer.num_special_tokens_to_add()
    limit = min(encoder.max_seq_length, encoder.token_limit)
    tokens = CPU_BATCH_TOKENS if encoder.device.type == "cpu" else None
    return encode_batches([min(n + extra, limit) for n in lengths], batch_size, tokens)


def checks_price(encoder: Encoder, cal: Calibration, half: str = "check") -> float:
    """One encoder's general checks on their `half`, priced with `cal`'s encode fit (every check's own encode)."""
    plans = [encode_plan(lengths, encoder) for lengths in forgetting_lengths(encoder, half)]
    return sum(cal.encode(n * padded, padded) for plan in plans for n, padded in plan)


@dataclass(frozen=True)
class Observed:
    """What the last finished run of a key measured, to correct the next estimate of that key with: the general
    checks' seconds for one encoder, and measured / estimated training seconds (a calibration is the process's
    first training, and pays one-off costs a later run does not)."""

    check_s: float | None = None
    train_ratio: float = 1.0


def price(
    texts: Sequence[str],
    lengths: Sequence[int],
    config: MirrorConfig,
    encoder: Encoder,
    cal: Calibration,
    memory_budget: int | None = None,
    build_base: bool = True,
    tokenize_s: float = 0.0,
    observed: Observed | None = None,
    check_encoders: int = FORGETTING_ENCODERS,
    train_lengths: Sequence[int] | None = None,
    second_lengths: Sequence[int] | None = None,
    partners: Sequence[str | None] | None = None,
) -> Estimate:
    """The job's phases (PHASES) priced with `cal`: what a run of `config` on `texts` (of these token lengths)
    costs here. `tokenize_s`: what tokenizing the strings took (the run does it again before its first step).
    `observed`: what the last run of this key measured (its checks replace the priced ones, its training ratio
    scales the training); `check_encoders`: 1 when the base's scores on the checks are kept already.
    `train_lengths`: a pairs run's planning length of each row (its longer side: mirror.train plans with it), and
    `second_lengths` its second view's (the partner): each side of a step is padded to its own longest; `partners`
    its partners (None for a row without one): the rows it holds out are not planned (train_plan)."""
    observed = observed or Observed()
    # each step's strings, and its second views (a pairs run's partners; else the strings' own), each padded alike
    pad_by = (lengths, second_lengths or lengths)
    planned = train_plan(
        texts, train_lengths or lengths, config, encoder, memory_budget, pad_by, partners, count_unsplit=True
    )
    steps = planned.steps
    index_s = sum(cal.encode(n * padded, padded) for n, padded in encode_plan(lengths, encoder))
    priced = checks_price(encoder, cal)
    per_encoder = observed.check_s if observed.check_s is not None else priced
    check_s = check_encoders * per_encoder

    def training(of: MirrorConfig) -> float:  # its steps, warm-up and tokenizing, as this key's last run ran them
        priced = steps_price(steps, of, encoder, cal, partnered=second_lengths is not None)
        return (priced + (cal.warmup_s + tokenize_s) * bool(steps)) * observed.train_ratio

    train_s, choice_s, retry_s = training(config), 0.0, 0.0
    if steps and config.blend_choose and partners is not None:
        from mirror.checks import CHECKS, sides_kept

        base_kept = sides_kept(encoder, CHECKS, "dev")  # an earlier run on this base scored it (mirror.choose)
        per_dev = checks_price(encoder, cal, "dev") * (per_encoder / priced if priced > 0 else 1.0)  # (choice_price)
        choice_s = choice_price(lengths, config, partners, index_s, per_dev, cal, base_kept)
    if choice_s and config.retry_anchor > 0:  # the same steps with the general anchor, and a choice on kept sides
        retry_s = training(dataclasses.replace(config, general_anchor=config.retry_anchor))
        retry_s += choice_price(lengths, config, partners, index_s, per_dev, cal, base_kept=True)
    phases = (
        ("load", cal.load_s),
        ("base index", index_s if build_base else 0.0),
        ("training", train_s),
        ("blend choice", choice_s),
        ("save", cal.save_s),
        ("tuned index", index_s),
        # the served run reloads the tuned model, then zips it; the job ends with a clean-up
        ("downloads", cal.zip_s + cal.load_s + cal.cleanup_s),
        ("general checks", check_s),
    )
    split, memory, unsplit = planned.split, planned.memory, planned.unsplit
    return Estimate(len(steps), phases, cal, split=split, memory=memory, unsplit=unsplit, retry=retry_s)


class Estimator:
    """Calibrations by key, each made once (in memory), and the token lengths of the last few string sets.

    `shared`: use this process's calibrations, whichever MirrorApp asks (the machine is the same for all).
    """

    LENGTHS_KEPT = 4
    _process: ClassVar[tuple[dict, dict, threading.Lock]] = ({}, {}, threading.Lock())

    def __init__(
        self,
        scratch: Path,
        clock: Clock = time.perf_counter,
        shared: bool = False,
        probe_fresh_s: float = PROBE_FRESH_S,
    ):
        self.scratch, self.clock, self.probe_fresh_s = Path(scratch), clock, probe_fresh_s
        self.calibrations: dict[tuple, Calibration]
        self._locks: dict[tuple, threading.Lock]
        if shared:
            self.calibrations, self._locks, self._lock = Estimator._process
        else:
            self.calibrations, self._locks, self._lock = {}, {}, threading.Lock()
        self._lengths: OrderedDict[tuple, tuple[list[int], float]] = OrderedDict()
        self.observed: dict[tuple, Observed] = Estimator._observed if shared else {}
        self.probes: dict[tuple, tuple[float, float]] = Estimator._probes if shared else {}  # model key: (when, s)
        self.quickest: dict[tuple, float] = Estimator._quickest if shared else {}  # model key: quickest probe seen

    _observed: ClassVar[dict[tuple, Observed]] = {}
    _probes: ClassVar[dict[tuple, tuple[float, float]]] = {}
    _quickest: ClassVar[dict[tuple, float]] = {}

    def speed_now(self, key: tuple, base: Encoder) -> float:
        """speed_probe's seconds now for the model of `key` (any length class): the last probe when it is under
        `probe_fresh_s` (PROBE_FRESH_S) old, else a new one (in a fresh thread, as a run's encodes run). Keeps the quickest."""
        model = key[:-1]
        when, seconds = self.probes.get(model, (-math.inf, 0.0))
        if self.clock() - when > self.probe_fresh_s:
            seconds = in_fresh_thread(lambda: speed_probe(base, self.clock), "mirror-probe")
            self.probes[model] = (self.clock(), seconds)
        self.note_probe(model, seconds)
        return seconds

    def note_probe(self, model: tuple, seconds: float) -> None:
        if seconds >= PROBE_MIN_S:
            self.quickest[model] = min(seconds, self.quickest.get(model, math.inf))

    def observe(self, key: tuple, estimated_train_s: float, train_s: float | None, check_s: float | None) -> None:
        """A finished run of `key` (Estimator.key, any length class) measured `train_s` of training where
        `estimated_train_s` was priced, and `check_s` for the general checks of one encoder: the next estimates of
        that key use them (the training ratio bounded to 1/4..4, so one odd run cannot run away with it)."""
        key = key[:-1]
        seen = self.observed.get(key, Observed())
        ratio = seen.train_ratio
        if train_s and estimated_train_s > 0:
            ratio = min(4.0, max(0.25, seen.train_ratio * train_s / estimated_train_s))
        self.observed[key] = Observed(check_s if check_s is not None else seen.check_s, ratio)

    def checks_timed(self, est: Estimate, base: Encoder, seconds: float) -> bool:
        """`seconds`: scoring the general checks with `base` here (the warm-up scores its side): the price of a run's
        checks for `est`'s key from now on, as `observe` keeps a run's (the same texts, architecture and precision).
        False (refused) when over CHECKS_TIMED_MAX times the encode fit's price: other work slowed that one pass."""
        if est.calibration is None or not est.key or seconds > CHECKS_TIMED_MAX * checks_price(base, est.calibration):
            return False
        self.observe(est.key, 0.0, None, seconds)
        return True

    @staticmethod
    def key(config: MirrorConfig, device: str, threads: int, length: int = 8) -> tuple:
        """What a calibration holds for: model, pooling, device, precision, CPU threads, padded length class."""
        from mirror.encoder import resolve_device, resolve_precision

        amp = resolve_precision(resolve_device(device), config.precision)
        return (config.model, config.pooling, device, str(amp), threads if device == "cpu" else 0, length)

    def calibration(
        self, key: tuple, base: Encoder, config: MirrorConfig, wait: bool | float = True, may_calibrate: bool = True,
        settle: Callable[[], object] | None = None,
    ) -> tuple[Calibration | None, bool]:  # fmt: skip
        """(the calibration of `key`, made by this call?); (None, False) when there is none and it cannot be made
        now: `may_calibrate` false, or another thread is making it and `wait` is false (or, a number, that thread
        took longer than `wait` seconds). `settle`: called right before calibrating (the server's warm-up ends)."""
        with self._lock:
            if key in self.calibrations:
                return self.calibrations[key], False
            lock = self._locks.setdefault(key, threading.Lock())
        if not may_calibrate:
            return None, False
        got = lock.acquire(blocking=bool(wait)) if isinstance(wait, bool) else lock.acquire(timeout=max(0.0, wait))
        if not got:
            return None, False
        try:
            if key in self.calibrations:
                return self.calibrations[key], False
            self.scratch.mkdir(parents=True, exist_ok=True)
            with self._lock:  # the same model at another length: its costs but the steps' hold here too
                like = nearest_length(self.calibrations, key)[1]
            if settle is not None:
                settle()
            cal = calibrate(base, config, self.scratch, self.clock, length=key[-1], like=like)
            with self._lock:  # its probe is the machine's speed now: the plans of the next seconds are priced at it
                self.calibrations[key], self.probes[key[:-1]] = cal, (self.clock(), cal.probe_s)
            return cal, True
        finally:
            lock.release()

    def lengths(self, texts: Sequence[str], encoder: Encoder, texts_key: str) -> tuple[list[int], float]:
        """Token lengths of `texts` and the seconds tokenizing them took (kept for the last few sets)."""
        key = (id(encoder.tokenizer), texts_key)
        if key not in self._lengths:
            t = self.clock()
            lengths = encoder.token_lengths(texts)
            self._lengths[key] = (lengths, self.clock() - t)
            while len(self._lengths) > self.LENGTHS_KEPT:
                self._lengths.popitem(last=False)
        self._lengths.move_to_end(key)
        return self._lengths[key]

    def estimate(
        self,
        texts: Sequence[str],
        texts_key: str,
        config: MirrorConfig,
        device: str,
        threads: int,
        base: Encoder,
        memory_budget: int | None = None,
        build_base: bool = True,
        wait: bool | float = True,
        may_calibrate: bool = True,
        check_encoders: int = FORGETTING_ENCODERS,
        probe: bool = False,
        train_texts: Sequence[str] | None = None,
        settle: Callable[[], object] | None = None,
    ) -> Estimate | None:
        """The job's estimate, calibrating first when its key has no calibration yet (where it cannot be made now,
        see `calibration`: priced with the same model's at the nearest other length, `borrowed`; None without one),
        corrected by what the last run of its key measured (`observe`).
        `base`: the base encoder (only read); `check_encoders`: 1 when the base's general-check scores are kept;
        `probe`: an earlier calibration's compute phases are scaled by what the machine gives now (speed_probe:
        other work on the machine, or work that stopped since). `train_texts`: a pairs run's second view of each
        row (its partner, or the string); each row's longer side plans its steps. `settle`: as `calibration`'s."""
        lengths, tokenize_s = self.lengths(texts, base, texts_key)
        train_lengths = second = partners = None
        if train_texts is not None:  # a pairs run: its steps are planned by each row's longer side (mirror.plan)
            from mirror.plan import longer_sides

            second, more_s = self.lengths(train_texts, base, texts_key + "-pairs")
            tokenize_s += more_s
            train_lengths = longer_sides(lengths, second, config)
            # a row's second view is its string where it has no partner (clean_pairs drops a partner equal to its
            # string): its partners again, whose held-out rows never train
            partners = [None if s == t else s for t, s in zip(texts, train_texts, strict=True)]
        planned = train_plan(texts, train_lengths or lengths, config, base, memory_budget, (), partners)
        padded = [p for _, p in planned.steps]
        key = self.key(config, device, threads, length_class(padded))
        cal, fresh = self.calibration(key, base, config, wait, may_calibrate, settle)
        borrowed = 0
        if cal is None:  # not now: the same model's calibration here at the nearest other length, where one exists
            with self._lock:
                borrowed, cal = nearest_length(self.calibrations, key)
            if cal is None:
                return None
        observed = self.observed.get(key[:-1])
        est = price(
            texts, lengths, config, base, cal, memory_budget, build_base, tokenize_s, observed, check_encoders,
            train_lengths, second, partners,
        )  # fmt: skip
        est = dataclasses.replace(est, fresh=fresh, key=key, busy=load_per_core() >= BUSY_LOAD, borrowed=borrowed)
        self.note_probe(key[:-1], cal.probe_s)
        if cal.probe_s < PROBE_MIN_S:
            return est
        now = self.speed_now(key, base) if probe and not fresh else cal.probe_s
        est = at_speed(est, now / cal.probe_s)
        return dataclasses.replace(est, quiet=max(1.0, now / self.quickest.get(key[:-1], now)))


def nearest_length(calibrations: dict[tuple, Calibration], key: tuple) -> tuple[int, Calibration | None]:
    """(length, calibration) of the same model's calibration at the length nearest `key`'s, or (0, None)."""
    others = [(k[-1], c) for k, c in calibrations.items() if k[:-1] == key[:-1] and k != key]
    return min(others, key=lambda kc: (abs(math.log2(kc[0] / key[-1])), kc[0]), default=(0, None))


def at_speed(est: Estimate, slower: float) -> Estimate:
    """`est` with its compute phases `slower` times longer (the machine slower now than when calibrated, or faster
    below 1); disk and zip phases as they were. Bounded to 1/8..8: one probe is a fraction of a second."""
    slower = min(8.0, max(1 / 8, slower))
    phases = tuple((name, s if name in IO_PHASES else s * slower) for name, s in est.phases)
    return dataclasses.replace(est, phases=phases, slower=est.slower * slower, retry=est.retry * slower)
