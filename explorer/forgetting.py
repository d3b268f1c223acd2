"""The forgetting check in the app: after every run (and blend), the general checks of mirror.checks (word pairs,
sentence pairs, real long documents) on the tuned model against its base, so a user whose tuning made the model
worse at what it knew is told plainly, with the blend (mirror.blend) as the remedy.

The checks themselves (sets, halves, scoring, intervals, the verdict words) live in mirror/checks.py, which the
engine's `python -m mirror check` runs too; this layer adds what the app needs: the base model's side of every check
computed once per base and kept (_BASE_SCORES; `warm_up` at server start), so a run pays for the tuned model only,
and the shape the app stores in a run's stats. MIRROR_GENERAL_CHECKS=0 turns the check off.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from mirror import checks as engine
from mirror.checks import CHECKS, SUGGESTED_ALPHA, Check, check_items

__all__ = ["CHECKS", "MARGIN", "SUGGESTED_ALPHA", "Check", "base_scored", "forgetting_check", "verdict", "warm_up"]

MARGIN = 1.0  # the pair checks' margin (Spearman points); each check carries its own (Check.margin)
_BASE_SCORES: dict[tuple[str, str, str, int], np.ndarray] = {}  # (base key, check, half, items): the base's side
_BASE_LOCK = threading.Lock()


def forgetting_check(base, tuned, *, checks: Sequence[Check] = CHECKS, half: str = "check") -> dict[str, Any]:
    """Every check's row (mirror.checks.compare: base, tuned, delta, ci, verdict word, worse) and a one-paragraph
    `verdict` for the user."""
    rows = engine.run_checks(base, tuned, checks, half, base_side=lambda b, c, items: base_side(b, c, half, items))
    return {"checks": rows, "verdict": verdict(rows)}


def _base_key(base) -> str | None:
    fingerprint = getattr(base, "fingerprint", None)
    return None if fingerprint is None else f"{fingerprint()}/{getattr(base, 'max_seq_length', '')}"


def base_side(base, check: Check, half: str, items) -> np.ndarray:
    """The base model's side of a check (its cosines, or its documents' average precisions), computed once per base
    (by its weights' fingerprint) and kept: every run on the same base pays for the tuned model only. Encoders
    without a fingerprint are not cached."""
    key = _base_key(base)
    if key is None:
        return engine.side(base, check, items)
    entry = (key, check.name, half, len(items))
    with _BASE_LOCK:
        cached = _BASE_SCORES.get(entry)
    if cached is None:
        cached = engine.side(base, check, items)
        with _BASE_LOCK:
            if len(_BASE_SCORES) > 64:  # a few bases' worth; a long-lived app with many bases starts over
                _BASE_SCORES.clear()
            _BASE_SCORES[entry] = cached
    return cached


def base_scored(base, checks: Sequence[Check] = CHECKS, half: str = "check") -> bool:
    """Whether the base model's side of every check is kept already (a run then encodes its tuned model only)."""
    key = _base_key(base)
    if key is None:
        return False
    with _BASE_LOCK:
        return all((key, c.name, half, len(check_items(c, half))) in _BASE_SCORES for c in checks)


def warm_up(base, checks: Sequence[Check] = CHECKS, half: str = "check") -> None:
    """Compute and keep the base model's side of every check ahead of the first run (server start)."""
    for check in checks:
        base_side(base, check, half, check_items(check, half))


def verdict(rows: Sequence[dict[str, Any]]) -> str:
    """What the checks mean for the user, in plain words (mirror.checks.summary)."""
    return engine.summary(rows)
