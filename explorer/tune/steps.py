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
    pad_by: Sequence[Sequence[int]] = (),
) -> list[tuple[int, ...]]:
    """(strings, padded length) of each step `mirror_tune(texts, config, encoder=encoder,
    memory_budget=...)` will run: mirror.train's own batches (shuffled, length-bucketed, split to fit memory),
    each padded to its longest string with special tokens (one more where a span mask may split a word). With
    `pad_by` (lists of lengths, such as the two sides of a pairs run), the same batches padded to each list's
    longest: (strings, padded by the first, padded by the second, ...)."""
    from mirror.train import plan_epoch, step_budget

    if len(lengths) < 2:
        return []
    config = config.scheduled(len(lengths))  # a small upload's extra epochs, as mirror_tune runs them
    budget = step_budget(encoder, config, memory_budget, paired=config.pairs)
    extra = encoder.tokenizer.num_special_tokens_to_add()
    maskable = [bool(encoder.mask_token) and config.mask_span > 0 and len(t) >= config.mask_min_chars for t in texts]
    sides = [[n + extra + m for n, m in zip(side, maskable, strict=True)] for side in (pad_by or (lengths,))]
    rng, steps = random.Random(config.seed), []  # mirror_tune's plan_rng
    for _ in range(config.epochs):
        batches, _ = plan_epoch(lengths, config.batch_size, rng, budget, 2, config.bucket_by_length)
        steps += [(len(b), *(min(max(side[i] for i in b), budget.max_length) for side in sides)) for b in batches]
        if config.max_steps and len(steps) >= config.max_steps:
            break
    return steps[: config.max_steps] if config.max_steps else steps
