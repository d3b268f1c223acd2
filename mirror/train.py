"""mirror_tune: the MirrorBERT training loop. It knows nothing of the UI; it reports through callbacks."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import inspect
import math
import platform
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mirror import distributed, memory
from mirror.augment import make_views, mask_span
from mirror.blend import mix_weights
from mirror.config import MirrorConfig
from mirror.cores import TURNS
from mirror.data import clean_texts
from mirror.encoder import (
    DROPOUT_KEYS,
    Encoder,
    attention_note,
    autocast,
    load_encoder,
    resolve_device,
    resolve_precision,
    save_encoder,
)
from mirror.errors import MirrorError
from mirror.general import Mixer, mixed_count
from mirror.lora import LAYER, add_lora, lora_targets, merge_lora
from mirror.loss import nt_xent
from mirror.pairs import clean_pairs
from mirror.terms import FrozenBase, Term, joined, needs_base, terms_for

LOWER_LR = "lower the learning rate or raise the temperature"
StepFn = Callable[[int, int, float], None]
StopFn = Callable[[], bool]


@dataclass
class MirrorResult:
    """What a run produced: the tuned encoder (in eval mode) and how the run went."""

    encoder: Encoder
    config: MirrorConfig  # as run: pooling resolved to "cls"/"mean"
    losses: list[float]
    steps: int
    total_steps: int
    seconds: float
    device: str
    cancelled: bool
    n_texts: int
    notes: list[str] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)  # strings in each step (losses of different B differ)

    @property
    def final_loss(self) -> float | None:
        tail = self.losses[-10:]
        return sum(tail) / len(tail) if tail else None

    def stats(self) -> dict[str, Any]:
        return {
            "base_model": self.config.model,
            "strings": self.n_texts,
            "steps": self.steps,
            "total_steps": self.total_steps,
            "seconds": round(self.seconds, 3),
            "device": self.device,
            "cancelled": self.cancelled,
            "first_loss": self.losses[0] if self.losses else None,
            "final_loss": self.final_loss,
            "notes": self.notes,
        }

    def summary(self) -> str:
        status = "cancelled" if self.cancelled else "done"
        loss = f"{self.final_loss:.4f}" if self.final_loss is not None else "n/a"
        return (
            f"{status}: {self.steps}/{self.total_steps} steps on {self.n_texts} strings in {self.seconds:.1f}s "
            f"on {self.device}; final loss {loss}; pooling {self.config.pooling}, mode {self.config.mode}"
        )


def _step_reporter(on_step: Callable[..., None] | None) -> Callable[[int, int, float, int], None] | None:
    """`on_step(step, total, loss)`, or `on_step(step, total, loss, batch)` for a callback that takes a fourth
    argument (the step's strings: `mirror.loss.chance_loss(batch)` makes losses comparable across batch sizes)."""
    if on_step is None:
        return None
    try:
        params = list(inspect.signature(on_step).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 4 or any(p.kind == p.VAR_POSITIONAL for p in params):
        return on_step
    return lambda step, total, loss, batch: on_step(step, total, loss)


BUCKET_CHUNK = 32  # batches per length-sorting chunk


def plan_batches(
    n: int, batch_size: int, rng: random.Random, min_size: int = 2, lengths: Sequence[int] | None = None
) -> list[list[int]]:
    """Shuffled batches covering all n strings once; never drops a partial batch.

    A final batch smaller than `min_size` (one string has no negatives; under torchrun each rank
    needs a string) joins the previous batch. With `lengths`, strings are sorted by length within
    random chunks of BUCKET_CHUNK batches and the batches are then shuffled: little padding, random order.
    """
    order = list(range(n))
    rng.shuffle(order)
    if lengths is not None:
        chunk = batch_size * BUCKET_CHUNK
        order = [i for c in range(0, n, chunk) for i in sorted(order[c : c + chunk], key=lambda j: lengths[j])]
    batches = [order[i : i + batch_size] for i in range(0, n, batch_size)]
    if len(batches) > 1 and len(batches[-1]) < min_size:
        batches[-2].extend(batches.pop())
    if lengths is not None:
        rng.shuffle(batches)
    return batches


# A span mask can split a word around the mask token: count two tokens more than the string has.
MASK_EXTRA_TOKENS = 2


@dataclass(frozen=True)
class StepBudget:
    """What one training step may cost in memory, and how a batch is split to stay within it.

    A batch costs its views (2 per string, this rank's share under torchrun) times its padded length: the
    longest string in it, with special tokens, capped at the max length (memory.step_bytes).
    """

    total: int  # bytes the run may add to what is in use when it starts (weights and all)
    static: int  # gradients, optimiser states, first-step overhead (memory.static_bytes)
    geometry: memory.Geometry
    dtype_bytes: int
    max_length: int
    extra_tokens: int  # special tokens, and what a span mask can add
    world_size: int = 1
    explicit: bool = False  # set by the caller (--memory-mb), not read from this machine
    mix: float = 0.0  # general text added to every batch (mix_general): a batch of n strings trains n + mixed_count
    lora_token: int = 0  # LoRA: bytes each token of each view keeps in the adapters (x·Aᵀ, rank wide, per adapter)

    def padded(self, tokens: int) -> int:
        return min(tokens + self.extra_tokens, self.max_length)

    def cost(self, count: int, padded: int) -> int:
        views = 2 * math.ceil((count + mixed_count(count, self.mix)) / self.world_size)
        lora = int(memory.TRAIN_SLACK * views * padded * self.lora_token)
        return memory.step_bytes(views, padded, self.geometry, self.dtype_bytes, training=True) + lora

    def capacity(self, padded: int, most: int) -> int:
        """The most strings (up to `most`) one step can take at this padded length."""
        lo, hi = 0, most
        while lo < hi:  # cost grows with the count: bisect
            mid = (lo + hi + 1) // 2
            if self.static + self.cost(mid, padded) <= self.total:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def split(self, batch: list[int], lengths: Sequence[int], min_size: int = 2) -> list[list[int]]:
        """`batch` itself when it fits; else its strings longest first in runs as large as fit.

        Only batches of long strings shrink (fewer negatives in those steps). A trailing run shorter
        than `min_size` takes strings from the run before it, or copies of them when that run has none
        to spare (a string then appears twice in the epoch: rarer and better than a step without negatives).
        """
        longest = max(lengths[i] for i in batch)
        if self.capacity(self.padded(longest), len(batch)) == len(batch):
            return [batch]
        ordered = sorted(batch, key=lambda i: -lengths[i])
        parts: list[list[int]] = []
        start = 0
        while start < len(ordered):
            room = self.capacity(self.padded(lengths[ordered[start]]), len(ordered) - start)
            if room < min(min_size, len(ordered) - start):
                raise self.too_small(lengths[ordered[start]], min_size)
            parts.append(ordered[start : start + room])
            start += room
        if len(parts) > 1 and len(parts[-1]) < min_size:
            need, prev = min_size - len(parts[-1]), parts[-2]
            parts[-1] = prev[-need:] + parts[-1]  # shorter than prev's first string: fits where prev did
            if len(prev) - need >= min_size:
                del prev[-need:]  # moved, not copied
        return parts

    def too_small(self, tokens: int, min_size: int = 2) -> MirrorError:
        """The error for a string that cannot share a step with even one other string."""
        padded = self.padded(tokens)
        whose = "the training budget" if self.explicit else "this machine's training budget"
        need = memory.fmt_gb(self.static + self.cost(min_size, padded))
        if self.static >= self.total:
            return MirrorError(
                f"training this model needs ~{memory.fmt_gb(self.static)} before its first step (gradients, optimiser "
                f"states); {whose} is {memory.fmt_gb(self.total)}: use a smaller model or free memory"
            )
        fits = [
            n for n in (8, 16, 32, 64, 128, 256) if n < padded and self.static + self.cost(min_size, n) <= self.total
        ]
        advice = f"lower the max length (e.g. {fits[-1]})" if fits else "use a smaller model or free memory"
        return MirrorError(
            f"a string of {tokens:,} tokens needs ~{need} per step at max length {self.max_length}; "
            f"{whose} is {memory.fmt_gb(self.total)}: {advice}"
        )


def step_budget(
    encoder: Encoder, config: MirrorConfig, memory_budget: int | None = None, world_size: int = 1, paired: bool = False
) -> StepBudget:
    """The budget a run of `config` on `encoder` plans its batches with.

    `memory_budget` (bytes) is what the run may add to the memory in use; None reads it from the machine
    (memory.available_bytes: half of the available RAM, 80% of a GPU's free memory). Under torchrun every
    rank plans with the smallest rank's budget, so all draw the same batches.
    """
    device = resolve_device(config.device)
    amp_dtype = resolve_precision(device, config.precision)
    total = memory.available_bytes(device) if memory_budget is None else int(memory_budget)
    mask = MASK_EXTRA_TOKENS if encoder.mask_token and config.mask_span > 0 else 0
    anchor = sum(p.numel() * p.element_size() for p in encoder.model.parameters()) if needs_base(config) else 0
    adapters, lora_token = lora_bytes(encoder.model, config, amp_dtype is not None)
    return StepBudget(
        total=total,
        static=memory.static_bytes(encoder.model, amp_dtype is not None, world_size) + anchor + adapters,
        geometry=memory.model_geometry(encoder.model),
        dtype_bytes=memory.activation_bytes(amp_dtype),
        max_length=min(max(config.max_length, config.pair_max_length if paired else 0), encoder.token_limit),
        extra_tokens=encoder.tokenizer.num_special_tokens_to_add() + mask,
        world_size=world_size,
        explicit=memory_budget is not None,
        mix=config.mix_general,
        lora_token=lora_token,
    )


def lora_bytes(model: Any, config: MirrorConfig, mixed_precision: bool) -> tuple[int, int]:
    """What LoRA adapters of `config.lora_rank` add to a step: (their weights with gradients and AdamW's moments, the
    bytes a token of a view keeps in them: x·Aᵀ, `rank` wide, in each adapted layer). (0, 0) without LoRA. The
    base's own states are still counted as trainable (memory.static_bytes): an upper bound."""
    rank = config.lora_rank
    if not rank:
        return 0, 0
    targets = [model.get_submodule(name) for name in lora_targets(model, config.freeze_layers)]
    params = sum(rank * (m.in_features + m.out_features) for m in targets)
    per_param = 4 + 4 + 8 + (2 if mixed_precision else 0)
    return params * per_param, len(targets) * rank * (3 if mixed_precision else 4)


def plan_epoch(
    lengths: Sequence[int],
    batch_size: int,
    rng: random.Random,
    budget: StepBudget,
    min_size: int = 2,
    bucket: bool = True,
) -> tuple[list[list[int]], int]:
    """One epoch's batches (plan_batches, then split where a batch does not fit `budget`) and how many were split."""
    batches, split = [], 0
    for batch in plan_batches(len(lengths), batch_size, rng, min_size, lengths if bucket else None):
        parts = budget.split(batch, lengths, min_size)
        split += len(parts) > 1
        batches.extend(parts)
    return batches, split


def count_steps(
    lengths: Sequence[int],
    batch_size: int,
    rng: random.Random,
    budget: StepBudget,
    epochs: int,
    min_size: int = 2,
    bucket: bool = True,
    max_steps: int | None = None,
) -> int:
    """Steps of `epochs` planned epochs, replayed on a copy of `rng` (which is left as it was)."""
    rng, total = copy.deepcopy(rng), 0
    for _ in range(epochs):
        if max_steps and total >= max_steps:
            break
        total += len(plan_epoch(lengths, batch_size, rng, budget, min_size, bucket)[0])
    return min(total, max_steps) if max_steps else total


def plan_steps(
    texts: Sequence[str],
    config: MirrorConfig,
    encoder: Encoder,
    memory_budget: int | None = None,
    pairs: Sequence[str | None] | None = None,
) -> int:
    """The optimiser steps `mirror_tune(texts, config, encoder=encoder, memory_budget=...)` will run.

    Exact for the same budget (an explicit one, or the machine's when its free memory has not moved) on one
    process; it tokenizes every string (and partner: `pairs`), like the run does.
    """
    config = config.validated()
    partners: list[str | None] | None = None
    if pairs is None:
        texts, _ = clean_texts(texts)
    else:
        texts, partners, _, _ = clean_pairs(texts, pairs)
    texts = joined(texts, config.join_views, config.seed)
    if len(texts) < 2:
        return 0
    config = config.scheduled(len(texts))
    budget = step_budget(encoder, config, memory_budget, paired=partners is not None)
    lengths = encoder.token_lengths(texts)
    if partners is not None:
        lengths = _pair_lengths(encoder, lengths, partners, config)
    plan_rng = random.Random(config.seed)
    return count_steps(
        lengths, config.batch_size, plan_rng, budget, config.epochs, 2, config.bucket_by_length, config.max_steps
    )


def mirror_tune(
    texts: Sequence[str],
    config: MirrorConfig | None = None,
    on_step: StepFn | None = None,
    should_stop: StopFn | None = None,
    encoder: Encoder | None = None,
    memory_budget: int | None = None,
    pairs: Sequence[str | None] | None = None,
) -> MirrorResult:
    """Mirror-fine-tune an encoder on `texts` (cleaned and de-duplicated here too).

    `pairs`: each string's partner text (None or "" for none), row for row with `texts`: a string's positive is its
    partner where it has one (the other strings' views in the batch its negatives, both ways), its own mirror view
    where it has none (mirror.pairs: what cleaning keeps). Without `pairs` a run is exactly as it always was.

    `on_step(step, total, loss[, batch])` is called after every optimiser step; `should_stop()` is polled
    between steps and ends the run cleanly (result.cancelled). `encoder` skips loading `config.model`.
    `memory_budget` (bytes, default read from the machine: `step_budget`) bounds what the run adds to the
    memory in use: batches of long strings that would exceed it are split (result.notes says so), and a
    string too long for it is a MirrorError before the first step.

    The loop is plan, step, report, stop. What the loss adds to the contrastive term (distillation, L2 to the base,
    guided negatives, the long-text anchor) are `mirror.terms` objects chosen once from the config; LoRA and the
    blend toward the base happen before and after it (`_trained`).
    """
    config = (config or MirrorConfig.preset("words")).validated()
    partners: list[str | None] | None = None
    if pairs is None:
        texts, _ = clean_texts(texts)
    else:
        texts, partners, _, _ = clean_pairs(texts, pairs)
        if config.join_views > 1:
            raise MirrorError("joined views (join_views) and pairs do not go together: a pair is one string's")
    if len(texts) < 2:
        raise MirrorError(f"need at least 2 distinct non-empty strings to tune (got {len(texts)})")
    user, texts = texts, joined(texts, config.join_views, config.seed)
    n_texts = len(user)
    if len(texts) < 2:
        raise MirrorError(f"{n_texts} strings joined {config.join_views} at a time make 1 training string: join fewer")
    config = config.scheduled(len(texts))  # a small upload: more epochs, up to min_steps
    device = resolve_device(config.device)
    torch.manual_seed(config.seed)
    encoder = _ready_encoder(encoder, config, device)
    config, notes = _as_run(config, encoder)
    if config.join_views > 1:
        notes.append(f"{n_texts:,} strings joined {config.join_views} at a time: {len(texts):,} training strings")
    rank, world_size = distributed.world()
    if world_size > 1 and config.guide_margin > 0:  # its mask is of this rank's strings, the loss of all ranks'
        raise MirrorError("guided negatives (guide_margin) run on one process, not under torchrun")
    min_batch = max(2, world_size)
    if len(texts) < min_batch:
        raise MirrorError(f"need at least {min_batch} distinct strings for {world_size} processes (got {len(texts)})")

    lengths = encoder.token_lengths(texts)  # the memory plan needs them, length bucketing too
    if partners is not None:  # a row costs what its longer side costs: both sides are padded to it at most
        lengths = _pair_lengths(encoder, lengths, partners, config)
    budget = step_budget(encoder, config, memory_budget, world_size, paired=partners is not None)
    budget = dataclasses.replace(budget, total=_smallest_over_ranks(budget.total, device))
    plan = Schedule(lengths, budget, random.Random(config.seed), min_batch, config)
    rng = random.Random(config.seed + 1)  # views draw from their own stream, so plan_steps can replay the plan's
    mixer = Mixer.of(config.mode, config.mix_general, user, encoder.token_lengths)
    mix_rng = random.Random(config.seed + 3)  # its own stream: without mixing, batches and views are as they were
    if mixer is not None:
        notes.append(mixer.note(config.mode))

    model = encoder.model
    _set_trainable(model, config)
    if config.lora_rank:  # before the base's copy: the copy's adapters are zero, it computes the base
        adapted = add_lora(model, config.lora_rank, config.freeze_layers)
        notes.append(f"LoRA rank {config.lora_rank} on {adapted} attention layers, merged into the weights at the end")
    base = FrozenBase.of(model, encoder.pooling) if needs_base(config) else None
    terms = terms_for(config, model, base, texts, lengths, encoder.tokenize, encoder.token_limit)
    encoder.model = _wrapped_for_training(model, config, world_size, device)
    optimizer = torch.optim.AdamW(_param_groups(model, config.weight_decay), lr=config.lr, fused=True)
    amp_dtype = resolve_precision(device, config.precision)
    # fp16 needs loss scaling; bf16 has fp32's range and does not.
    scaler = torch.amp.GradScaler(device.type) if amp_dtype == torch.float16 else None
    log = LossLog(_step_reporter(on_step), 1 if device.type == "cpu" else config.log_every)

    def prepare(batch_ids: list[int]) -> StepInputs:
        strings = [texts[i] for i in batch_ids] + _mixed_in(mixer, batch_ids, lengths, budget, mix_rng)
        sides = (
            None if partners is None else [partners[i] for i in batch_ids] + [None] * (len(strings) - len(batch_ids))
        )
        inputs = _prepare_step(encoder, strings, config, rng, device, sides)
        inputs.extra = [term.prepare(batch_ids) for term in terms]
        return inputs

    # On a GPU the next batch is made while this step runs (the host is what a GPU step waits for: bench/RESULTS.md
    # "GPU"); one batch at a time and in order, so the views draw what they draw without it.
    ahead = Ahead(prepare, threaded=device.type == "cuda")
    step, cancelled, total = 0, False, plan.total()
    started = time.perf_counter()
    with _trained(encoder, model, base, config, ahead, optimizer) as ended:
        for epoch in range(config.epochs):
            queue = plan.epoch()
            while queue and step < total:
                if distributed.any_rank(should_stop is not None and should_stop()):
                    cancelled = True
                    break
                TURNS.pause()  # in a server, interactive work (a map, an export) goes first: mirror.cores
                batch_ids = queue.pop(0)
                inputs = ahead.take(batch_ids, queue[0] if queue else None)
                try:
                    result = _train_step(encoder, optimizer, scaler, inputs, config, device, terms)
                except torch.OutOfMemoryError:  # fewer negatives per step, but the run finishes, and says so
                    ahead.drop()  # the next batch as planned before: the plan changes
                    smaller = _halved_after_oom(plan.batch_size, min_batch, world_size, optimizer, device)
                    queue, total = plan.replanned([batch_ids, *queue], smaller, step, config.epochs - epoch - 1)
                    notes.append(f"out of memory at step {step + 1}: continued with batch size {plan.batch_size}")
                    continue
                step += 1
                log.add(result, inputs.strings, step, total)
            if cancelled or step >= total:
                break
        log.flush(step, total)
        ended.append(step)
    if step:
        _check_finite(encoder, step)
    if plan.split:
        notes.append(split_note(plan.split, budget.total))
    return MirrorResult(
        encoder=encoder,
        config=config,
        losses=log.losses,
        batch_sizes=log.sizes[: len(log.losses)],
        steps=step,
        total_steps=total,
        seconds=time.perf_counter() - started,
        device=_device_name(device) + ", " + {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[amp_dtype],
        cancelled=cancelled,
        n_texts=n_texts,
        notes=notes,
    )


@contextlib.contextmanager
def _trained(
    encoder: Encoder,
    model: Any,
    base: FrozenBase | None,
    config: MirrorConfig,
    ahead: Ahead,
    optimizer: torch.optim.Optimizer,
) -> Iterator[list[int]]:
    """Around the loop: dropout on (the "feature" augmentation) and every weight write inside `changing_weights` (what
    was built from the old weights, the bf16 inference copy, is dropped); after it, whatever ended the run, a plain
    model again (DDP unwrapped, LoRA merged, eval mode, everything trainable for a later run), then the blend toward
    the base (WiSE-FT) when the run made a step (the loop appends its step count to the yielded list)."""
    ended: list[int] = []
    model.train()
    with encoder.changing_weights():
        try:
            yield ended
        finally:
            ahead.close()
            encoder.model = model  # unwrap DDP
            merge_lora(model)  # W + B·A: a plain model again, whatever ended the run
            if base is not None:
                merge_lora(base.model)  # B = 0 there: the base's weights, under the same names (the blend's)
            model.eval()
            optimizer.zero_grad(set_to_none=True)
            for param in model.parameters():  # a later run on this encoder decides afresh what trains
                param.requires_grad_(True)
        if base is not None and ended and ended[0] and config.blend_alpha < 1.0:
            mix_weights(model, base.model, config.blend_alpha)  # part of the way back to the base


@dataclass
class LossLog:
    """The losses of the steps: kept on the device and read back in one host sync every `every` steps, checked finite
    (a nan loss or gradient norm ends the run with a MirrorError), then reported."""

    report: Callable[[int, int, float, int], None] | None
    every: int
    losses: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)  # each step's strings (the loss of a batch of B starts at log(2B-1))
    pending: list[torch.Tensor] = field(default_factory=list)  # [loss, grad norm] of steps not read back yet

    def add(self, result: torch.Tensor, strings: int, step: int, total: int) -> None:
        self.pending.append(result)
        self.sizes.append(strings)
        if len(self.pending) >= self.every:
            self.flush(step, total)

    def flush(self, step: int, total: int) -> None:
        first = step - len(self.pending) + 1
        values = torch.stack(self.pending).tolist() if self.pending else []
        self.pending.clear()
        for offset, (value, grad_norm) in enumerate(values):
            if not math.isfinite(value):
                raise MirrorError(f"the loss became {value}: {LOWER_LR}")
            if not math.isfinite(grad_norm):  # the step wrote it into the weights: the next loss would be nan
                raise MirrorError(
                    f"the loss became nan: the gradient norm was {grad_norm} at step {first + offset}; {LOWER_LR}"
                )
            self.losses.append(value)
            if self.report is not None:
                self.report(first + offset, total, value, self.sizes[len(self.losses) - 1])


class Schedule:
    """The batches of each epoch from one seeded stream (`plan_steps` replays it), split where a batch does not fit the
    memory budget, and replanned at a smaller batch after an out-of-memory step."""

    def __init__(
        self, lengths: Sequence[int], budget: StepBudget, rng: random.Random, min_batch: int, config: MirrorConfig
    ):
        self.lengths, self.budget, self.rng, self.min_batch = lengths, budget, rng, min_batch
        self.bucket, self.epochs, self.max_steps = config.bucket_by_length, config.epochs, config.max_steps
        self.batch_size, self.split = config.batch_size, 0

    def count(self, epochs: int, max_steps: int | None = None) -> int:
        """Steps of `epochs` epochs at the batch size now (a replay: the stream is left as it was)."""
        return count_steps(
            self.lengths, self.batch_size, self.rng, self.budget, epochs, self.min_batch, self.bucket, max_steps
        )

    def total(self) -> int:
        return self.count(self.epochs, self.max_steps)

    def epoch(self) -> list[list[int]]:
        queue, n_split = plan_epoch(self.lengths, self.batch_size, self.rng, self.budget, self.min_batch, self.bucket)
        self.split += n_split
        return queue

    def replanned(
        self, left: list[list[int]], batch_size: int, step: int, epochs_after: int
    ) -> tuple[list[list[int]], int]:
        """This epoch's strings not trained yet (`left`: the failed batch first) in batches of `batch_size` (the plan's
        size from now on), and the run's new total of steps."""
        self.batch_size = batch_size
        rest = [i for ids in left for i in ids]
        chunks = [rest[i : i + self.batch_size] for i in range(0, len(rest), self.batch_size)]
        if len(chunks) > 1 and len(chunks[-1]) < self.min_batch:
            chunks[-2].extend(chunks.pop())
        queue = [part for chunk in chunks for part in self.budget.split(chunk, self.lengths, self.min_batch)]
        later = self.count(epochs_after)
        total = step + len(queue) + later
        return queue, min(total, self.max_steps or total)


def _mixed_in(
    mixer: Mixer | None, batch_ids: list[int], lengths: Sequence[int], budget: StepBudget, rng: random.Random
) -> list[str]:
    """The general strings a batch takes (none without a mixer): no longer than its longest string, unless that one
    is already cut at the max length (then any length pads the same)."""
    if mixer is None:
        return []
    longest = max(lengths[i] for i in batch_ids)
    return mixer.draw(len(batch_ids), longest if budget.padded(longest) < budget.max_length else None, rng)


def _ready_encoder(encoder: Encoder | None, config: MirrorConfig, device: torch.device) -> Encoder:
    """The encoder to tune, on `device` with the run's dropout: `config.model` loaded, or the one given."""
    if encoder is None:
        return load_encoder(config.model, pooling=config.pooling, device=str(device), dropout=config.dropout)
    encoder.to(device)
    _set_dropout(encoder.model, config.dropout)
    return encoder


def split_note(split: int, budget_bytes: int) -> str:
    """What result.notes says when batches were split to fit the memory budget."""
    batches = "1 batch of long strings was" if split == 1 else f"{split} batches of long strings were"
    return f"{batches} split to fit the {memory.fmt_gb(budget_bytes)} memory budget (fewer negatives in those steps)"


def _as_run(config: MirrorConfig, encoder: Encoder) -> tuple[MirrorConfig, list[str]]:
    """The config as it will run (pooling resolved, max length within the model's positions) and its notes: the
    model runs eager attention (no fused kernel for its architecture), the max length asked for was more than the
    model takes (tokenize would cap it silently)."""
    limit, notes = encoder.token_limit, []
    attention = attention_note(encoder)
    if attention:
        notes.append(attention)
    if config.max_length > limit:
        notes.append(f"max length {config.max_length:,} is more than this model takes: capped at {limit}")
    run = {**config.to_dict(), "pooling": encoder.pooling, "max_length": min(config.max_length, limit)}
    return MirrorConfig.from_dict(run), notes


# Position embeddings that live in the encoder rather than in `embeddings.`: DeBERTa's relative position embeddings,
# MPNet's relative attention bias. They are embeddings: frozen with them (and DeBERTa's LayerNorm over its relative
# embeddings, `encoder.LayerNorm.`, where the encoder has them: XLM-R-XL's encoder.LayerNorm is its final norm).
ENCODER_EMBEDDINGS = ("encoder.rel_embeddings.", "encoder.relative_attention_bias.")


def embedding_names(model: Any) -> tuple[str, ...]:
    """The name prefixes of `model`'s embedding parameters (what `freeze_embeddings` freezes)."""
    names = ("embeddings.", *ENCODER_EMBEDDINGS)
    return (*names, "encoder.LayerNorm.") if hasattr(getattr(model, "encoder", None), "rel_embeddings") else names


def _set_trainable(model: Any, config: MirrorConfig) -> None:
    """What trains: everything but BERT's pooler head (unused by [CLS]/mean pooling), the embeddings when frozen,
    and the lowest `freeze_layers` transformer layers. MirrorError when the model has fewer layers than that, or
    when freezing layers finds no numbered layer to freeze (an architecture whose names the LAYER pattern misses)."""
    layers = getattr(model.config, "num_hidden_layers", None) or getattr(model.config, "n_layers", None)
    if config.freeze_layers and layers is not None and config.freeze_layers > layers:
        raise MirrorError(f"frozen layers must be at most the model's {layers} layers, got {config.freeze_layers}")
    frozen_layers, embeddings = 0, embedding_names(model)
    for name, param in model.named_parameters():
        layer = LAYER.search(name)
        in_frozen_layer = layer is not None and int(layer.group(1)) < config.freeze_layers
        frozen_layers += in_frozen_layer
        frozen = (
            name.startswith("pooler.") or (config.freeze_embeddings and name.startswith(embeddings)) or in_frozen_layer
        )
        param.requires_grad_(not frozen)
    if config.freeze_layers and not frozen_layers:
        raise MirrorError(f"frozen layers: this model's ({type(model).__name__}) layers could not be told apart")
    if not config.lora_rank and not any(p.requires_grad for p in model.parameters()):
        raise MirrorError(
            f"nothing is left to train: the embeddings and all {config.freeze_layers} layers are frozen; freeze fewer "
            "layers, or train the embeddings"
        )


def _wrapped_for_training(model: Any, config: MirrorConfig, world_size: int, device: torch.device) -> Any:
    """The model the steps call: compiled and/or DDP-wrapped as the config and world ask."""
    wrapped = torch.compile(model, dynamic=True) if config.compile else model
    if world_size > 1:
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(wrapped, device_ids=[device.index] if device.type == "cuda" else None)
    return wrapped


def _halved_after_oom(
    batch_size: int, min_batch: int, world_size: int, optimizer: torch.optim.Optimizer, device: torch.device
) -> int:
    """The batch size to go on with after an out-of-memory step (a GPU's; a CPU is kept within its budget)."""
    if world_size > 1:
        raise MirrorError(f"out of memory at global batch {batch_size}: rerun with a smaller --batch-size") from None
    optimizer.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if batch_size // 2 < min_batch:
        raise MirrorError(f"out of memory even at batch size {batch_size}: use a smaller model or max length") from None
    return batch_size // 2


@dataclass
class StepInputs:
    """One step's batch as the host makes it: both views tokenized (this rank's share), in pinned memory on a GPU."""

    batch: dict[str, torch.Tensor]
    views: int  # this rank's views of the first kind: the batch is views1 + views2
    strings: int  # the step's strings, all ranks together
    padded: bool  # whether any row has padding (known here, on the host: the GPU is never asked)
    extra: list[dict[str, torch.Tensor] | None] = field(default_factory=list)  # each term's own inputs (terms' order)
    # pairs: the second views (partners, or a string's own second view) tokenized apart, padded to their own length;
    # `batch` then holds the first views only
    second: dict[str, torch.Tensor] | None = None
    second_padded: bool = False


def _prepare_step(
    encoder: Encoder,
    strings: list[str],
    config: MirrorConfig,
    rng: random.Random,
    device: torch.device,
    partners: list[str | None] | None = None,
) -> StepInputs:
    """The two views of `strings`, tokenized (this rank's share under torchrun). With `partners`, a string's second
    view is its partner (span-masked as a mirror view is, when `config.pair_mask`) where it has one, and each side is
    tokenized on its own (padded to its own longest), up to `config.pair_max_length` (either side may be the long
    one: the app reads the longer text column as the strings)."""
    view1, view2 = make_views(strings, encoder.mask_token, config.mask_span, rng, config.mask_min_chars)
    n = len(strings)
    rank, world_size = distributed.world()
    lo, hi = distributed.shard_bounds(n, world_size, rank)  # the whole batch in a single process
    if partners is not None:
        view2 = [_partner_view(p, v, encoder, config, rng) for p, v in zip(partners, view2, strict=True)]
        most = max(config.max_length, config.pair_max_length)  # either side may be the long one (a definition)
        first = encoder.tokenize(view1[lo:hi], most)
        second = encoder.tokenize(view2[lo:hi], most)
        if device.type == "cuda":
            first, second = ({k: v.pin_memory() for k, v in b.items()} for b in (first, second))
        return StepInputs(
            first,
            hi - lo,
            n,
            not bool(first["attention_mask"].all()),
            second=second,
            second_padded=not bool(second["attention_mask"].all()),
        )
    batch = encoder.tokenize(view1[lo:hi] + view2[lo:hi], config.max_length)
    padded = not bool(batch["attention_mask"].all())
    if device.type == "cuda":  # pinned host memory makes the copy to the GPU truly asynchronous
        batch = {k: v.pin_memory() for k, v in batch.items()}
    return StepInputs(batch, hi - lo, n, padded)


def _partner_view(partner: str | None, own: str, encoder: Encoder, config: MirrorConfig, rng: random.Random) -> str:
    """A string's second view in a pairs run: its partner (span-masked when `pair_mask`), or its own mirror view."""
    if partner is None:
        return own
    if not config.pair_mask or not encoder.mask_token:
        return partner
    return mask_span(partner, encoder.mask_token, config.mask_span, rng, config.mask_min_chars)


def _pair_lengths(
    encoder: Encoder, lengths: Sequence[int], partners: Sequence[str | None], config: MirrorConfig
) -> list[int]:
    """Each row's planning length in a pairs run: the longer of its string's and its partner's tokens, up to the
    pairs' max length."""
    rows = [i for i, p in enumerate(partners) if p is not None]
    theirs = encoder.token_lengths([partners[i] for i in rows]) if rows else []
    most = max(config.max_length, config.pair_max_length)
    out = [min(n, most) for n in lengths]
    for i, n in zip(rows, theirs, strict=True):
        out[i] = max(out[i], min(n, most))
    return out


class Ahead:
    """`take(ids, following)`: `prepare(ids)`, and `prepare(following)` started in a worker thread (threaded) to be
    taken next. One prepare at a time, in the order taken, so anything they draw from a seeded stream is drawn as it
    would be without the thread."""

    def __init__(self, prepare: Callable[[list[int]], StepInputs], threaded: bool):
        self.prepare = prepare
        self.pool = None
        if threaded:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(1, thread_name_prefix="mirror-next-batch")
        self.next: tuple[list[int], Any] | None = None

    def take(self, ids: list[int], following: list[int] | None) -> StepInputs:
        ready = self.next[1].result() if self.next is not None and self.next[0] is ids else None
        self.drop()
        inputs = ready if ready is not None else self.prepare(ids)
        if self.pool is not None and following is not None:
            self.next = (following, self.pool.submit(self.prepare, following))
        return inputs

    def drop(self) -> None:
        """Forget the batch made ahead (its draws are spent: the batches planned afresh draw the next ones)."""
        if self.next is not None:
            self.next[1].exception()  # wait for it: two prepares never run at once
            self.next = None

    def close(self) -> None:
        self.drop()
        if self.pool is not None:
            self.pool.shutdown(wait=True)


def _train_step(
    encoder: Encoder,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    inputs: StepInputs,
    config: MirrorConfig,
    device: torch.device,
    terms: Sequence[Term] = (),
) -> torch.Tensor:
    """One optimiser step; returns [loss, gradient norm] on the device (norm 0 when not clipping or with fp16).
    The loss is the contrastive one, without the negatives the terms mask, plus the terms' penalties."""
    batch = inputs.batch
    if device.type == "cuda":
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    b, n = inputs.views, inputs.strings
    extra = inputs.extra or [None] * len(terms)
    second = inputs.second
    if second is not None and device.type == "cuda":
        second = {k: v.to(device, non_blocking=True) for k, v in second.items()}
    with autocast(device, config.precision):
        emb = encoder.embed(batch, padded=inputs.padded)
        if second is not None:  # pairs: the second views, padded to their own length
            emb = torch.cat([emb, encoder.embed(second, padded=inputs.second_padded)])
        masks = [m for term in terms if (m := term.mask(batch, b)) is not None]
        penalties = [
            p
            for term, own in zip(terms, extra, strict=True)
            if (p := term.penalty(encoder.model, batch, emb[:b], emb[b:], own)) is not None  # this rank's views
        ]
    z1 = distributed.gather_with_grad(emb[:b], n)
    z2 = distributed.gather_with_grad(emb[b:], n)
    masked = functools.reduce(torch.logical_or, masks) if masks else None
    loss = nt_xent(z1, z2, config.temperature, masked)  # fp32 inside, whatever the autocast
    for penalty in penalties:
        loss = loss + penalty
    optimizer.zero_grad(set_to_none=True)
    grad_norm = torch.zeros((), device=loss.device)
    if scaler is None:
        loss.backward()
        if config.grad_clip > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(encoder.model.parameters(), config.grad_clip)
        optimizer.step()
    else:  # fp16: the scaler skips a step whose gradients overflowed and lowers its scale, so no norm is checked
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        if config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(encoder.model.parameters(), config.grad_clip)
        scaler.step(optimizer)
        scaler.update()
    return torch.stack([loss.detach().float(), grad_norm.detach().float()])  # read back later: no host sync here


def _check_finite(encoder: Encoder, step: int) -> None:
    """Refuse a model whose last step broke it: every loss read back was finite, but the update after the last
    one is only seen here (`--lr inf` once wrote nan into every weight of a 1-step run, and it was saved)."""
    if not torch.stack([torch.isfinite(p).all() for p in encoder.model.parameters()]).all().item():
        raise MirrorError(f"the loss became nan: the weights are no longer finite after step {step}; {LOWER_LR}")


def save_result(result: MirrorResult, out_dir: str | Path) -> Path:
    """Save the tuned encoder as a sentence-transformers folder plus mirror_config.json (atomic)."""
    return save_encoder(
        result.encoder,
        out_dir,
        extra={"config": result.config.to_dict(), "stats": result.stats(), "versions": versions()},
    )


def add_stats(folder: str | Path, **stats: Any) -> None:
    """Add `stats` to the run stats in a saved model's mirror_config.json (what was measured after the save: a pairs
    run's held-out gain), atomically."""
    import json
    import os

    path = Path(folder) / "mirror_config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["stats"] = {**data.get("stats", {}), **stats}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def versions() -> dict[str, str]:
    import transformers

    import mirror

    return {
        "mirror": mirror.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on matrices only: biases and LayerNorm weights are not decayed."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim < 2 or "LayerNorm" in name or "layer_norm" in name else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _set_dropout(model: torch.nn.Module, p: float) -> None:
    """The run's dropout on a model built with another: every Dropout module, the attention dropout a module keeps
    as a number (ModernBERT's `attention_dropout`, passed to its attention function), and the config's keys."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = p
        elif isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = p
    for key in DROPOUT_KEYS:
        if hasattr(model.config, key):
            setattr(model.config, key, p)


def _smallest_over_ranks(value: int, device: torch.device) -> int:
    if distributed.world()[1] == 1:
        return value
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.int64, device=device if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({torch.get_num_threads()} threads)"
