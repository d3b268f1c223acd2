"""How a run's steps are planned: the rows that train (`training_rows`: cleaned, less a pairs run's held-out rows,
joined), their batches (shuffled, bucketed by length, never a lone string, never two rows sharing a partner), what one step may cost in memory
(`StepBudget`: a batch of long strings is split to fit it), how many steps a run takes and of what (`RunPlan`, made by
`plan_run`/`plan_rows`: the one home of that count, which mirror_tune runs and `plan_steps`, `train --plan` and the
app's estimate read) and the run's own plan as it goes (`Schedule`, replanned at a smaller batch after an
out-of-memory step). The same seeded stream plans the run and its replay.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from mirror import memory
from mirror.config import MirrorConfig
from mirror.data import clean_texts
from mirror.encoder import Encoder
from mirror.errors import MirrorError
from mirror.general import mixed_count
from mirror.lora import lora_targets
from mirror.pairs import HeldOut, clean_pairs, partner_groups
from mirror.precision import resolve_device, resolve_precision
from mirror.terms import joined, needs_base

BUCKET_CHUNK = 32  # batches per length-sorting chunk


def plan_batches(
    n: int,
    batch_size: int,
    rng: random.Random,
    min_size: int = 2,
    lengths: Sequence[int] | None = None,
    groups: Sequence[int] | None = None,
) -> list[list[int]]:
    """Shuffled batches covering all n strings once; never drops a partial batch.

    A final batch smaller than `min_size` (one string has no negatives; under torchrun each rank
    needs a string) joins the previous batch. With `lengths`, strings are sorted by length within
    random chunks of BUCKET_CHUNK batches and the batches are then shuffled: little padding, random order.
    With `groups` (mirror.pairs.partner_groups: rows sharing a partner), no batch holds two rows of a group
    (`separate`: the rng is not drawn again, so batches without shared partners are as they always were).
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
    return batches if groups is None else separate(batches, groups, lengths, min_size)


def separate(
    batches: list[list[int]], groups: Sequence[int], lengths: Sequence[int] | None = None, min_size: int = 2
) -> list[list[int]]:
    """The batches with no two rows of one group (`groups`: a row's group, -1 for none) in a batch: a row whose group
    its batch already holds is swapped with a row of another batch that holds neither group (of the swaps that
    work, the row nearest its length, so bucketed batches stay bucketed; sizes and the step count are kept). A row
    no swap can place (a group with more rows than there are batches) sits this epoch out, and a batch left under
    `min_size` joins one that holds none of its groups, or sits out too. Deterministic: the rng is not drawn."""
    counts = [_group_counts(batch, groups) for batch in batches]
    for b, batch in enumerate(batches):
        pos = 0
        while pos < len(batch):
            row = batch[pos]
            g = groups[row]
            if g < 0 or counts[b][g] < 2:
                pos += 1
                continue
            swap = _swap_for(row, b, batches, counts, groups, lengths)
            counts[b][g] -= 1
            if swap is None:  # nowhere to go without a false negative: not in this epoch
                batch.pop(pos)
                continue
            c, q = swap
            other = batches[c][q]
            h = groups[other]
            batch[pos], batches[c][q] = other, row
            counts[c][g] = counts[c].get(g, 0) + 1
            if h >= 0:
                counts[c][h] -= 1
                counts[b][h] = counts[b].get(h, 0) + 1
            pos += 1
    kept = [batch for batch in batches if len(batch) >= min_size]
    for batch in batches:
        if 0 < len(batch) < min_size:
            home = next((k for k in kept if not _shares_group(batch, k, groups)), None)
            if home is not None:
                home.extend(batch)
    return kept


def _shares_group(batch: Sequence[int], other: Sequence[int], groups: Sequence[int]) -> bool:
    theirs = {groups[j] for j in other if groups[j] >= 0}
    return any(groups[i] in theirs for i in batch)


