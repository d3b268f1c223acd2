"""Pairs from the user's own file: each string with a partner text (a term and its definition, a name and its
description, a question and its answer) as a positive in training, and a held-out measure of what tuning gained.

Cleaning (`clean_pairs`) keeps the strings as `mirror.data.clean_texts` keeps them (so the index, the maps and the
exports hold the same strings with or without a partner column) and gives each its partner, or None:
- a row whose string is empty, or a duplicate of an earlier one (case-insensitively), is dropped, as without
  partners: the first row of a string keeps its partner;
- an empty partner, or one equal to its string (no signal), leaves its string without a partner: it trains on its
  mirror views alone;
- a short partner (SHARED_WORDS words at most: an acronym, a code, a name, a headword) that several strings share is
  kept by each of them, up to SHARED_MOST rows a partner (a label more rows share is a category: the later ones train
  alone); `partner_groups` marks the rows sharing one, and the plan (mirror.plan) never puts two of them in one batch:
  each would be the other's false negative against the same positive;
- a longer partner an earlier row already has (a description copied into two rows) leaves the later strings without
  it, as before.

The held-out rows (`holdout`) are a seeded slice of the rows with a partner that never train (rows sharing a partner
held out, or not, together); after the run, `retrieval` ranks each one's string among all the strings for its partner
as the query, under the base and under the tuned encoder (what Search does with a description typed in; any string
of that partner counts as found), and `gain` gives MRR@10 and recall@1/@10 with bootstrap intervals.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mirror.data import CONTROL, SURROGATE, CleanStats, clean_texts, is_invisible

HOLDOUT_FRACTION = 0.1  # of the rows with a partner
HOLDOUT_MOST = 500  # rows held out at most: enough for an interval of a few points, little taken from training
HOLDOUT_LEAST = 20  # fewer rows with a partner than 2x this: nothing is held out (an interval would say nothing)
TOP_K = 10
BOOTSTRAP = 1000
SHARED_WORDS = 2  # a partner this short may be shared by several strings (an acronym with its expansions)
SHARED_MOST = 8  # rows that keep one shared partner at most (more share a category's label: the rest train alone)


@dataclass(frozen=True)
class PairStats:
    """What cleaning did to the partners: how many strings train with one, and why the others do not."""

    paired: int  # strings with a partner
    empty: int  # rows whose partner was empty (or only invisible characters)
    same: int  # partners equal to their string (case aside)
    shared: int  # partners an earlier row already had (a longer text, or a short one past SHARED_MOST rows)
    # duplicate strings (dropped by cleaning) whose partner was not their first row's: theirs is not kept (a place
    # name shared by several regions, each with its own code)
    other: int = 0

    def accounts_for(self, strings: int) -> bool:
        """Whether its reasons (empty, same, shared) count exactly the rows of `strings` without a partner (not: a
        load cut at a strings limit recounts only `paired`)."""
        return self.empty + self.same + self.shared == strings - self.paired

    def summary(self, strings: int) -> str:
        why = [
            f"{n:,} {what}"
            for n, what in (
                (self.empty, "empty"),
                (self.same, "equal to their string"),
                (self.shared, "shared with an earlier row"),
            )
            if n
        ]
        alone = strings - self.paired
        tail = (
            f"; {alone:,} train alone ({', '.join(why)})"
            if alone and why
            else (f"; {alone:,} train alone" if alone else "")
        )
        dropped = (
            f"; {self.other:,} duplicate string{'s' if self.other != 1 else ''} removed (case variants too) had "
            "another partner than their first row's (the first row's is kept)"
            if self.other
            else ""
        )
        return f"{self.paired:,} of {strings:,} strings have a partner{tail}{dropped}"


def clean_text(raw: Any) -> str:
    """One cell as `clean_texts` cleans a string: control characters and runs of spaces made one space."""
    text = " ".join(CONTROL.sub(" ", SURROGATE.sub("\ufffd", str(raw if raw is not None else ""))).split())
    return "" if is_invisible(text) else text


def clean_pairs(
    texts: Sequence[str], partners: Sequence[str | None], notes: Sequence[str] = ()
) -> tuple[list[str], list[str | None], CleanStats, PairStats]:
    """The strings `clean_texts(texts)` keeps, each with its partner (or None); see the module's docstring."""
    if len(partners) != len(texts):
        raise ValueError(f"{len(texts)} strings but {len(partners)} partners")
    kept, stats = clean_texts(texts, notes)
    first: dict[str, int] = {}  # cleaned string -> its first row
    by_key: dict[str, str] = {}  # the string, case aside -> its first row's partner (case aside)
    other = 0
    for row, raw in enumerate(texts):
        text = clean_text(raw)
        first.setdefault(text, row)
        partner = clean_text(partners[row]).casefold()
        if text and by_key.setdefault(text.casefold(), partner) != partner and partner:
            other += 1  # (a duplicate without a partner loses nothing)
    seen: dict[str, int] = {}  # partner (casefolded) -> the rows that keep it so far
    out: list[str | None] = []
    empty = same = shared = 0
    for text in kept:
        partner = clean_text(partners[first[text]])
        key = partner.casefold()
        if not partner:
            empty += 1
            partner = None
        elif key == text.casefold():
            same += 1
            partner = None
        elif key in seen and (len(partner.split()) > SHARED_WORDS or seen[key] >= SHARED_MOST):
            shared += 1
            partner = None
        else:
            seen[key] = seen.get(key, 0) + 1
        out.append(partner)
    paired = sum(p is not None for p in out)
    return kept, out, stats, PairStats(paired, empty, same, shared, other)


