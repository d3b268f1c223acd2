"""The first guess of a run's time, from string lengths and the model's compute per token: what the Tune tab shows
until a calibration exists (explorer.tune.estimate), and the ZeroGPU reservation (where the GPU is only ours inside
the job, so nothing is timed ahead). A guess to set expectations, not a promise."""

from __future__ import annotations

from collections.abc import Sequence

from explorer.tune.estimate import PHASES, Estimate
from explorer.tune.steps import chooses
from mirror.config import BUNDLED_MODEL, MirrorConfig

# Rough CPU cost of one training step: seconds per (string x padded token x attention factor) for MiniLM-L6
# on 2 cores (bench: 0.45 s per 200 words, ~3 s per 200 STS-B sentences), scaled by model size below.
CPU_STEP_COST = 3.3e-4
GPU_SPEEDUP = 20.0


def rough_estimate(
    texts: Sequence[str],
    config: MirrorConfig,
    device: str,
    threads: int,
    trained: int | None = None,
    partners: Sequence[str | None] | None = None,
) -> Estimate:
    """`estimate_seconds` as an Estimate (training and the two indexes only): shown until a calibration exists.
    `trained`: the strings that train (a pairs run's held-out rows do not: explorer.tune.inputs.trained_rows);
    `partners`: a pairs run's partner of each row (None where it has none)."""
    steps, train_s, index_s = estimate_seconds(texts, config, device, threads, trained, partners)
    guess = {"training": train_s, "base index": index_s / 2, "tuned index": index_s / 2}
    phases = tuple((p, guess.get(p, 0.0)) for p in PHASES)
    retry = train_s if config.retry_anchor > 0 and chooses(config, partners) else 0.0  # mirror.job._train_again
    return Estimate(steps, phases, None, retry=retry)


def planned_steps(n: int, config: MirrorConfig) -> int:
    """Optimiser steps a run of `n` strings takes: mirror.train's own count, capped by max_steps."""
    from mirror.config import steps_per_epoch

    strings = -(-n // config.join_views)  # joined: fewer strings
    total = config.epochs_for(strings) * steps_per_epoch(strings, config.batch_size)
    return min(total, config.max_steps) if config.max_steps else total


def model_cost_factor(model: str) -> float:
    """Compute per token relative to the bundled MiniLM-L6 (6 layers x 384): from the model's config where one is at
    hand (explorer.tune.bases: the bundled and local folders, the hub cache, the bases offered), else guessed from
    its name."""
    from explorer.tune.bases import relative_compute

    known = relative_compute(model)
    if known is not None:
        return max(0.01, known)  # a tiny test model still costs its tokenizing and overheads
    name = model.lower()
    if model == BUNDLED_MODEL or "minilm" in name:
        return 1.0 if "l12" not in name else 2.0
    if "large" in name:
        return 28.0
    if "distil" in name:
        return 4.0
    if "small" in name or "tiny" in name or "mini" in name:
        return 1.0
    return 8.0  # a base-size model: 12 layers x 768


def estimate_seconds(
    texts: Sequence[str],
    config: MirrorConfig,
    device: str,
    threads: int = 2,
    trained: int | None = None,
    partners: Sequence[str | None] | None = None,
) -> tuple[int, float, float]:
    """(steps, training seconds, indexing seconds): a rough guess to set expectations, not a promise (`trained`:
    the strings that train, all by default; `partners`: a pairs run's, whose rows train padded to their longer side
    as the calibrated plan prices them, mirror.plan.longer_sides: a term's steps are its definition's length)."""
    import numpy as np

    steps = planned_steps(len(texts) if trained is None else trained, config)
    if not texts:
        return steps, 0.0, 0.0

    def tokens_of(strings: Sequence[str], most: int) -> float:
        sample = list(strings[:: max(1, len(strings) // 2000)])
        return min(most, float(np.percentile([2 + max(1, len(t) // 4) for t in sample], 95)))

    padded = indexed = tokens_of(texts, config.max_length)
    if partners is not None and len(partners) == len(texts):
        sides = [t if p is None or len(p) <= len(t) else p for t, p in zip(texts, partners, strict=True)]
        padded = tokens_of(sides, max(config.max_length, config.pair_max_length))
    cost = CPU_STEP_COST * model_cost_factor(config.model) * 2 / max(1, min(threads, 16))
    per_step = cost * padded * (1 + padded / 64) * min(config.batch_size, len(texts))
    # Indexing: one view of the strings, no backward pass, both encoders: ~1/3 of a training pass over them, twice.
    index_s = 2 * len(texts) * cost * indexed * (1 + indexed / 64) / 3
    if device == "cuda":
        per_step, index_s = per_step / GPU_SPEEDUP, index_s / GPU_SPEEDUP
    return steps, steps * per_step + 3.0, index_s


def device_and_threads(device: str) -> tuple[str, int]:
    """Where a run would train ("cuda" or "cpu") and how many CPU threads torch uses."""
    import torch

    from explorer.settings import zero_gpu

    if zero_gpu() or (device in ("auto", "cuda") and torch.cuda.is_available()):
        return "cuda", torch.get_num_threads()
    return "cpu", torch.get_num_threads()
