"""General text mixed into a run's batches (`MirrorConfig.mix_general`): the bundled Wikipedia sentences and words in
examples/general (built by scripts/make_general_text.py; none of it from a general check's data), and the mixer that
adds some to every batch."""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from dataclasses import dataclass

from mirror.bundled import bundled
from mirror.data import clean_texts
from mirror.errors import MirrorError

GENERAL = bundled("general")  # the bundled data (mirror.bundled)
# A words run mixes in words: sentences would change what a word batch is (long, span-masked views among
# dropout-only single words); Wikipedia's frequent words keep it a batch of words.
FILES = {"sentences": "wiki-sentences.txt", "words": "wiki-words.txt"}
LICENSE_FILE = "WIKI_LICENSE.txt"


def general_text(mode: str) -> list[str]:
    """The bundled general strings for a run of `mode` ("words" or "sentences"), in the file's order."""
    if mode not in FILES:
        raise MirrorError(f"no general text for mode {mode!r}: use 'words' or 'sentences'")
    path = GENERAL / FILES[mode]
    if not path.is_file():
        raise MirrorError(f"{path}: the bundled general text is missing (rebuild it: scripts/make_general_text.py)")
    return path.read_text(encoding="utf-8").splitlines()


def mixed_count(n: int, fraction: float) -> int:
    """General strings added to a batch of `n` of the user's strings so that they are `fraction` of the batch."""
    return round(n * fraction / (1 - fraction)) if fraction > 0 else 0


@dataclass(frozen=True)
class Mixer:
    """General strings sorted by token count, none equal (case aside) to one of the user's: a general string is one
    more mirror pair and a negative of the others, so a copy of a user's string would be its false negative."""

    strings: tuple[str, ...]
    lengths: tuple[int, ...]  # token counts, ascending
    fraction: float

    @staticmethod
    def of(mode: str, fraction: float, user: Sequence[str], token_lengths) -> Mixer | None:
        """The mixer of a run (None when `fraction` is 0); `token_lengths(strings)` counts tokens."""
        if fraction <= 0:
            return None
        taken = {t.casefold() for t in user}
        pool, _ = clean_texts(general_text(mode))
        pool = [t for t in pool if t.casefold() not in taken]
        order = sorted(zip(token_lengths(pool), pool, strict=True))
        return Mixer(tuple(t for _, t in order), tuple(k for k, _ in order), fraction)

    def draw(self, n: int, longest: int | None, rng: random.Random) -> list[str]:
        """General strings for a batch of `n` user strings whose longest has `longest` tokens (None: any length):
        `mixed_count(n, fraction)` of them, drawn at random among those no longer than that, so the batch pads no
        further than its own strings (the memory plan holds) and keeps their lengths' character."""
        room = len(self.lengths) if longest is None else bisect.bisect_right(self.lengths, longest)
        picked = rng.sample(range(room), min(mixed_count(n, self.fraction), room))
        return [self.strings[i] for i in picked]

    def note(self, mode: str) -> str:
        kind = "sentences" if mode == "sentences" else "words"
        return (
            f"mixed general text: Wikipedia {kind} as {self.fraction:.0%} of every batch ({len(self.strings):,} kept)"
        )
