"""The Search tab's work: the tuned and the base encoder's top k per query compared (each hit's rank on the other
side, what only one side found), the query's own string hidden on request, and base-encoder indexes of the
loaded strings for searching before any tuning.

Plain values in and out; `app.searcher.search` (explorer.compare.searching) picks the indexes, ui.render draws the results.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from explorer.resources.sessions import texts_key

if TYPE_CHECKING:
    from index.store import Hit, VectorIndex
    from mirror.encoder import Encoder

BASE_INDEXES_KEPT = 4  # base-only indexes held in memory (each is the loaded strings' vectors)


def is_query(text: str, query: str) -> bool:
    """Whether a hit's `text` is the `query` itself, but for case and spacing."""
    return " ".join(text.split()).casefold() == " ".join(query.split()).casefold()


def without_query(hits: Sequence[Hit], query: str, k: int) -> list[Hit]:
    """`hits` less those that are the `query` itself (`is_query`), renumbered from 1, at most `k`."""
    from index.store import Hit

    kept = [h for h in hits if not is_query(h.text, query)][:k]
    return [Hit(h.text, h.score, rank, h.id) for rank, h in enumerate(kept, 1)]


def with_partner(row: dict[str, Any], hit: Hit, partners: Sequence[str | None] | None) -> dict[str, Any]:
    """`row` with the hit's `partner` (its row's partner text in a pairs run, None for a row without one) when the
    searched strings have partners (`partners`, row for row with the index); `row` as it was otherwise."""
    if partners is not None:
        row["partner"] = partners[hit.id] if 0 <= hit.id < len(partners) else None
    return row


def compare_hits(
    tuned: Sequence[Hit], base: Sequence[Hit], partners: Sequence[str | None] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Both sides' hits as dicts. A tuned hit carries `base_rank` (its rank in the base top k, None when the
    base encoder did not find it), a base hit `tuned_rank`; `only_here` marks a hit the other side lacks; with
    `partners` (a pairs run's, row for row with the indexes), each hit its `partner` too."""
    tuned_rank = {h.text: h.rank for h in tuned}
    base_rank = {h.text: h.rank for h in base}

    def rows(hits: Sequence[Hit], other: dict[str, int], key: str) -> list[dict[str, Any]]:
        return [
            with_partner(
                {
                    "rank": h.rank,
                    "text": h.text,
                    "score": round(float(h.score), 4),
                    "only_here": h.text not in other,
                    key: other.get(h.text),
                },
                h,
                partners,
            )
            for h in hits
        ]

    return rows(tuned, base_rank, "base_rank"), rows(base, tuned_rank, "tuned_rank")


def base_only_hits(hits: Sequence[Hit], partners: Sequence[str | None] | None = None) -> list[dict[str, Any]]:
    """The base encoder's hits when there is no tuned model to compare with (each with its `partner`: `with_partner`)."""
    return [
        with_partner(
            {"rank": h.rank, "text": h.text, "score": round(float(h.score), 4), "only_here": False, "tuned_rank": None},
            h,
            partners,
        )
        for h in hits
    ]


def search_both(
    tuned: VectorIndex | None,
    base: VectorIndex,
    queries: list[str],
    k: int,
    hide_query: bool,
    partners: Partners | None = None,
) -> list[dict[str, Any]]:
    """Each query's hits with both indexes (only `base` when `tuned` is None: "base_only"), compared.
    With `hide_query`, a hit that is the query itself is dropped and the next one takes its place. With `partners`
    (a pairs run's strings: their partners row for row with the indexes, and the two columns), each hit carries its
    `partner` and each query's result the `columns` searched and shown beside ({"strings": …, "partner": …})."""
    fetch = k + 1 if hide_query else k  # strings are unique up to case, so the query matches one row at most
    base_hits = base.search(queries, fetch)
    tuned_hits = tuned.search(queries, fetch) if tuned is not None else [[] for _ in queries]
    out = []
    for q, th_all, bh_all in zip(queries, tuned_hits, base_hits, strict=True):
        th, bh = (without_query(h, q, k) if hide_query else list(h[:k]) for h in (th_all, bh_all))
        own = next((h for h in (*th_all, *bh_all) if hide_query and is_query(h.text, q)), None)
        rows = partners.rows if partners is not None else None
        if tuned is None:
            found = {"query": q, "tuned": [], "base": base_only_hits(bh, rows), "base_only": True}
        else:
            t_rows, b_rows = compare_hits(th, bh, rows)
            found = {"query": q, "tuned": t_rows, "base": b_rows, "base_only": False}
        if partners is not None:
            found["columns"] = {"strings": partners.columns[0], "partner": partners.columns[1]}
            if own is not None:  # the query's own row, hidden: its partner is what a name typed asks for (a
                # newcomer's "German" on a languages file listed Swiss German and Low German, never German's code)
                found["hidden"] = with_partner({"text": own.text}, own, partners.rows)
        out.append(found)
    return out


@dataclass(frozen=True)
class Partners:
    """The partners of searched strings (a pairs run's, or strings loaded with a partner column): row for row with
    the indexes (None for a row without one), and the two columns' names (strings, partners)."""

    rows: Sequence[str | None]
    columns: tuple[str, str] = ("string", "partner")


class BaseIndexes:
    """Base-encoder indexes of loaded strings, for searching before any tuning: built on first use, kept by
    (model, pooling, strings) so sessions that load the same strings share one, least recently used dropped."""

    def __init__(self, kept: int = BASE_INDEXES_KEPT):
        self.kept = kept
        self._indexes: OrderedDict[tuple[str, str, str], VectorIndex] = OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict[tuple[str, str, str], threading.Lock] = {}

    def get(self, model: str, encoder: Encoder, texts: Sequence[str]) -> VectorIndex:
        """The index of `texts` embedded by `encoder` (the base model `model`), built once however many ask."""
        from index.store import VectorIndex

        key = (model, encoder.pooling, texts_key(texts))
        with self._lock:
            if key in self._indexes:
                self._indexes.move_to_end(key)
                return self._indexes[key]
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # one build per key; other keys build (or are searched) meanwhile
            with self._lock:
                if key in self._indexes:
                    return self._indexes[key]
            index = VectorIndex.build(encoder, list(texts), gpu=False)
            with self._lock:
                self._indexes[key] = index
                self._key_locks.pop(key, None)
                while len(self._indexes) > self.kept:
                    self._indexes.popitem(last=False)
            return index
