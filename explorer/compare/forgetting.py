"""The forgetting check in the app: after every run (and blend), the general checks of mirror.checks (word pairs,
sentence pairs, real long documents) on the tuned model against its base, so a user whose tuning made the model
worse at what it knew is told plainly, with the blend (mirror.blend) as the remedy.

The checks themselves (sets, halves, scoring, intervals, the verdict words) live in mirror/checks.py, which the
engine's `python -m mirror check` runs too; this layer adds what the app needs: the base model's side of every check
computed once per base and kept (mirror.checks.kept_side; `warm_up` at server start), so a run pays for the tuned model only,
and the shape the app stores in a run's stats. MIRROR_GENERAL_CHECKS=0 turns the check off.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from mirror import checks as engine
from mirror.checks import CHECKS, SUGGESTED_ALPHA, Check, check_items

__all__ = ["CHECKS", "MARGIN", "SUGGESTED_ALPHA", "Check", "base_scored", "forgetting_check", "verdict", "warm_up"]

log = logging.getLogger("mirror.app")
MARGIN = 1.0  # the pair checks' margin (Spearman points); each check carries its own (Check.margin)


def forgetting_check(base, tuned, *, checks: Sequence[Check] = CHECKS, half: str = "check") -> dict[str, Any]:
    """Every check's row (mirror.checks.compare: base, tuned, delta, ci, verdict word, worse) and a one-paragraph
    `verdict` for the user."""
    rows = engine.run_checks(base, tuned, checks, half, base_side=lambda b, c, items: base_side(b, c, half, items))
    return {"checks": rows, "verdict": verdict(rows)}


def base_side(base, check: Check, half: str, items) -> np.ndarray:
    """The base model's side of a check, computed once per base (by its weights' fingerprint) and kept
    (mirror.checks.kept_side: the engine's blend choice shares it): every run on the same base pays for the tuned
    model only. Encoders without a fingerprint are not cached."""
    return engine.kept_side(base, check, half, items)


def base_scored(base, checks: Sequence[Check] = CHECKS, half: str = "check") -> bool:
    """Whether the base model's side of every check is kept already (a run then encodes its tuned model only)."""
    return engine.sides_kept(base, checks, half)


def warm_up(base, checks: Sequence[Check] = CHECKS, half: str = "check") -> float | None:
    """Compute and keep the base model's side of every check ahead of the first run (server start). Returns the
    seconds it took (what the checks of one encoder cost here, the time estimate's price for them), None when the
    base's side was kept already."""
    if base_scored(base, checks, half):
        return None
    started = time.perf_counter()
    for check in checks:
        base_side(base, check, half, check_items(check, half))
    return time.perf_counter() - started


def verdict(rows: Sequence[dict[str, Any]]) -> str:
    """What the checks mean for the user, in plain words (mirror.checks.summary)."""
    return engine.summary(rows)


# -- the user's own long texts: information beside the general checks, not a quality score --------------------------

LONG_TOKENS, MIN_LONG, MAX_LONG, K_NEIGHBOURS = 100, 20, 200, 10


def own_long_texts(base, tuned, texts: Sequence[str]) -> dict[str, Any] | None:
    """When the upload has at least MIN_LONG strings of LONG_TOKENS tokens or more (by the tuned model's tokenizer),
    two label-free figures on the longest MAX_LONG of them: how much each one's 10 nearest long strings under the
    tuned model agree with the base's (overlap@10), and how well each string's first half finds its own second half
    among all second halves (MRR ×100, base and tuned). Information, not a quality score: no labels say which
    neighbours are right. None when there are too few long strings."""
    candidates = [t for t in texts if len(t) >= 2 * LONG_TOKENS]  # cheap: under ~2 characters a token is rare
    if len(candidates) < MIN_LONG:
        return None
    tokenizer = getattr(tuned, "tokenizer", None)
    if tokenizer is not None:
        from mirror.encoder import tokenized

        # the served model's tokenizer, shared with its searches: through the lock (mirror.encoder.TOKENIZER_LOCK),
        # and truncated as every encode is (counts up to the limit are all this needs)
        limit = min(getattr(tuned, "max_seq_length", 512), getattr(tuned, "token_limit", 512))
        ids = tokenized(tokenizer, candidates, add_special_tokens=False, truncation=True, max_length=limit)["input_ids"]
        counts = [len(x) for x in ids]
    else:
        counts = [len(t.split()) for t in candidates]
    long = [t for _, t in sorted(((-n, t) for n, t in zip(counts, candidates, strict=True) if n >= LONG_TOKENS))]
    if len(long) < MIN_LONG:
        return None
    long = long[:MAX_LONG]
    k = min(K_NEIGHBOURS, len(long) - 1)
    vb, vt = base.encode(long, normalize=True), tuned.encode(long, normalize=True)
    overlap = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(_knn(vb, k), _knn(vt, k), strict=True)]))
    halves = [t.split() for t in long]
    firsts = [" ".join(w[: len(w) // 2]) for w in halves]
    seconds = [" ".join(w[len(w) // 2 :]) for w in halves]
    mrr = {}
    for name, enc in (("base", base), ("tuned", tuned)):
        q, d = enc.encode(firsts, normalize=True), enc.encode(seconds, normalize=True)
        sims = q @ d.T
        ranks = (sims > np.diag(sims)[:, None]).sum(1) + 1  # 1 = its own second half is the nearest
        mrr[name] = round(100 * float(np.mean(1.0 / ranks)), 1)
    return {
        "strings": len(long),
        "min_tokens": LONG_TOKENS,
        "overlap_at_10": round(overlap, 2),
        "halves_mrr_base": mrr["base"],
        "halves_mrr_tuned": mrr["tuned"],
    }


def _knn(vectors: np.ndarray, k: int) -> np.ndarray:
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    return np.argsort(-sims, axis=1, kind="stable")[:, :k]


def general_checks(base: Any, tuned: Any, texts: Sequence[str] = (), slots: Any = None) -> Any:
    """A served run's general checks (`forgetting_check`) of a tuned encoder against its base, and beside them, when
    the run's strings have enough long ones, the label-free self-check on them (`own_long_texts`, not counted in the
    seconds the estimate learns from), as the run's record keeps them (explorer.resources.record.Checks); failed
    (logged) when they cannot run here: a run is never failed for its checks. Seconds on a CPU (the base's scores are
    kept). `slots`: a search slot per check (a served run's searches wait for one check at most)."""
    from explorer.resources.record import Checks

    slot = slots if slots is not None else contextlib.nullcontext()
    try:
        started, rows = time.perf_counter(), []
        for check in CHECKS:
            with slot:
                rows += forgetting_check(base, tuned, checks=[check])["checks"]
        seconds = round(time.perf_counter() - started, 1)
        with slot:
            own = own_long_texts(base, tuned, texts)
        return Checks(rows, verdict(rows), seconds, own)
    except Exception:
        log.exception("forgetting check failed; the run goes on without it")
        return Checks(failed=True)