def _group_counts(batch: Sequence[int], groups: Sequence[int]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for i in batch:
        if groups[i] >= 0:
            counts[groups[i]] = counts.get(groups[i], 0) + 1
    return counts


def _swap_for(
    row: int,
    b: int,
    batches: Sequence[Sequence[int]],
    counts: Sequence[dict[int, int]],
    groups: Sequence[int],
    lengths: Sequence[int] | None,
) -> tuple[int, int] | None:
    """(batch, position) of the row to trade places with `row` of batch `b` (separate), or None."""
    g, best, gap = groups[row], None, None
    for c, other in enumerate(batches):
        if c == b or counts[c].get(g, 0):
            continue
        for q, i in enumerate(other):
            h = groups[i]
            if h >= 0 and counts[b].get(h, 0):
                continue
            if lengths is None:
                return c, q
            d = abs(lengths[i] - lengths[row])
            if gap is None or d < gap:
                best, gap = (c, q), d
                if d == 0:
                    return best
    return best


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
    amp_dtype = resolve_precision(device, config.precision, encoder.model, "train")
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
    groups: Sequence[int] | None = None,
) -> tuple[list[list[int]], int]:
    """One epoch's batches (plan_batches, then split where a batch does not fit `budget`) and how many were split.
    `groups`: rows sharing a partner, never in one batch (plan_batches)."""
    batches, split = [], 0
    for batch in plan_batches(len(lengths), batch_size, rng, min_size, lengths if bucket else None, groups):
        parts = budget.split(batch, lengths, min_size)
        split += len(parts) > 1
        batches.extend(parts)
    return batches, split


def replay(
    lengths: Sequence[int],
    batch_size: int,
    rng: random.Random,
    budget: StepBudget,
    epochs: int,
    min_size: int = 2,
    bucket: bool = True,
    max_steps: int | None = None,
    groups: Sequence[int] | None = None,
) -> Iterator[tuple[list[list[int]], int]]:
    """Each epoch's batches and how many of them were split, as the run draws them (plan_epoch), on a copy of `rng`
    (left as it was); no epoch is drawn once `max_steps` steps are planned, as the run draws none."""
    rng, total = copy.deepcopy(rng), 0
    for _ in range(epochs):
        if max_steps and total >= max_steps:
            break
        batches, split = plan_epoch(lengths, batch_size, rng, budget, min_size, bucket, groups)
        total += len(batches)
        yield batches, split


def count_steps(
    lengths: Sequence[int],
    batch_size: int,
    rng: random.Random,
    budget: StepBudget,
    epochs: int,
    min_size: int = 2,
    bucket: bool = True,
    max_steps: int | None = None,
    groups: Sequence[int] | None = None,
) -> int:
    """Steps of `epochs` planned epochs, replayed on a copy of `rng` (which is left as it was)."""
    plans = replay(lengths, batch_size, rng, budget, epochs, min_size, bucket, max_steps, groups)
    total = sum(len(b) for b, _ in plans)
    return min(total, max_steps) if max_steps else total


@dataclass(frozen=True)
class Rows:
    """What a run trains on: the strings cleaned (and their partners), less the rows a pairs run holds out, joined
    `join_views` at a time (`training_rows`)."""

    user: list[str]  # the user's strings that train
    texts: list[str]  # the training strings: `user`, joined when join_views > 1
    partners: list[str | None] | None  # each training string's partner (None: trains alone), None without pairs
    held_out: list[int]  # rows of the cleaned strings held out of training (HeldOut.for_run)


def training_rows(
    texts: Sequence[str], config: MirrorConfig, pairs: Sequence[str | None] | None = None, hold_out: bool = False
) -> Rows:
    """The rows a run of `config` on `texts` (and `pairs`) trains: cleaned as mirror_tune cleans them and, with
    `hold_out`, less the rows the CLI and mirror.job hold out of a pairs run before calling it (HeldOut.for_run).
    MirrorError for pairs with joined views."""
    partners: list[str | None] | None = None
    held: list[int] = []
    if pairs is None:
        texts, _ = clean_texts(texts)
    else:
        texts, partners, _, _ = clean_pairs(texts, pairs)
        if config.join_views > 1:
            raise MirrorError("joined views (join_views) and pairs do not go together: a pair is one string's")
        if hold_out:
            kept = HeldOut.for_run(texts, partners, config)
            held, (texts, partners) = kept.rows, kept.training()
    return Rows(list(texts), joined(texts, config.join_views, config.seed), partners, held)


