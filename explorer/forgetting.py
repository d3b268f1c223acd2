"""The forgetting check: after every run, the tuned model against its base on bundled general similarity sets
(word pairs, sentence pairs, and texts much longer than the training length), so a user whose tuning made the
model worse at what it knew is told plainly, with the blend (mirror.blend) as the remedy.

Each check is half of its set (every other pair, the "check" half; the other half chose the blend defaults, see
bench/bench_forgetting.py), fixed and seeded. Sized by tokens encoded, which is what costs on a CPU: about 19k
tokens per model (the long texts are ~75% of them), ~22 s of CPU for the bundled model (about 11 s on 2 free
cores); the base model's scores are computed once per base and kept (_BASE_SCORES; `warm_up` at server start), so a
run pays for the tuned model only. MIRROR_GENERAL_CHECKS=0 turns the check off.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mirror.evaluate import Pair, bootstrap_spearman, interval, pair_cosines, read_pairs, spearman

GOLD = Path(__file__).resolve().parent.parent / "examples" / "gold"
MARGIN = 1.0  # Spearman points: a drop smaller than this is never called worse (noise of a 1-epoch run's seed)
# The blend suggested when a check is worse (and where the app's blend slider then starts): chosen on the dev half by
# bench/bench_forgetting.py, see bench/RESULTS.md "Forgetting check and blend". Never applied without the user.
SUGGESTED_ALPHA = 0.5


@dataclass(frozen=True)
class Check:
    """One general set: its file in examples/gold, what it tests, and how many of its check-half pairs to use."""

    name: str
    file: str
    what: str
    max_pairs: int


CHECKS = (
    Check("SimLex-999", "simlex999.txt", "word similarity", 500),
    Check("WordSim-353", "wordsim353.tsv", "word relatedness", 200),
    Check("STS-B dev", "sts-dev.csv", "sentence similarity", 200),
    Check("Long texts", "long-docs.tsv", "texts 2-4x longer than the sentences preset trains on", 60),
)
_BASE_SCORES: dict[tuple[str, str, str, int], np.ndarray] = {}  # (base fingerprint, check, half, pairs): cosines
_BASE_LOCK = threading.Lock()


def check_pairs(check: Check, half: str = "check") -> list[Pair]:
    """The pairs of one check: its "check" half (odd pairs) or its "dev" half (even pairs), capped, in order.
    (Read once per process: every run, and every estimate through `base_scored`, asks for them.)"""
    return list(_check_pairs(check, half))


@functools.lru_cache(maxsize=16)
def _check_pairs(check: Check, half: str) -> tuple[Pair, ...]:
    pairs = read_pairs(GOLD / check.file)
    picked = pairs[1::2] if half == "check" else pairs[0::2]
    return tuple(picked[: check.max_pairs])


def forgetting_check(
    base, tuned, *, checks: Sequence[Check] = CHECKS, half: str = "check", margin: float = MARGIN
) -> dict[str, Any]:
    """Spearman ×100 of base and tuned on each check, the change with its paired bootstrap 95% interval, and
    `worse` when the tuned model lost more than `margin` points and the interval lies below zero. Also a
    one-paragraph `verdict` for the user."""
    rows = []
    for check in checks:
        pairs = check_pairs(check, half)
        gold = [p[2] for p in pairs]
        cb, ct = base_cosines(base, check, half, pairs), pair_cosines(tuned, pairs)
        b, t = 100 * spearman(cb, gold), 100 * spearman(ct, gold)
        boot = bootstrap_spearman(gold, cb, ct, n_resamples=500, seed=0)
        ci = interval(100 * (boot[:, 1] - boot[:, 0]))
        worse = (t - b) < -margin and (ci is None or ci[1] < 0)
        rows.append(
            {
                "name": check.name,
                "what": check.what,
                "pairs": len(pairs),
                "base": round(b, 1),
                "tuned": round(t, 1),
                "delta": round(t - b, 1),
                "ci": [round(ci[0], 1), round(ci[1], 1)] if ci else None,
                "worse": bool(worse),
            }
        )
    return {"checks": rows, "verdict": verdict(rows)}


def base_cosines(base, check: Check, half: str, pairs: Sequence[Pair]) -> np.ndarray:
    """The base model's cosines on a check, computed once per base (by its weights' fingerprint) and kept: every
    run on the same base pays for the tuned model only. Encoders without a fingerprint are not cached."""
    fingerprint = getattr(base, "fingerprint", None)
    if fingerprint is None:
        return pair_cosines(base, pairs)
    key = (f"{fingerprint()}/{getattr(base, 'max_seq_length', '')}", check.name, half, len(pairs))
    with _BASE_LOCK:
        cached = _BASE_SCORES.get(key)
    if cached is None:
        cached = pair_cosines(base, pairs)
        with _BASE_LOCK:
            if len(_BASE_SCORES) > 64:  # a few bases' worth; a long-lived app with many bases starts over
                _BASE_SCORES.clear()
            _BASE_SCORES[key] = cached
    return cached


def base_scored(base, checks: Sequence[Check] = CHECKS, half: str = "check") -> bool:
    """Whether the base model's scores on every check are kept already (a run then encodes its tuned model only)."""
    fingerprint = getattr(base, "fingerprint", None)
    if fingerprint is None:
        return False
    fp = f"{fingerprint()}/{getattr(base, 'max_seq_length', '')}"
    with _BASE_LOCK:
        return all((fp, c.name, half, len(check_pairs(c, half))) in _BASE_SCORES for c in checks)


def warm_up(base, checks: Sequence[Check] = CHECKS, half: str = "check") -> None:
    """Compute and keep the base model's scores ahead of the first run (server start), so it pays for the tuned
    model only."""
    for check in checks:
        base_cosines(base, check, half, check_pairs(check, half))


def verdict(rows: Sequence[dict[str, Any]]) -> str:
    """What the checks mean for the user, in plain words."""
    worse = [r for r in rows if r["worse"]]
    if not worse:
        better = [r for r in rows if r["delta"] > MARGIN and (r.get("ci") is None or r["ci"][0] > 0)]  # as `worse`
        gained = f" and better on {', '.join(r['name'] for r in better)}" if better else ""
        return f"General checks: the tuned model is no worse than the base on any of them{gained}."
    listed = "; ".join(f"{r['name']} ({r['what']}): {r['base']:.1f} → {r['tuned']:.1f}" for r in worse)
    return (
        f"Tuning made the model worse on {len(worse)} general check{'s' if len(worse) > 1 else ''}: {listed}. "
        f"If you will search texts like these, blend at α = {SUGGESTED_ALPHA:g} below (where tuning forgot on our "
        "dev sets, that brought the drop back within a point and kept the most of the gain on the tuning's own "
        "kind of strings), or tune on strings more like the ones you will search."
    )


def mean_of(rows: Sequence[dict[str, Any]], key: str) -> float:
    return float(np.mean([r[key] for r in rows]))
