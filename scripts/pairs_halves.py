"""What the pairs dev sets' builders share (scripts/make_pairs_*.py): their dev and check halves split by groups, so
related rows stay in one half, and the table written with its size and sha256 (the same package, the same bytes)."""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path


def halves(sizes: Counter[str], seed: int) -> dict[str, str]:
    """Each group's half: the groups shuffled with `seed` (which breaks ties in size), then, largest first, each given
    to the half with fewer rows so far (dev on a tie)."""
    groups = sorted(sizes)
    random.Random(seed).shuffle(groups)
    groups.sort(key=lambda g: -sizes[g])  # stable: the shuffle breaks ties
    half: dict[str, str] = {}
    held = {"dev": 0, "check": 0}
    for g in groups:
        h = min(held, key=lambda k: (held[k], k == "check"))
        half[g] = h
        held[h] += sizes[g]
    return half


def write_table(out: Path, header: str, rows: Sequence[Sequence[str]]) -> bytes:
    """The tab-separated table (`header`, then a line per row) written to `out`; its bytes."""
    data = ("\n".join([header] + ["\t".join(r) for r in rows]) + "\n").encode()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    return data


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
