"""Space health of the user's strings before and after tuning: mean pairwise cosine (anisotropy), and Wang &
Isola's (2020) alignment and uniformity, with one sentence saying what the change means.

- mean cosine: the average cosine between two different strings; near 1, everything sits in a narrow cone and
  cosines say little (anisotropy); lower is more spread out.
- uniformity: log E exp(-2 ||x - y||^2) over pairs of different strings (unit vectors); lower is more uniform.
- alignment: E ||f(x) - f(x+)||^2 over positive pairs: each string and a lightly corrupted copy of it (the
  recipe's view: a 5-character span masked for strings of 30+ characters, two adjacent letters swapped for
  shorter ones). Lower means a string stays close to itself under a small change.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np

LABELS = {
    "mean_cosine": "mean cosine between strings (lower: more spread out)",
    "uniformity": "uniformity (lower: more uniform)",
    "alignment": "alignment with a corrupted copy (lower: more robust)",
}


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def space_health(
    vecs: np.ndarray, pairs: tuple[np.ndarray, np.ndarray] | None = None, *, sample: int = 2000, seed: int = 0
) -> dict[str, float]:
    """mean_cosine and uniformity over (a seeded sample of) the rows; alignment when positive `pairs` (anchors,
    positives: row i of one is a positive of row i of the other) are given."""
    x = _unit(vecs)
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(x), size=sample, replace=False)) if len(x) > sample else np.arange(len(x))
    s = x[idx]
    n = len(s)
    if n < 2:
        return {"mean_cosine": float("nan"), "uniformity": float("nan")}
    cos = s @ s.T
    off = ~np.eye(n, dtype=bool)
    sq = np.clip(2.0 - 2.0 * cos[off], 0.0, None)  # ||x - y||^2 of unit vectors
    out = {
        "mean_cosine": float(cos[off].mean()),
        "uniformity": float(np.log(np.exp(-2.0 * sq).mean())),
    }
    if pairs is not None and len(pairs[0]):
        a, p = _unit(pairs[0]), _unit(pairs[1])
        out["alignment"] = float(((a - p) ** 2).sum(1).mean())
    return out


def positive_views(texts: Sequence[str], mask_token: str, seed: int = 0) -> list[str]:
    """A lightly corrupted copy of each string: a 5-character span replaced by `mask_token` (30+ characters,
    as in the recipe), else two adjacent inner letters swapped (a typo; strings under 4 characters unchanged)."""
    rng = random.Random(seed)
    out = []
    for t in texts:
        if len(t) >= 30:
            at = rng.randrange(0, len(t) - 5 + 1)
            out.append(t[:at] + mask_token + t[at + 5 :])
        elif len(t) >= 4:
            at = rng.randrange(1, len(t) - 2)
            out.append(t[:at] + t[at + 1] + t[at] + t[at + 2 :])
        else:
            out.append(t)
    return out


def compare_health(
    base: np.ndarray,
    tuned: np.ndarray,
    base_pairs: tuple[np.ndarray, np.ndarray] | None = None,
    tuned_pairs: tuple[np.ndarray, np.ndarray] | None = None,
    who: str = "Tuning",
) -> dict[str, Any]:
    """Both spaces' health, the labels to show them with, and one plain sentence on what changed (`who` changed it:
    "Tuning", or "The blend" for a blend)."""
    b, t = space_health(base, base_pairs), space_health(tuned, tuned_pairs)
    return {"base": b, "tuned": t, "labels": LABELS, "summary": summary(b, t, who)}


def summary(b: dict[str, float], t: dict[str, float], who: str = "Tuning") -> str:
    """What the change in health means, in one sentence; `who` made the change ("Tuning", "The blend")."""
    parts = []
    d_cos = t["mean_cosine"] - b["mean_cosine"]
    if abs(d_cos) >= 0.02:
        how = "spread your strings out" if d_cos < 0 else "pulled your strings closer together"
        parts.append(f"{who} {how} (mean cosine {b['mean_cosine']:.2f} → {t['mean_cosine']:.2f})")
    else:
        parts.append(f"{who} kept the overall spread (mean cosine {b['mean_cosine']:.2f} → {t['mean_cosine']:.2f})")
    d_uni = t["uniformity"] - b["uniformity"]
    if abs(d_uni) >= 0.05:
        parts.append(
            f"{'more' if d_uni < 0 else 'less'} uniformly over the space (uniformity {b['uniformity']:.2f} → "
            f"{t['uniformity']:.2f})"
        )
    if "alignment" in b and "alignment" in t:
        d_al = t["alignment"] - b["alignment"]
        robust = "closer to" if d_al < 0 else "further from"
        parts.append(
            f"a string with a typo or a masked span now sits {robust} itself (alignment "
            f"{b['alignment']:.3f} → {t['alignment']:.3f})"
        )
    text = ", ".join(parts[:2]) + ("; " + parts[2] if len(parts) > 2 else "") + "."
    if d_cos < -0.02 and t.get("alignment", 0) <= b.get("alignment", 0) + 1e-9:
        text += " Both are what contrastive tuning aims for: cosines now separate your strings better."
    return text
