"""What the general checks encode, counted by tokenizer: the token lengths the estimator prices their encoding at
(explorer.tune.estimate.checks_price), each check's texts on its dev or check half (mirror.checks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mirror.encoder import Encoder


def forgetting_lengths(encoder: Encoder, half: str = "check") -> list[list[int]]:
    """Token lengths (without special tokens) of the texts each general check encodes on its `half` (one encode call
    a check), by this encoder's tokenizer (counted once per tokenizer and kept)."""
    return [list(lengths) for lengths in _check_lengths(encoder.tokenizer, half)]


_CHECK_LENGTHS: dict[tuple[str, int, str], tuple[tuple[int, ...], ...]] = {}


def _check_lengths(tokenizer, half: str = "check") -> tuple[tuple[int, ...], ...]:
    key = (str(getattr(tokenizer, "name_or_path", "")), len(tokenizer), half)
    if key not in _CHECK_LENGTHS:
        from mirror.checks import CHECKS, check_texts
        from mirror.encoder import tokenized

        counted = []
        for check in CHECKS:
            ids = tokenized(tokenizer, check_texts(check, half), add_special_tokens=False, truncation=False)
            ids = ids["input_ids"]
            counted.append(tuple(max(1, len(x)) for x in ids))
        if len(_CHECK_LENGTHS) > 16:
            _CHECK_LENGTHS.clear()
        _CHECK_LENGTHS[key] = tuple(counted)
    return _CHECK_LENGTHS[key]
