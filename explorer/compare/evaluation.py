"""The Evaluate tab's work: Spearman of cosine vs gold scores per encoder, with bootstrap 95% intervals, the pairs
whose rank moved most with tuning, notes for sets too small to trust, and progress while strings are encoded.

Plain values in and out; `app.searcher.evaluate_report` (explorer.compare.searching) picks the encoders, ui/evaluate.py draws the report
(ui.render_eval).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.events import Phase
from explorer.share.uploads import display_name
from explorer.tune.inputs import EXAMPLES_DIR, GOLD_SETS
from explorer.words import fmt_seconds
from mirror.data import decode, fmt_size
from mirror.errors import MirrorError
from mirror.evaluate import (
    Pair,
    bootstrap_spearman,
    interval,
    moved_pairs,
    pair_cosines,
    pair_strings,
    parse_pairs,
    read_pairs,
    spearman,
)

FEW_PAIRS = 50  # below this a Spearman swings with the sample of pairs: the user gets a note
N_RESAMPLES = 1000
SEED = 0  # fixed: the same pairs give the same interval every time
MOVED_SHOWN = 5  # pairs per direction (toward / away from gold) in the moved-pairs table

if TYPE_CHECKING:
    from explorer.resources.record import RunInfo


@dataclass(frozen=True)
class EvalReport:
    """One evaluation: a row per set (Spearman and its 95% interval per encoder, the change), the pairs that
    moved most per set (tuned only), and notes for the user."""

    rows: list[dict[str, Any]]
    moved: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    encoders: tuple[str, ...] = ("base", "tuned")
    # the run evaluated (None: the base model alone), whatever is served by the time the report is drawn: the page
    # names it (ui.render.run_caption) and heads its moved pairs for it (ui.render.moved_header: "…with the blend…")
    run: RunInfo | None = None
    served: str = "tuned"  # the "tuned" encoder's name on screen: "blend α=0.5" for a blend (runfacts.served_label)


def load_sets(
    gold: Sequence[str] | None, pairs_path: str | None, max_bytes: int, max_pairs: int | None = None
) -> list[tuple[str, list[Pair]]]:
    """The chosen gold sets and the uploaded pairs file, parsed; MirrorError for unknown names, a bad file, or a
    file of more than `max_pairs` pairs (MIRROR_MAX_PAIRS: each pair is two strings encoded twice)."""
    sets: list[tuple[str, list[Pair]]] = []
    for name in gold or []:
        if name not in GOLD_SETS:
            raise MirrorError(f"unknown gold set {name!r}; choose from {', '.join(GOLD_SETS)}")
        sets.append((name, read_pairs(EXAMPLES_DIR / GOLD_SETS[name])))
    if pairs_path:
        p, shown = Path(pairs_path), display_name(pairs_path)
        if p.stat().st_size > max_bytes:
            raise MirrorError(
                f"`{shown}` is {fmt_size(p.stat().st_size)}; this app accepts files up to {fmt_size(max_bytes, limit=True)}"
            )
        pairs = parse_pairs(decode(p.read_bytes(), shown), shown)
        if max_pairs is not None and len(pairs) > max_pairs:
            raise MirrorError(
                f"`{shown}` holds {len(pairs):,} pairs; this server scores up to {max_pairs:,} in one evaluation "
                "(MIRROR_MAX_PAIRS): upload a sample of them"
            )
        sets.append((shown, pairs))
    if not sets:
        raise MirrorError("choose a gold set or upload a pairs file")
    return sets


def evaluate_sets(
    sets: Sequence[tuple[str, list[Pair]]],
    encoders: Sequence[tuple[str, Any]],
    on_progress: Callable[[Phase], None] | None = None,
    served: str = "tuned",
) -> EvalReport:
    """Score every set with every encoder ("base", then "tuned" when there is one). `on_progress` gets a Phase
    (what is being encoded, strings done of all strings to encode) as batches finish; `served` is the tuned
    encoder's name in it and in the report ("blend α=0.5" for a blend)."""
    total = sum(len(pair_strings(pairs)) for _, pairs in sets) * len(encoders)
    done = 0
    rows, moved, notes = [], [], []
    for name, pairs in sets:
        cosines: dict[str, Any] = {}
        for which, encoder in encoders:
            text = f"Encoding {name} with the {served if which == 'tuned' else which} encoder"
            report = _reporter(on_progress, text, done, total)
            report(0, 0)
            cosines[which] = pair_cosines(encoder, pairs, on_progress=report)
            done += len(pair_strings(pairs))
        rows.append(score_row(name, pairs, cosines))
        if "tuned" in cosines:
            moved += [
                {"gold set": name, **m} for m in moved_pairs(pairs, cosines["base"], cosines["tuned"], MOVED_SHOWN)
            ]
        if len(pairs) < FEW_PAIRS:
            notes.append(
                f"`{name}` has only {len(pairs)} pairs: with fewer than {FEW_PAIRS} a Spearman swings a lot with the "
                "sample of pairs, so read its 95% interval rather than the number"
            )
    return EvalReport(rows, moved, notes, tuple(which for which, _ in encoders), served=served)


def _reporter(on_progress: Callable[[Phase], None] | None, text: str, offset: int, total: int) -> Callable:
    def report(done: int, _: int) -> None:
        if on_progress is not None:
            on_progress(Phase(text, offset + done, total))

    return report


def score_row(name: str, pairs: Sequence[Pair], cosines: dict[str, Any]) -> dict[str, Any]:
    """A set's row: Spearman per encoder with its bootstrap 95% interval, and the change with its (paired)
    interval when there is a tuned encoder. Intervals are [low, high] or None (too few usable resamples)."""
    gold = [p[2] for p in pairs]
    names = list(cosines)
    samples = bootstrap_spearman(gold, *(cosines[w] for w in names), n_resamples=N_RESAMPLES, seed=SEED)
    row: dict[str, Any] = {"gold set": name, "pairs": len(pairs)}
    for j, which in enumerate(names):
        row[which] = round(spearman(cosines[which], gold), 4)
        row[f"{which} 95% CI"] = rounded(interval(samples[:, j]))
    if "tuned" in names and "base" in names:
        row["change"] = round(row["tuned"] - row["base"], 4)
        diff = samples[:, names.index("tuned")] - samples[:, names.index("base")]
        row["change 95% CI"] = rounded(interval(diff))
    return row


def rounded(ci: tuple[float, float] | None) -> list[float] | None:
    return None if ci is None else [round(ci[0], 4), round(ci[1], 4)]


class EtaClock:
    """Time left from the progress so far: "about 40 s left", or "" until a second of encoding has been seen.
    The rate is measured from the first report, so loading the encoders does not count as work."""

    def __init__(self) -> None:
        self.origin: tuple[float, int] | None = None

    def left(self, done: int, total: int) -> str:
        now = time.monotonic()
        if self.origin is None:
            self.origin = (now, done)
            return ""
        t0, d0 = self.origin
        if done <= d0 or total <= done or now - t0 < 1.0:
            return ""
        left = (now - t0) * (total - done) / (done - d0)
        return "almost done" if left < 1.5 else f"about {fmt_seconds(left)} left"