def partner_groups(partners: Sequence[str | None] | None) -> list[int] | None:
    """Each row's group of rows sharing its partner (case aside): the first such row's index, -1 for a row whose
    partner no other row has (or that has none). None when no two rows share one (every pairs run before short
    pairs): nothing to keep apart."""
    if partners is None:
        return None
    first: dict[str, int] = {}
    counts: dict[str, int] = {}
    for i, p in enumerate(partners):
        if p is not None:
            first.setdefault(p.casefold(), i)
            counts[p.casefold()] = counts.get(p.casefold(), 0) + 1
    if all(n == 1 for n in counts.values()):
        return None
    return [-1 if p is None or counts[p.casefold()] == 1 else first[p.casefold()] for p in partners]


def holdout(
    partners: Sequence[str | None], fraction: float = HOLDOUT_FRACTION, most: int = HOLDOUT_MOST, seed: int = 42
) -> list[int]:
    """The rows held out of training: a seeded `fraction` of those with a partner, at most `most` (none when fewer
    than 2 * HOLDOUT_LEAST rows have one, or `fraction` is 0). Rows sharing a partner (`partner_groups`) are held out
    together, so that no held-out partner is trained on with another of its strings: whole groups are drawn until
    the share is reached (never past `most`). Sorted."""
    rows = [i for i, p in enumerate(partners) if p is not None]
    if fraction <= 0 or len(rows) < 2 * HOLDOUT_LEAST:
        return []
    n = min(most, max(HOLDOUT_LEAST, round(fraction * len(rows))))
    groups = partner_groups(partners)
    if groups is None:
        return sorted(random.Random(seed).sample(rows, n))
    members: dict[int, list[int]] = {}
    for i in rows:
        members.setdefault(i if groups[i] < 0 else groups[i], []).append(i)
    keys = sorted(members)
    random.Random(seed).shuffle(keys)
    held: list[int] = []
    for key in keys:
        if len(held) + len(members[key]) <= n:
            held += members[key]
        if len(held) >= n:
            break
    return sorted(held)


def held_out_rows(partners: Sequence[str | None], config: Any) -> list[int]:
    """The rows a pairs run of `config` (a MirrorConfig) holds out of training: `holdout` at its share and seed. The
    run (HeldOut.for_run), its plan (mirror.plan.training_rows) and the app's estimate all hold out these."""
    return holdout(partners, config.pair_holdout, seed=config.seed)


def retrieval(
    string_vectors: np.ndarray,
    query_vectors: np.ndarray,
    targets: Sequence[int],
    k: int = TOP_K,
    accept: Sequence[Sequence[int]] | None = None,
) -> np.ndarray:
    """For each query (a held-out row's partner, as unit vectors) the rank (1-based) of its target string among all
    the strings (`string_vectors`, unit rows) by cosine, or 0 when it is not in the top `k`. With `accept` (per query,
    every string that counts as found: the strings sharing that partner), the rank of the first of them. Exact, in
    blocks."""
    ranks = np.zeros(len(targets), dtype=np.int64)
    for start in range(0, len(targets), 256):
        scores = query_vectors[start : start + 256] @ string_vectors.T
        top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        for j, row in enumerate(top):
            wanted = [targets[start + j]] if accept is None else accept[start + j]
            hit = np.nonzero(np.isin(row, wanted))[0]
            ranks[start + j] = int(hit[0]) + 1 if hit.size else 0
    return ranks


def figures(ranks: np.ndarray) -> dict[str, float]:
    """MRR@10, recall@1 and recall@10 (in %) of `retrieval`'s ranks."""
    found = ranks > 0
    mrr = np.where(found, 1.0 / np.maximum(ranks, 1), 0.0)
    return {"mrr10": 100 * float(mrr.mean()), "r1": 100 * float((ranks == 1).mean()), "r10": 100 * float(found.mean())}


