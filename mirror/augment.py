"""Span masking for the second view: a random k-character span becomes the tokenizer's own mask token."""

from __future__ import annotations

import random
from collections.abc import Sequence


def mask_span(text: str, mask_token: str, k: int, rng: random.Random, min_chars: int = 30) -> str:
    """Replace `text[i:i+k]` at a drawn position i with `mask_token`.

    Strings shorter than `min_chars` (single words) are returned unchanged: their views differ only
    by dropout. The span is cut at the drawn position, not at the first occurrence of the substring
    (the original MirrorBERT code's `str.replace` masked the wrong place when the span repeats).
    """
    if k <= 0 or len(text) < max(min_chars, k):
        return text
    start = rng.randrange(len(text) - k + 1)
    return text[:start] + mask_token + text[start + k :]


def make_views(
    texts: Sequence[str], mask_token: str | None, k: int, rng: random.Random, min_chars: int = 30
) -> tuple[list[str], list[str]]:
    """Two views per string: the original, and the span-masked one (if the tokenizer has a mask token)."""
    first = list(texts)
    if not mask_token:
        return first, list(texts)
    return first, [mask_span(t, mask_token, k, rng, min_chars) for t in texts]
