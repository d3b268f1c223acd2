"""The steps a run will take, as the estimator prices them: mirror.train's own plan replayed without training."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mirror.config import MirrorConfig

if TYPE_CHECKING:
    from mirror.encoder import Encoder


def train_plan(
    texts: Sequence[str],
    lengths: Sequence[int],
    config: MirrorConfig,
    encoder: Encoder,
    memory_budget: int | None = None,
    pad_by: Sequence[int] | None = None,
) -> list[tuple[int, int]]:
    """(strings, padded length) of each step `mirror_tune(texts, config, encoder=encoder,
    memory_budget=...)` will run: mirror.train's own batches (shuffled, length-bucketed, split to fit memory),
    each padded to its longest string with special tokens (one more where a span mask may split a word); with
    `pad_by`, the same batches padded to these lengths' longest (one side of a pairs run)."""
    from mirror.train import plan_epoch, step_budget

    if len(lengths) < 2:
        return []
    config = config.scheduled(len(lengths))  # a small upload's extra epochs, as mirror_tune runs them
    budget = step_budget(encoder, config, memory_budget, paired=config.pairs)
    extra = encoder.tokenizer.num_special_tokens_to_add()
    maskable = bool(encoder.mask_token) and config.mask_span > 0
    padded = [
        n + extra + (maskable and len(t) >= config.mask_min_chars)
        for n, t in zip(pad_by or lengths, texts, strict=True)
    ]
    rng, tokens = random.Random(config.seed), []  # mirror_tune's plan_rng
    for _ in range(config.epochs):
        batches, _ = plan_epoch(lengths, config.batch_size, rng, budget, 2, config.bucket_by_length)
        tokens += [(len(b), min(max(padded[i] for i in b), budget.max_length)) for b in batches]
        if config.max_steps and len(tokens) >= config.max_steps:
            break
    return tokens[: config.max_steps] if config.max_steps else tokens
