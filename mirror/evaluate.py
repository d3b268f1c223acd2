"""Spearman correlation of cosine similarity with gold scores, for word pairs and sentence pairs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    cos = pair_cosines(encoder, pairs, batch_size)
    return EvalResult(name=name, spearman=spearman(cos, [p[2] for p in pairs]), n=len(pairs))


def pair_strings(pairs: Sequence[Pair]) -> list[str]:
    """The distinct strings of `pairs`, each encoded once."""
    return sorted({p[0] for p in pairs} | {p[1] for p in pairs})


def pair_cosines(
    encoder, pairs: Sequence[Pair], batch_size: int = 128, on_progress: Callable[[int, int], None] | None = None
) -> np.ndarray:
    """The cosine of each pair under `encoder` (float64); `on_progress(done, total)` counts strings encoded."""
    vocab = pair_strings(pairs)
    # the keyword only when asked for: duck-typed encoders (bench/) take just these three
    more = {"on_progress": on_progress} if on_progress else {}
    emb = encoder.encode(vocab, batch_size=batch_size, normalize=True, **more)
    row = {t: i for i, t in enumerate(vocab)}
    a = emb[[row[p[0]] for p in pairs]]
    b = emb[[row[p[1]] for p in pairs]]
    return (a * b).sum(1).astype(np.float64)


def bootstrap_spearman(
    gold: Sequence[float], *scores: Sequence[float], n_resamples: int = 1000, seed: int = 0
) -> np.ndarray:
    """Spearman's rho of each of `scores` with `gold` over `n_resamples` resamples of the pairs (drawn with
    replacement): an array (n_resamples, len(scores)). Every score list sees the same resamples, so the
    difference of two columns is a paired bootstrap of the change. NaN where a resample is constant."""
    columns = [np.asarray(gold, dtype=np.float64)] + [np.asarray(x, dtype=np.float64) for x in scores]
    n = len(columns[0])
    # each column as dense ranks (0..u-1, ties equal) once: a resample is then ranked by counting
    dense = [np.unique(c, return_inverse=True) for c in columns]
    rng = np.random.default_rng(seed)
    out = np.empty((n_resamples, len(scores)), dtype=np.float64)
    chunk = max(1, 2_000_000 // max(n, 1))  # resamples per pass: a few million cells of memory at most
    for start in range(0, n_resamples, chunk):
        idx = rng.integers(0, n, size=(min(chunk, n_resamples - start), n))
        ry = _resample_ranks(dense[0][1][idx], len(dense[0][0]))
        for j, (values, inverse) in enumerate(dense[1:]):
            rx = _resample_ranks(inverse[idx], len(values))
            denom = np.sqrt((rx**2).sum(1) * (ry**2).sum(1))
            with np.errstate(invalid="ignore", divide="ignore"):
                out[start : start + len(idx), j] = np.where(denom > 0, (rx * ry).sum(1) / denom, np.nan)
    return out


def _resample_ranks(codes: np.ndarray, n_codes: int) -> np.ndarray:
    """Average ranks within each row of `codes` (dense ranks of the original values), centred on zero: a
    value's rank is the count of smaller values in its row plus the middle of its ties (what rankdata gives)."""
    rows = len(codes)
    flat = (codes + np.arange(rows)[:, None] * n_codes).ravel()
    counts = np.bincount(flat, minlength=rows * n_codes).reshape(rows, n_codes).astype(np.float64)
    below = np.cumsum(counts, axis=1) - counts
    ranks = np.take_along_axis(below + (counts + 1) / 2, codes, axis=1)
    return ranks - (codes.shape[1] + 1) / 2  # the mean rank of n values is (n + 1) / 2


def interval(samples: np.ndarray, level: float = 0.95) -> tuple[float, float] | None:
    """The percentile interval holding `level` of the finite `samples`; None when too few are finite."""
    finite = samples[np.isfinite(samples)]
    if len(finite) < 10:
        return None
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(finite, [tail, 100 - tail])
    return float(lo), float(hi)


def similarity_ranks(values: Sequence[float]) -> np.ndarray:
    """Rank of each value, 1 = the most similar pair (highest value); ties share their average rank."""
    from scipy.stats import rankdata

    return rankdata(-np.asarray(values, dtype=np.float64), method="average")


def moved_pairs(
    pairs: Sequence[Pair], base: Sequence[float], tuned: Sequence[float], n: int = 5
) -> list[dict[str, object]]:
    """The `n` pairs whose rank moved most toward their gold rank with tuning, then the `n` that moved most
    away from it. A pair's rank is its place among all pairs (1 = most similar) by gold score, base cosine or
    tuned cosine; `toward gold` is how many places closer to its gold rank the tuned rank is than the base rank
    (negative: farther). These are the pairs that raised or lowered the Spearman change."""
    gold_rank = similarity_ranks([p[2] for p in pairs])
    base_rank, tuned_rank = similarity_ranks(base), similarity_ranks(tuned)
    toward = np.abs(base_rank - gold_rank) - np.abs(tuned_rank - gold_rank)
    order = np.argsort(-toward, kind="stable")
    n = min(n, len(pairs) // 2)
    helped = [i for i in order[:n] if toward[i] > 0]
    hurt = [i for i in order[::-1][:n] if toward[i] < 0]
    return [
        {
            "pair": f"{pairs[i][0]} · {pairs[i][1]}",
            "gold": pairs[i][2],
            "gold rank": round(float(gold_rank[i])),
            "base rank": round(float(base_rank[i])),
            "tuned rank": round(float(tuned_rank[i])),
            "toward gold": round(float(toward[i])),
        }
        for i in helped + hurt
    ]