@dataclass(frozen=True)
class RunPlan:
    """How many steps a run makes, and of what: the one home of that count. mirror_tune runs `schedule()` (the same
    seeded stream), and `plan_steps`, `python -m mirror train --plan` and the app's estimate
    (explorer.tune.steps.train_plan) read `epochs`: each epoch's batches (shuffled, bucketed by length, those that do
    not fit `budget` split longest first) and how many were split, up to `config.max_steps`."""

    config: MirrorConfig  # as the run runs it: `scheduled` (a small upload's extra epochs)
    lengths: list[int]  # each training string's planning length (a pairs row's longer side: pair_lengths)
    budget: StepBudget
    min_batch: int
    epochs: list[tuple[list[list[int]], int]]  # each planned epoch's batches and how many of them were split
    strings: int  # the user's strings that train
    held_out: int = 0  # a pairs run's rows held out of training
    groups: list[int] | None = None  # rows sharing a partner (mirror.pairs.partner_groups): never in one batch

    @staticmethod
    def of(
        lengths: Sequence[int],
        config: MirrorConfig,
        budget: StepBudget,
        min_batch: int = 2,
        strings: int | None = None,
        held_out: int = 0,
        groups: Sequence[int] | None = None,
    ) -> RunPlan:
        """The plan of a run over strings of these planning lengths (none: fewer than `min_batch` strings); `groups`:
        the rows sharing a partner (mirror.pairs.partner_groups), kept in separate batches."""
        config = config.scheduled(len(lengths))
        epochs = (
            list(
                replay(
                    lengths,
                    config.batch_size,
                    random.Random(config.seed),  # mirror_tune's plan stream
                    budget,
                    config.epochs,
                    min_batch,
                    config.bucket_by_length,
                    config.max_steps,
                    groups,
                )
            )
            if len(lengths) >= min_batch
            else []
        )
        n = len(lengths) if strings is None else strings
        return RunPlan(config, list(lengths), budget, min_batch, epochs, n, held_out, _listed(groups))

    @property
    def batches(self) -> list[list[int]]:
        """Every step's strings (indices into `lengths`), in the order the run trains them."""
        steps = [b for batches, _ in self.epochs for b in batches]
        return steps[: self.config.max_steps] if self.config.max_steps else steps

    @property
    def steps(self) -> int:
        return len(self.batches)

    @property
    def split(self) -> int:
        """Batches split to fit the memory budget, in the epochs the run draws (what its note counts)."""
        return sum(split for _, split in self.epochs)

    def schedule(self) -> Schedule:
        """The run's own plan as it goes: the same batches drawn epoch by epoch from the same seeded stream."""
        rng = random.Random(self.config.seed)
        return Schedule(self.lengths, self.budget, rng, self.min_batch, self.config, self.groups)

    def lines(self) -> list[str]:
        """The plan in a few lines for a terminal (`python -m mirror train --plan`)."""
        c, sizes = self.config, [len(b) for b in self.batches]
        epochs = f"{c.epochs} epoch{'s' if c.epochs != 1 else ''}"
        held = f"; {self.held_out:,} rows held out of training" if self.held_out else ""
        cap = f", stopped at --max-steps {c.max_steps}" if c.max_steps and c.max_steps <= self.steps else ""
        out = [f"plan: {self.steps:,} steps: {epochs} of {len(self.lengths):,} training strings{cap}{held}"]
        if sizes:
            out.append(f"batches: {c.batch_size} strings a step (steps of {min(sizes)} to {max(sizes)} strings)")
        whose = "the" if self.budget.explicit else "this machine's"
        if self.split:
            out.append(
                f"memory: {self.split:,} batches of long strings split to fit {whose} "
                f"{memory.fmt_gb(self.budget.total)} budget (fewer negatives in those steps)"
            )
        else:
            out.append(f"memory: every batch fits {whose} {memory.fmt_gb(self.budget.total)} budget")
        return out


def plan_rows(
    rows: Rows,
    config: MirrorConfig,
    encoder: Encoder,
    memory_budget: int | None = None,
    world_size: int = 1,
    agree: Callable[[int], int] | None = None,
) -> RunPlan:
    """The plan of a run of `config` on `rows` (training_rows): every training string tokenized (and partner), the
    memory budget (step_budget; `agree`: what all ranks agree on, given this rank's total), then RunPlan.of."""
    config = config.scheduled(len(rows.texts))
    lengths = encoder.token_lengths(rows.texts)
    if rows.partners is not None:
        lengths = pair_lengths(encoder, lengths, rows.partners, config)
    budget = step_budget(encoder, config, memory_budget, world_size, paired=rows.partners is not None)
    if agree is not None:
        budget = dataclasses.replace(budget, total=agree(budget.total))
    groups = partner_groups(rows.partners)
    return RunPlan.of(lengths, config, budget, max(2, world_size), len(rows.user), len(rows.held_out), groups)


