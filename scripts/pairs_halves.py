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


def build_and_write(doc: str, default_out: Path, build, inputs: int = 1) -> None:
    """A builder's command line: `inputs` source files, then an optional output path (default `default_out`); the
    rows `build(*sources)` makes written as an id/half/group/term/text table, and what was written said (its rows
    in each half, its groups, its bytes and sha256). Exits with `doc` when called wrongly."""
    import sys

    if len(sys.argv) not in (inputs + 1, inputs + 2):
        sys.exit(doc)
    out = Path(sys.argv[inputs + 1]) if len(sys.argv) == inputs + 2 else default_out
    rows = build(*(Path(a) for a in sys.argv[1 : inputs + 1]))
    data = write_table(out, "id\thalf\tgroup\tterm\ttext", rows)
    n = Counter(r[1] for r in rows)
    print(
        f"{out}: {len(rows):,} rows ({n['dev']:,} dev, {n['check']:,} check) in {len({r[2] for r in rows})} groups; "
        f"{len(data):,} bytes; sha256 {sha256(data)}"
    )
