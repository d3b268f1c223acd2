"""The general checks: a tuned encoder against its base on bundled general sets (word pairs, sentence pairs, real
long documents), each change with a paired bootstrap 95% interval and a plain word (better, same, worse).

The engine's half of the forgetting check: `python -m mirror check` and the app (explorer/compare/forgetting.py,
which adds the base-score cache and the app's wording) both call `run_checks`. Two kinds of check:

- "pairs": Spearman ×100 of the pairs' cosines with gold scores (SimLex-999, WordSim-353, STS-B dev); the interval
  resamples the pairs.
- "docs": real documents of 150-256 tokens, each from a source (a book) and in a group (a kind of book). For each
  document, every other document is ranked by cosine and its top 10 (what a search shows) scored by nDCG@10 ×100
  with graded relevance: 3 for its neighbours (the documents just before and after it in its source), 2 for the
  rest of its source, 1 for the other sources of its group, 0 for the rest. So it rewards ordering
  related-but-different documents (the next chapter above another chapter of the book, above a chapter of another
  book of the same kind, above the rest), not finding a document's own parts. The check's figure is the mean over
  documents; the interval resamples them. Graded nDCG over the whole ranking moves less (bench/RESULTS.md).
- "links": real documents with links between them (the Jargon File's entries and their cross-references), scored
  as "docs" with grades from the links: 2 one document links to the other, 1 both link to a third (any document of
  the source, in the file or not), 0 otherwise.

Each check has a "check" half (what runs after every run and on the command line) and a "dev" half (what chose the
defaults and the remedies): pairs alternate; documents are split by source within each group, seeded, so the halves
share no document and no source; a "links" file says each document's half (the Jargon File: the 40-110-word
entries are checked, the 110-450-word ones are dev).

MIRROR_CHECK_ITEMS=N (an operator's setting, read once at import) scores at most N items of each check's half: a
small host's checks in less time, with wider intervals (the verdict words allow for that: the interval decides).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mirror.bundled import bundled
from mirror.data import decode
from mirror.errors import MirrorError
from mirror.evaluate import Pair, bootstrap_spearman, interval, pair_cosines, read_pairs, spearman

GOLD = bundled("gold")  # the bundled data (mirror.bundled)
# The blend suggested when a check is worse (and where the app's blend slider then starts): chosen on the dev half by
# bench/bench_forgetting.py, see bench/RESULTS.md "Forgetting check and blend". Never applied without the user.
SUGGESTED_ALPHA = 0.5
BOOTSTRAP_RESAMPLES, SPLIT_SEED = 500, 7
TOP_K = 10  # the documents check scores the top of each ranking: what a search shows
VERDICTS = ("better", "same", "worse")


@dataclass(frozen=True)
class Check:
    """One general set: its file in examples/gold, what it tests, how many items of a half it scores, its kind
    ("pairs" or "docs", see the module docstring) and its margin: a change of fewer points is never better or worse
    (the seed-to-seed noise of a run)."""

    name: str
    file: str
    what: str
    max_items: int
    kind: str = "pairs"
    margin: float = 1.0

    @property
    def metric(self) -> str:
        return "Spearman ×100" if self.kind == "pairs" else f"graded nDCG@{TOP_K} ×100"

    @property
    def unit(self) -> str:
        return "pairs" if self.kind == "pairs" else "documents"


@dataclass(frozen=True)
class Docs:
    """Documents of a "docs" check: parallel tuples of id, group, source, text and line (the document's place in its
    file: two documents of a source on consecutive lines are neighbours)."""

    ids: tuple[str, ...]
    groups: tuple[str, ...]
    sources: tuple[str, ...]
    texts: tuple[str, ...]
    lines: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, keep: Sequence[int]) -> Docs:
        columns = (self.ids, self.groups, self.sources, self.texts, self.lines)
        return Docs(*(tuple(col[i] for i in keep) for col in columns))


@dataclass(frozen=True)
class LinkedDocs:
    """Documents of a "links" check: parallel tuples of id, half ("check" or "dev"), text and the ids each document
    links to or is linked from (documents outside the file included: two documents linked through a third are
    related)."""

    ids: tuple[str, ...]
    halves: tuple[str, ...]
    texts: tuple[str, ...]
    links: tuple[frozenset[str], ...]

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, keep: Sequence[int]) -> LinkedDocs:
        columns = (self.ids, self.halves, self.texts, self.links)
        return LinkedDocs(*(tuple(col[i] for i in keep) for col in columns))


DocItems = Docs | LinkedDocs  # the items of a documents check ("docs" or "links")


LONG_DOCS = Check(
    "Long documents",
    "bible-docs.tsv",
    "which real 150-256-token documents are related: next chapter, same book, same kind of book",
    240,
    kind="docs",
)
# The Jargon File's entries of 40-110 words (short news articles' length), all 997 of them: fewer would not see the
# words preset's gain beyond the check's noise (bench/RESULTS.md, "Short articles").
SHORT_ARTICLES = Check(
    "Short articles",
    "jargon-docs.tsv",
    "which real 40-110-word articles are related: one refers to the other, or both to a third",
    1000,
    kind="links",
)


def capped(checks: Sequence[Check], n: int) -> tuple[Check, ...]:
    """`checks` scoring at most `n` items each (0: as they are)."""
    return tuple(dataclasses.replace(c, max_items=min(c.max_items, n)) if n > 0 else c for c in checks)


def items_cap(env: dict[str, str] | None = None) -> int:
    """MIRROR_CHECK_ITEMS: at most this many items of each check (0 or unset: all). The app's settings refuse a bad
    value at start (explorer.settings); here one is read as unset."""
    raw = (os.environ if env is None else env).get("MIRROR_CHECK_ITEMS", "").strip()
    try:
        return max(0, int(float(raw))) if raw else 0
    except ValueError:
        return 0


CHECKS = capped(
    (
        Check("SimLex-999", "simlex999.txt", "word similarity", 500),
        Check("WordSim-353", "wordsim353.tsv", "word relatedness", 200),
        Check("STS-B dev", "sts-dev.csv", "sentence similarity", 200),
        LONG_DOCS,
        SHORT_ARTICLES,
    ),
    items_cap(),
)
# STS-B test sentences joined 10 at a time (scripts/make_long_docs.py): long, but with STS's short, high-overlap
# character, so it cannot see what tuning on sentences does to real documents. Kept as an extra, not run by default.
JOINED_STS = Check("Joined STS pairs", "joined-sts-pairs.tsv", "STS-B test pairs joined 10 at a time", 60)
ALL_CHECKS = (*CHECKS, JOINED_STS)


def read_docs(path: str | Path) -> Docs:
    """A documents file: `id<TAB>group<TAB>source<TAB>text` per line, `#` lines are comments."""
    path = Path(path)
    if not path.is_file():
        raise MirrorError(f"{path}: no such file")
    cols: list[list[str]] = [[], [], [], []]
    lines: list[int] = []
    for lineno, line in enumerate(decode(path.read_bytes(), path.name).splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 4 or not all(p.strip() for p in parts):
            raise MirrorError(f"{path.name}: line {lineno} is not `id<TAB>group<TAB>source<TAB>text`")
        for col, value in zip(cols, parts, strict=True):
            col.append(value.strip())
        lines.append(lineno)
    if len(set(cols[0])) != len(cols[0]):
        raise MirrorError(f"{path.name}: document ids are not unique")
    if len(set(cols[1])) < 2:
        raise MirrorError(f"{path.name}: needs documents of at least 2 groups")
    return Docs(*(tuple(c) for c in cols), tuple(lines))


def read_linked_docs(path: str | Path) -> LinkedDocs:
    """A links file: `id<TAB>half<TAB>headword<TAB>links<TAB>text` per line (links: space-separated ids, `-` for
    none; half: check or dev), `#` lines are comments."""
    path = Path(path)
    if not path.is_file():
        raise MirrorError(f"{path}: no such file")
    ids: list[str] = []
    halves: list[str] = []
    texts: list[str] = []
    links: list[frozenset[str]] = []
    for lineno, line in enumerate(decode(path.read_bytes(), path.name).splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("\t")]
        if len(parts) != 5 or not all(parts) or parts[1] not in ("check", "dev"):
            raise MirrorError(f"{path.name}: line {lineno} is not `id<TAB>check|dev<TAB>headword<TAB>links<TAB>text`")
        ids.append(parts[0])
        halves.append(parts[1])
        links.append(frozenset() if parts[3] == "-" else frozenset(parts[3].split()))
        texts.append(parts[4])
    if len(set(ids)) != len(ids):
        raise MirrorError(f"{path.name}: document ids are not unique")
    return LinkedDocs(tuple(ids), tuple(halves), tuple(texts), tuple(links))


def split_docs(docs: Docs, half: str, seed: int = SPLIT_SEED) -> Docs:
    """One half of `docs`: within each group its sources are shuffled (seeded) and dealt alternately to "check"
    and "dev", so the halves share no source; documents keep their file order."""
    if half not in ("check", "dev"):
        raise ValueError(f"half must be 'check' or 'dev', not {half!r}")
    sources_of: dict[str, list[str]] = defaultdict(list)
    for group, source in zip(docs.groups, docs.sources, strict=True):
        if source not in sources_of[group]:
            sources_of[group].append(source)
    rng, side = random.Random(seed), {}
    for group in sorted(sources_of):
        sources = sorted(sources_of[group])
        rng.shuffle(sources)
        side.update({s: "check" if i % 2 else "dev" for i, s in enumerate(sources)})
    return docs.subset([i for i, s in enumerate(docs.sources) if side[s] == half])


def cap_docs(docs: Docs, n: int) -> Docs:
    """At most `n` documents, taken round-robin over the sources (file order within each), so every source and
    group keeps its share."""
    queues: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(docs.sources):
        queues[s].append(i)
    keep: list[int] = []
    while len(keep) < min(n, len(docs)):
        for s in list(queues):
            if queues[s] and len(keep) < n:
                keep.append(queues[s].pop(0))
    return docs.subset(sorted(keep))


def check_items(check: Check, half: str = "check") -> tuple[Pair, ...] | DocItems:
    """The items a check scores: its "check" half (odd pairs; half of the sources; the documents the file marks)
    or its "dev" half, capped.
    Read once per process: every run, and every time estimate, asks for them."""
    return _check_items(check, half, GOLD)


@functools.lru_cache(maxsize=32)
def _check_items(check: Check, half: str, gold: Path) -> tuple[Pair, ...] | DocItems:
    if half not in ("check", "dev"):
        raise ValueError(f"half must be 'check' or 'dev', not {half!r}")
    if check.kind == "links":
        linked = read_linked_docs(gold / check.file)
        return linked.subset([i for i, h in enumerate(linked.halves) if h == half][: check.max_items])
    if check.kind == "docs":
        return cap_docs(split_docs(read_docs(gold / check.file), half), check.max_items)
    pairs = read_pairs(gold / check.file)
    picked = pairs[1::2] if half == "check" else pairs[0::2]
    return tuple(picked[: check.max_items])


def check_texts(check: Check, half: str = "check") -> list[str]:
    """The distinct strings a check encodes (what its cost is made of)."""
    items = check_items(check, half)
    if isinstance(items, DocItems):
        return list(items.texts)
    return sorted({p[0] for p in items} | {p[1] for p in items})


def relevance(docs: DocItems) -> np.ndarray:
    """The graded relevance of document j to document i (n x n, int): 3 neighbours (consecutive lines of one
    source), 2 same source, 1 same group, 0 otherwise (linked documents: see `linked_relevance`); -1 on the diagonal
    (a document is not ranked against itself)."""
    if isinstance(docs, LinkedDocs):
        return linked_relevance(docs)
    g = np.unique(np.asarray(docs.groups), return_inverse=True)[1]
    s = np.unique(np.asarray(docs.sources), return_inverse=True)[1]
    line = np.asarray(docs.lines)
    same_source = s[:, None] == s[None, :]
    grade = np.where(g[:, None] == g[None, :], 1, 0)
    grade = np.where(same_source, 2, grade)
    grade = np.where(same_source & (np.abs(line[:, None] - line[None, :]) == 1), 3, grade)
    np.fill_diagonal(grade, -1)
    return grade


def linked_relevance(docs: LinkedDocs) -> np.ndarray:
    """The graded relevance of linked documents (n x n, int): 2 one links to the other, 1 both link to a third
    document (in the file or not), 0 otherwise; -1 on the diagonal."""
    columns = {t: c for c, t in enumerate(sorted(set().union(*docs.links, docs.ids)))}
    incidence = np.zeros((len(docs), len(columns)), dtype=np.float32)  # float: the product below runs on BLAS
    for i, linked in enumerate(docs.links):
        incidence[i, [columns[t] for t in linked]] = 1
    own = np.array([columns[t] for t in docs.ids])
    direct = incidence[:, own] > 0
    grade = np.where(direct | direct.T, 2, np.where(incidence @ incidence.T > 0, 1, 0))
    np.fill_diagonal(grade, -1)
    return grade


def graded_ndcg(vectors: np.ndarray, grades: np.ndarray, k: int | None = TOP_K) -> np.ndarray:
    """Per document (row of `grades`, see `relevance`): the nDCG@k of the other documents ranked by cosine (rows of
    `vectors` are unit length; k=None: the whole ranking), gains 2^grade - 1; a grade below 0 leaves a document out
    of the row's ranking (the diagonal's -1: a document is not ranked against itself). NaN for a row with nothing
    relevant."""
    v = np.asarray(vectors, dtype=np.float64)
    sims = v @ v.T
    n = len(v)
    discounts = 1.0 / np.log2(np.arange(2, n + 2))
    out = np.full(n, np.nan)
    for i in range(n):
        ranked = grades[i] >= 0
        gains = 2.0 ** grades[i, ranked] - 1
        top = len(gains) if k is None else min(k, len(gains))
        discount = discounts[:top]
        ideal = (np.sort(gains)[::-1][:top] * discount).sum()
        if ideal <= 0:
            continue
        order = np.argsort(-sims[i, ranked], kind="stable")[:top]
        out[i] = (gains[order] * discount).sum() / ideal
    return out


def side(encoder, check: Check, items: tuple[Pair, ...] | DocItems) -> np.ndarray:
    """What one encoder contributes to a check, before the comparison: the pairs' cosines, or each document's
    nDCG (float64)."""
    if isinstance(items, DocItems):
        return graded_ndcg(encoder.encode(list(items.texts), normalize=True), relevance(items))
    return pair_cosines(encoder, items)


_KEPT_SIDES: dict[tuple[str, str, str, int], np.ndarray] = {}  # (base key, check, half, items): a base's side
_KEPT_LOCK = threading.Lock()
KEPT_SIDES_MOST = 64  # a few bases' worth of sides; a long-lived process with many bases starts over


def side_key(encoder: Any) -> str | None:
    """What identifies an encoder's side of a check: its weights' fingerprint and its length cap; None for an
    encoder without a fingerprint (never kept)."""
    fingerprint = getattr(encoder, "fingerprint", None)
    return None if fingerprint is None else f"{fingerprint()}/{getattr(encoder, 'max_seq_length', '')}"


def kept_side(base: Any, check: Check, half: str, items: tuple[Pair, ...] | DocItems) -> np.ndarray:
    """A base model's `side` of a check's half, computed once per base (by its weights' fingerprint) and kept for the
    process: the app's checks after every run (explorer.compare.forgetting) and a pairs run's blend choice
    (mirror.choose, on the dev halves) then pay for the tuned model only. Encoders without a fingerprint: not kept."""
    key = side_key(base)
    if key is None:
        return side(base, check, items)
    entry = (key, check.name, half, len(items))
    with _KEPT_LOCK:
        cached = _KEPT_SIDES.get(entry)
    if cached is None:
        cached = side(base, check, items)
        with _KEPT_LOCK:
            if len(_KEPT_SIDES) > KEPT_SIDES_MOST:
                _KEPT_SIDES.clear()
            _KEPT_SIDES[entry] = cached
    return cached


def sides_kept(base: Any, checks: Sequence[Check], half: str) -> bool:
    """Whether the base's side of every check's half is kept already (`kept_side`)."""
    key = side_key(base)
    if key is None:
        return False
    with _KEPT_LOCK:
        return all((key, c.name, half, len(check_items(c, half))) in _KEPT_SIDES for c in checks)


def bootstrap_mean_difference(
    base: np.ndarray, tuned: np.ndarray, n_resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> tuple[float, float] | None:
    """The 95% interval of mean(tuned - base) over resamples of the items (paired: each resample takes the same
    items from both). NaN items are left out; None under 2 items."""
    d = np.asarray(tuned, dtype=np.float64) - np.asarray(base, dtype=np.float64)
    d = d[~np.isnan(d)]
    if len(d) < 2:
        return None
    idx = np.random.default_rng(seed).integers(0, len(d), size=(n_resamples, len(d)))
    means = d[idx].mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def verdict_word(delta: float, ci: Sequence[float] | None, margin: float) -> str:
    """The verdict word: worse for a drop of more than `margin` points whose interval lies below zero, better for
    the mirror image, else same."""
    if delta < -margin and (ci is None or ci[1] < 0):
        return "worse"
    if delta > margin and (ci is None or ci[0] > 0):
        return "better"
    return "same"


def score(items: tuple[Pair, ...] | DocItems, one_side: np.ndarray) -> float:
    """A check's figure for one encoder's side (`side`), unrounded: Spearman ×100 of the pairs' cosines with the gold
    scores, or the documents' mean nDCG ×100."""
    if isinstance(items, DocItems):
        return 100 * float(np.nanmean(one_side))
    return 100 * spearman(one_side, [p[2] for p in items])


def compare(check: Check, items: tuple[Pair, ...] | DocItems, base_side: np.ndarray, tuned_side: np.ndarray) -> dict:
    """One check's row: base and tuned scores, the change with its 95% interval, and the verdict word."""
    b, t = score(items, base_side), score(items, tuned_side)
    if isinstance(items, DocItems):
        ci = bootstrap_mean_difference(100 * base_side, 100 * tuned_side)
    else:
        gold = [p[2] for p in items]
        boot = bootstrap_spearman(gold, base_side, tuned_side, n_resamples=BOOTSTRAP_RESAMPLES, seed=0)
        ci = interval(100 * (boot[:, 1] - boot[:, 0]))
    word = verdict_word(t - b, ci, check.margin)
    return {
        "name": check.name,
        "what": check.what,
        "metric": check.metric,
        "items": len(items),
        "unit": check.unit,
        "base": round(b, 1),
        "tuned": round(t, 1),
        "delta": round(t - b, 1),
        "ci": [round(ci[0], 1), round(ci[1], 1)] if ci else None,
        "verdict": word,
        "worse": word == "worse",
    }


def run_checks(
    base,
    tuned,
    checks: Sequence[Check] | None = None,
    half: str = "check",
    base_side: Callable[[Any, Check, Any], np.ndarray] = side,
) -> list[dict]:
    """Every check's row (see `compare`; default: CHECKS). `base_side(base, check, items)` may serve the base's side
    from a cache."""
    rows = []
    for check in CHECKS if checks is None else checks:
        items = check_items(check, half)
        rows.append(compare(check, items, base_side(base, check, items), side(tuned, check, items)))
    return rows


def worse_rows(rows: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """The checks whose verdict is worse, and them listed for the user ("name (what): base → tuned; ...")."""
    worse = [r for r in rows if word_of(r) == "worse"]
    return worse, "; ".join(f"{r['name']} ({r.get('what', '')}): {r['base']:.1f} → {r['tuned']:.1f}" for r in worse)


def no_worse(rows: Sequence[dict[str, Any]], who: str = "the tuned model") -> str:
    """The sentence for checks none of which is worse: "General checks: WHO is no worse ... and better on ..."."""
    better = [r["name"] for r in rows if word_of(r) == "better"]
    gained = f" and better on {', '.join(better)}" if better else ""
    return f"General checks: {who} is no worse than the base on any of them{gained}."


def summary(rows: Sequence[dict[str, Any]]) -> str:
    """What the checks mean for the user, in plain words."""
    worse, listed = worse_rows(rows)
    if not worse:
        return no_worse(rows)
    return (
        f"Tuning made the model worse on {len(worse)} general check{'s' if len(worse) > 1 else ''}: {listed}. "
        f"If you will search texts like these, blend at α = {SUGGESTED_ALPHA:g} (where tuning forgot on our dev sets, "
        "that gave back most of the loss and kept the most of the gain on the tuning's own kind of strings), or tune "
        "on strings more like the ones you will search."
    )


def blend_summary(rows: Sequence[dict[str, Any]], as_trained: bool = False) -> str:
    """What a blend's checks mean, naming it a blend (`summary` speaks of "the tuned model" and, when a check is
    worse, suggests a blend, which this already is); `as_trained`: α 1 served again, the tuned weights as trained
    (named so, not "the blend")."""
    worse, listed = worse_rows(rows)
    who = "the tuned model as trained" if as_trained else "the blend"
    if not worse:
        return no_worse(rows, who)
    n = len(worse)
    return (
        f"{who[0].upper()}{who[1:]} is worse than the base on {n} general check{'s' if n > 1 else ''}: {listed}. "
        "A lower α keeps more of the base (α = 0 is the base itself)."
    )


def word_of(row: dict[str, Any]) -> str:
    """A row's verdict word; rows kept before the words existed (a run's stats) had only `worse`."""
    return row.get("verdict") or ("worse" if row.get("worse") else "same")


def json_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as `python -m mirror check --json` prints them: check, what, base, tuned, low, high (the interval
    of tuned - base) and verdict."""
    return [
        {
            "check": r["name"],
            "what": r["what"],
            "base": r["base"],
            "tuned": r["tuned"],
            "low": r["ci"][0] if r.get("ci") else None,
            "high": r["ci"][1] if r.get("ci") else None,
            "verdict": r["verdict"],
        }
        for r in rows
    ]