@dataclass(frozen=True)
class PairGain:
    """The held-out measure of a pairs run: base and tuned figures with 95% bootstrap intervals, and the verdict."""

    rows: int
    string_column: str
    partner_column: str
    base: dict[str, float]
    tuned: dict[str, float]
    low: dict[str, float] = field(default_factory=dict)  # the interval of tuned - base, per figure
    high: dict[str, float] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """better / same / worse: whether the interval of the MRR@10 difference is above, around or below 0."""
        if self.low["mrr10"] > 0:
            return "better"
        if self.high["mrr10"] < 0:
            return "worse"
        return "same"

    def sentence(self) -> str:
        """The gain in one sentence a user reads."""
        return (
            f"On {self.rows:,} rows it never trained on, the tuned model finds a row's {self.string_column} from its "
            f"{self.partner_column} at rank 1 for {self.tuned['r1']:.0f}% (base {self.base['r1']:.0f}%), in its top 10 "
            f"for {self.tuned['r10']:.0f}% (base {self.base['r10']:.0f}%); MRR@10 {self.base['mrr10']:.1f} → "
            f"{self.tuned['mrr10']:.1f}, {self.tuned['mrr10'] - self.base['mrr10']:+.1f} "
            f"[{self.low['mrr10']:+.1f}, {self.high['mrr10']:+.1f}] (95%)."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "string_column": self.string_column,
            "partner_column": self.partner_column,
            "base": self.base,
            "tuned": self.tuned,
            "low": self.low,
            "high": self.high,
            "verdict": self.verdict,
            "sentence": self.sentence(),
        }

    @staticmethod
    def from_dict(data: dict[str, Any]) -> PairGain:
        keys = ("rows", "string_column", "partner_column", "base", "tuned", "low", "high")
        return PairGain(**{k: data[k] for k in keys})


def gain(
    base_ranks: np.ndarray,
    tuned_ranks: np.ndarray,
    string_column: str = "string",
    partner_column: str = "partner",
    seed: int = 0,
) -> PairGain:
    """Base and tuned figures of the same held-out rows, and the 95% paired bootstrap interval of each difference."""
    rng = np.random.default_rng(seed)
    n = len(base_ranks)
    picks = rng.integers(0, n, size=(BOOTSTRAP, n))
    diffs: dict[str, list[float]] = {"mrr10": [], "r1": [], "r10": []}
    for pick in picks:
        b, t = figures(base_ranks[pick]), figures(tuned_ranks[pick])
        for key in diffs:
            diffs[key].append(t[key] - b[key])
    low = {k: float(np.percentile(v, 2.5)) for k, v in diffs.items()}
    high = {k: float(np.percentile(v, 97.5)) for k, v in diffs.items()}
    return PairGain(n, string_column, partner_column, figures(base_ranks), figures(tuned_ranks), low, high)


@dataclass
class HeldOut:
    """A pairs run's held-out rows: what trains (every other row) and how well an encoder finds each held-out row's
    string from its partner. Take the base's ranks before training: the encoder is tuned in place."""

    texts: list[str]
    partners: list[str | None]
    rows: list[int]  # held out, sorted
    columns: tuple[str, str] = ("string", "partner")

    @staticmethod
    def of(
        texts: Sequence[str],
        partners: Sequence[str | None],
        fraction: float = HOLDOUT_FRACTION,
        seed: int = 42,
        columns: tuple[str, str] = ("string", "partner"),
    ) -> HeldOut:
        return HeldOut(list(texts), list(partners), holdout(partners, fraction, seed=seed), columns)

    @staticmethod
    def for_run(
        texts: Sequence[str],
        partners: Sequence[str | None],
        config: Any,
        columns: tuple[str, str] = ("string", "partner"),
    ) -> HeldOut:
        """The held-out rows of a pairs run of `config` (a MirrorConfig): `held_out_rows`."""
        return HeldOut(list(texts), list(partners), held_out_rows(partners, config), columns)

    def training(self) -> tuple[list[str], list[str | None]]:
        """The rows that train: all but the held-out ones."""
        held = set(self.rows)
        keep = [i for i in range(len(self.texts)) if i not in held]
        return [self.texts[i] for i in keep], [self.partners[i] for i in keep]

    def ranks(self, encoder: Any, string_vectors: np.ndarray | None = None) -> np.ndarray:
        """Each held-out row's string's rank (1-10, 0 past 10) among all the strings for its partner as the query,
        under `encoder` (its vectors of all the strings: `string_vectors`, or encoded here)."""
        if string_vectors is None:
            string_vectors = encoder.encode(self.texts, normalize=True)
        queries = encoder.encode([self.partners[i] for i in self.rows], normalize=True)
        vectors, queries = np.asarray(string_vectors, dtype=np.float32), np.asarray(queries, dtype=np.float32)
        return retrieval(vectors, queries, self.rows, accept=self.accepted())

    def accepted(self) -> list[list[int]] | None:
        """Per held-out row, the strings that count as found from its partner: every row sharing it (an acronym's
        expansions: `holdout` keeps them out of training together); None when no two rows share one."""
        groups = partner_groups(self.partners)
        if groups is None:
            return None
        members: dict[int, list[int]] = {}
        for i, g in enumerate(groups):
            if g >= 0:
                members.setdefault(g, []).append(i)
        return [members[groups[i]] if groups[i] >= 0 else [i] for i in self.rows]

    def gain(self, base_ranks: np.ndarray, tuned_ranks: np.ndarray) -> PairGain:
        return gain(base_ranks, tuned_ranks, *self.columns)
