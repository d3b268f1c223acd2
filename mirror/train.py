"""mirror_tune: the MirrorBERT training loop. It knows nothing of the UI; it reports through callbacks.

Around the loop, each in a module of its own: the plan of its steps and their memory (mirror.plan), which weights
it trains (mirror.trainable), what it made and how that is saved (mirror.result), the loss terms (mirror.terms).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from mirror import distributed, hooks, memory
from mirror.augment import make_views, mask_span
from mirror.blend import mix_weights
from mirror.config import MirrorConfig
from mirror.encoder import Encoder, attention_note, autocast, load_encoder, resolve_device, resolve_precision
from mirror.errors import MirrorError
from mirror.general import Mixer
from mirror.lora import add_lora, merge_lora
from mirror.loss import PAIR_LOSS, nt_xent
from mirror.plan import (  # re-exported: `from mirror.train import plan_steps` as before
    BUCKET_CHUNK,
    MASK_EXTRA_TOKENS,
    RunPlan,
    StepBudget,
    count_steps,
    lora_bytes,
    plan_batches,
    plan_epoch,
    plan_rows,
    plan_run,
    plan_steps,
    step_budget,
    training_rows,
)
from mirror.result import MirrorResult, add_stats, save_result, versions
from mirror.terms import FrozenBase, Term, needs_base, terms_for
from mirror.trainable import embedding_names, param_groups, set_dropout, set_trainable, wrapped_for_training

__all__ = [
    "BUCKET_CHUNK",
    "MASK_EXTRA_TOKENS",
    "Ahead",
    "MirrorResult",
    "RunPlan",
    "StepBudget",
    "add_stats",
    "count_steps",
    "embedding_names",
    "lora_bytes",
    "mirror_tune",
    "plan_batches",
    "plan_epoch",
    "plan_run",
    "plan_steps",
    "save_result",
    "step_budget",
    "versions",
]

LOWER_LR = "lower the learning rate or raise the temperature"
StepFn = Callable[[int, int, float], None]
StopFn = Callable[[], bool]


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
    setup = _Setup.of(texts, config, encoder, memory_budget, pairs)
    config, device, plan, notes = setup.config, setup.device, setup.schedule, setup.notes
    encoder, model, optimizer = setup.encoder, setup.model, setup.optimizer
    log = LossLog(_step_reporter(on_step), 1 if device.type == "cpu" else config.log_every)
    # On a GPU the next batch is made while this step runs (the host is what a GPU step waits for: bench/RESULTS.md
    # "GPU"); one batch at a time and in order, so the views draw what they draw without it.
    ahead = Ahead(setup.prepare, threaded=device.type == "cuda")
    step, cancelled, total = 0, False, setup.plan.steps
    started = time.perf_counter()
    with _trained(encoder, model, setup.base, config, ahead, optimizer) as ended:
        for epoch in range(config.epochs):
            queue = plan.epoch()
            while queue and step < total:
                if distributed.any_rank(should_stop is not None and should_stop()):
                    cancelled = True
                    break
                hooks.pause()  # where a server lets interactive work go first (mirror.hooks)
                batch_ids = queue.pop(0)
                inputs = ahead.take(batch_ids, queue[0] if queue else None)
                try:
                    result = _train_step(encoder, optimizer, setup.scaler, inputs, config, device, setup.terms)
                except torch.OutOfMemoryError:  # fewer negatives per step, but the run finishes, and says so
                    ahead.drop()  # the next batch as planned before: the plan changes
                    smaller = _halved_after_oom(plan.batch_size, setup.min_batch, setup.world_size, optimizer, device)
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
        notes.append(split_note(plan.split, setup.plan.budget.total))
    return MirrorResult(
        encoder=encoder,
        config=config,
        losses=log.losses,
        batch_sizes=log.sizes[: len(log.losses)],
        steps=step,
        total_steps=total,
        seconds=time.perf_counter() - started,
        device=_device_name(device) + ", " + {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[setup.amp],
        cancelled=cancelled,
        n_texts=setup.n_texts,
        notes=notes,
    )


@dataclass
class _Setup:
    """Everything a run holds before its first step: the rows that train, the encoder made ready, the plan (its
    schedule of batches), the loss terms, the optimiser, and how a batch's inputs are made (`prepare`)."""

    config: MirrorConfig
    rows: Any  # mirror.plan.TrainingRows
    n_texts: int
    device: torch.device
    encoder: Encoder
    model: Any
    notes: list[str]
    world_size: int
    min_batch: int
    plan: RunPlan
    schedule: Any
    mixer: Mixer | None
    base: FrozenBase | None
    terms: list[Term]
    optimizer: torch.optim.Optimizer
    amp: torch.dtype | None
    scaler: Any
    rng: random.Random = field(default_factory=random.Random)
    mix_rng: random.Random = field(default_factory=random.Random)

    @staticmethod
    def of(
        texts: Sequence[str],
        config: MirrorConfig | None,
        encoder: Encoder | None,
        memory_budget: int | None,
        pairs: Sequence[str | None] | None,
    ) -> _Setup:
        config = (config or MirrorConfig.preset("words")).validated()
        rows = training_rows(texts, config, pairs)  # cleaned (and joined): what trains
        n_texts, n_train = len(rows.user), len(rows.texts)
        if n_texts < 2:
            raise MirrorError(f"need at least 2 distinct non-empty strings to tune (got {n_texts})")
        if n_train < 2:
            raise MirrorError(
                f"{n_texts} strings joined {config.join_views} at a time make 1 training string: join fewer"
            )
        config = config.scheduled(n_train)  # a small upload: more epochs, up to min_steps
        device = resolve_device(config.device)
        torch.manual_seed(config.seed)
        encoder = _ready_encoder(encoder, config, device)
        config, notes = _as_run(config, encoder)
        if config.join_views > 1:
            notes.append(f"{n_texts:,} strings joined {config.join_views} at a time: {n_train:,} training strings")
        _, world_size = distributed.world()
        if world_size > 1 and config.guide_margin > 0:  # its mask is of this rank's strings, the loss of all ranks'
            raise MirrorError("guided negatives (guide_margin) run on one process, not under torchrun")
        min_batch = max(2, world_size)
        if n_train < min_batch:
            raise MirrorError(f"need at least {min_batch} distinct strings for {world_size} processes (got {n_train})")
        # the plan (mirror.plan.RunPlan, what plan_steps and --plan count): every string tokenized (a pairs row's
        # length is its longer side's), the memory budget all ranks agree on, the batches split to fit it
        agree = lambda total: _smallest_over_ranks(total, device)  # noqa: E731
        plan = plan_rows(rows, config, encoder, memory_budget, world_size, agree)
        mixer = Mixer.of(config.mode, config.mix_general, rows.user, encoder.token_lengths)
        if mixer is not None:
            notes.append(mixer.note(config.mode))
        model = encoder.model
        set_trainable(model, config)
        if config.lora_rank:  # before the base's copy: the copy's adapters are zero, it computes the base
            adapted = add_lora(model, config.lora_rank, config.freeze_layers)
            notes.append(
                f"LoRA rank {config.lora_rank} on {adapted} attention layers, merged into the weights at the end"
            )
        base = FrozenBase.of(model, encoder.pooling) if needs_base(config) else None
        terms = terms_for(config, model, base, rows.texts, plan.lengths, encoder.tokenize, encoder.token_limit)
        encoder.model = wrapped_for_training(model, config, world_size, device)
        optimizer = torch.optim.AdamW(param_groups(model, config.weight_decay), lr=config.lr, fused=True)
        amp = resolve_precision(device, config.precision, model, "train")
        # fp16 needs loss scaling; bf16 has fp32's range and does not.
        scaler = torch.amp.GradScaler(device.type) if amp == torch.float16 else None
        return _Setup(
            config, rows, n_texts, device, encoder, model, notes, world_size, min_batch, plan, plan.schedule(),
            mixer, base, terms, optimizer, amp, scaler,
            rng=random.Random(config.seed + 1),  # views draw from their own stream: plan_steps replays the plan's
            mix_rng=random.Random(config.seed + 3),  # its own stream: without mixing, batches are as they were
        )  # fmt: skip

    def prepare(self, batch_ids: list[int]) -> StepInputs:
        """One step's inputs: the batch's strings (and general text mixed in), their views, each term's extra."""
        texts, partners, lengths = self.rows.texts, self.rows.partners, self.plan.lengths
        strings = [texts[i] for i in batch_ids] + _mixed_in(
            self.mixer, batch_ids, lengths, self.plan.budget, self.mix_rng
        )
        sides = (
            None if partners is None else [partners[i] for i in batch_ids] + [None] * (len(strings) - len(batch_ids))
        )
        inputs = _prepare_step(self.encoder, strings, self.config, self.rng, self.device, sides)
        inputs.extra = [term.prepare(batch_ids) for term in self.terms]
        return inputs


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
    set_dropout(encoder.model, config.dropout)
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
    with autocast(device, config.precision, encoder.model, "train"):
        emb = encoder.embed(batch, padded=inputs.padded)
        if second is not None:  # pairs: the second views, padded to their own length
            emb = torch.cat([emb, encoder.embed(second, padded=inputs.second_padded)])
        masks = [m for term in terms if (m := term.mask(batch, b)) is not None]
        penalties = [
            p
            for term, own in zip(terms, extra, strict=True)
            # this rank's views (a pairs step's partners tokenized apart: `second`)
            if (p := term.penalty(encoder.model, batch, emb[:b], emb[b:], own, second)) is not None
        ]
    z1 = distributed.gather_with_grad(emb[:b], n)
    z2 = distributed.gather_with_grad(emb[b:], n)
    masked = functools.reduce(torch.logical_or, masks) if masks else None
    contrastive = PAIR_LOSS[config.pair_loss] if config.pairs else nt_xent
    loss = contrastive(z1, z2, config.temperature, masked)  # fp32 inside, whatever the autocast
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
