"""Spearman correlation of cosine similarity with gold scores, for word pairs and sentence pairs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mirror.data import decode, is_number
from mirror.errors import MirrorError

Pair = tuple[str, str, float]


@dataclass(frozen=True)
class EvalResult:
    """Spearman's rho (x100 is the usual way to quote it) over n pairs."""

    name: str
    spearman: float
    n: int

    def __str__(self) -> str:
        return f"{self.name}: Spearman {self.spearman:.4f} over {self.n} pairs"


def parse_pairs(text: str, name: str = "pairs") -> list[Pair]:
    """Word pairs (`w1 w2 score`, whitespace or tab), sentence pairs (`s1<TAB>s2<TAB>score`),
    or the STS-B layout (`genre<TAB>file<TAB>year<TAB>id<TAB>score<TAB>s1<TAB>s2[...]`). `#` lines are comments.
    """
    pairs: list[Pair] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cols = line.rstrip("\n\r").split("\t")
        try:
            if len(cols) >= 7 and is_number(cols[4]):  # STS-B csv
                pairs.append((cols[5].strip(), cols[6].strip(), float(cols[4])))
            elif len(cols) == 3:
                pairs.append((cols[0].strip(), cols[1].strip(), float(cols[2])))
            else:
                parts = line.split()
                if len(parts) != 3:
                    raise ValueError
                pairs.append((parts[0], parts[1], float(parts[2])))
        except ValueError:
            if not pairs and lineno <= 2:  # a header line
                continue
            raise MirrorError(
                f"{name}: line {lineno} is not a pair with a score "
                "(expected `w1 w2 score`, `s1<TAB>s2<TAB>score` or the STS-B layout)"
            ) from None
    if len(pairs) < 3:
        raise MirrorError(f"{name}: found {len(pairs)} scored pairs; need at least 3 to compute a correlation")
    return pairs


def read_pairs(path: str | Path) -> list[Pair]:
    path = Path(path)
    if not path.is_file():
        raise MirrorError(f"{path}: no such file")
    return parse_pairs(decode(path.read_bytes(), path.name), path.name)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho with average ranks for ties (Pearson correlation of the ranks)."""
    rx, ry = _rank(np.asarray(x, dtype=np.float64)), _rank(np.asarray(y, dtype=np.float64))
    rx -= rx.mean()
    ry -= ry.mean()
    denom = np.sqrt((rx**2).sum() * (ry**2).sum())
    return float((rx * ry).sum() / denom) if denom > 0 else 0.0


def _rank(values: np.ndarray) -> np.ndarray:
    order = values.argsort(kind="mergesort")
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.arange(len(values), dtype=np.float64)
    # average the ranks of tied values
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def evaluate_pairs(encoder, pairs: Sequence[Pair], name: str = "pairs", batch_size: int = 128) -> EvalResult:
    """Encode every distinct string once, score pairs by cosine, correlate with the gold scores."""
    vocab = sorted({p[0] for p in pairs} | {p[1] for p in pairs})
    emb = encoder.encode(vocab, batch_size=batch_size, normalize=True)
    row = {t: i for i, t in enumerate(vocab)}
    a = emb[[row[p[0]] for p in pairs]]
    b = emb[[row[p[1]] for p in pairs]]
    cos = (a * b).sum(1)
    return EvalResult(name=name, spearman=spearman(cos, [p[2] for p in pairs]), n=len(pairs))