def _listed(groups: Sequence[int] | None) -> list[int] | None:
    return None if groups is None else list(groups)


def plan_run(
    texts: Sequence[str],
    config: MirrorConfig,
    encoder: Encoder,
    memory_budget: int | None = None,
    pairs: Sequence[str | None] | None = None,
    hold_out: bool = False,
) -> RunPlan:
    """The plan of `mirror_tune(texts, config, encoder=encoder, memory_budget=..., pairs=...)` on one process; with
    `hold_out`, of the run the CLI or mirror.job makes of a pairs file (its held-out rows never train)."""
    config = config.validated()
    return plan_rows(training_rows(texts, config, pairs, hold_out), config, encoder, memory_budget)


def plan_steps(
    texts: Sequence[str],
    config: MirrorConfig,
    encoder: Encoder,
    memory_budget: int | None = None,
    pairs: Sequence[str | None] | None = None,
) -> int:
    """The optimiser steps `mirror_tune(texts, config, encoder=encoder, memory_budget=...)` will run (plan_run).

    Exact for the same budget (an explicit one, or the machine's when its free memory has not moved) on one
    process; it tokenizes every string (and partner: `pairs`), like the run does.
    """
    return plan_run(texts, config, encoder, memory_budget, pairs).steps


def pair_lengths(
    encoder: Encoder, lengths: Sequence[int], partners: Sequence[str | None], config: MirrorConfig
) -> list[int]:
    """Each row's planning length in a pairs run (longer_sides): its string's tokens (`lengths`) and its partner's,
    tokenized here (a row without one: its string's again)."""
    rows = [i for i, p in enumerate(partners) if p is not None]
    theirs = encoder.token_lengths([partners[i] for i in rows]) if rows else []
    second = list(lengths)
    for i, n in zip(rows, theirs, strict=True):
        second[i] = n
    return longer_sides(lengths, second, config)


def longer_sides(lengths: Sequence[int], second: Sequence[int], config: MirrorConfig) -> list[int]:
    """Each row's planning length in a pairs run: the longer of its string's tokens (`lengths`) and its second view's
    (`second`: its partner's, or its string's where it has none), up to the pairs' max length."""
    most = max(config.max_length, config.pair_max_length)
    return [min(max(a, b), most) for a, b in zip(lengths, second, strict=True)]


class Schedule:
    """The batches of each epoch from one seeded stream (RunPlan replays it), split where a batch does not fit the
    memory budget, and replanned at a smaller batch after an out-of-memory step."""

    def __init__(
        self,
        lengths: Sequence[int],
        budget: StepBudget,
        rng: random.Random,
        min_batch: int,
        config: MirrorConfig,
        groups: Sequence[int] | None = None,
    ):
        self.lengths, self.budget, self.rng, self.min_batch, self.groups = lengths, budget, rng, min_batch, groups
        self.bucket, self.epochs, self.max_steps = config.bucket_by_length, config.epochs, config.max_steps
        self.batch_size, self.split = config.batch_size, 0

    def count(self, epochs: int, max_steps: int | None = None) -> int:
        """Steps of `epochs` epochs at the batch size now (a replay: the stream is left as it was)."""
        return count_steps(
            self.lengths, self.batch_size, self.rng, self.budget, epochs, self.min_batch, self.bucket, max_steps,
            self.groups,
        )  # fmt: skip

    def total(self) -> int:
        return self.count(self.epochs, self.max_steps)

    def epoch(self) -> list[list[int]]:
        queue, n_split = plan_epoch(
            self.lengths, self.batch_size, self.rng, self.budget, self.min_batch, self.bucket, self.groups
        )
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
        if self.groups is not None:
            chunks = separate(chunks, self.groups, self.lengths, self.min_batch)
        queue = [part for chunk in chunks for part in self.budget.split(chunk, self.lengths, self.min_batch)]
        later = self.count(epochs_after)
        total = step + len(queue) + later
        return queue, min(total, self.max_steps or total)
