"""The steps a run will take, as the estimator prices them: mirror.plan's RunPlan (the run's own plan) of the rows
that train, without training; and what each step's anchors add to it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mirror.config import MirrorConfig

if TYPE_CHECKING:
    from mirror.encoder import Encoder


@dataclass(frozen=True)
class TrainSteps:
    """The steps a run will take (`train_plan`), how many of its batches are split to fit memory, and the memory
    budget it plans with (bytes): what the plan on the page says of them (ui.plan_md)."""

    steps: list[tuple[int, ...]]
    split: int = 0
    memory: int = 0
    unsplit: int = 0  # the steps the same run takes where no batch is split (memory to spare), when some are


def train_plan(
    texts: Sequence[str],
    lengths: Sequence[int],
    config: MirrorConfig,
    encoder: Encoder,
    memory_budget: int | None = None,
    pad_by: Sequence[Sequence[int]] = (),
    partners: Sequence[str | None] | None = None,
    *,
    count_unsplit: bool = False,
) -> TrainSteps:
    """The steps (`TrainSteps.steps`: strings, padded length) `mirror_tune(texts, config, encoder=encoder,
    memory_budget=...)` will run, with how many batches it splits for memory: mirror.plan.RunPlan's batches
    (shuffled, length-bucketed, split to fit memory), each padded to its longest string with special tokens (one
    more where a span mask may split a word). With `pad_by` (lists of lengths, such as the two sides of a pairs run), the same batches padded to each list's
    longest: (strings, padded by the first, padded by the second, ...). `partners` (a pairs run's, row for row,
    None for a row without one): the rows the run holds out of training (mirror.pairs.held_out_rows) are not
    planned, as they never train. `count_unsplit`: where batches are split, also the steps with memory to spare (a
    second plan: only the plan the page words needs it)."""
    from mirror.pairs import held_out_rows, partner_groups
    from mirror.plan import RunPlan, step_budget

    held = set(held_out_rows(partners, config)) if partners is not None else set()
    if held:
        keep = [i for i in range(len(lengths)) if i not in held]
        texts, lengths = [texts[i] for i in keep], [lengths[i] for i in keep]
        pad_by = [[side[i] for i in keep] for side in pad_by]
        partners = [partners[i] for i in keep] if partners is not None else None
    if len(lengths) < 2:
        return TrainSteps([])
    config = config.scheduled(len(lengths))  # a small upload's extra epochs, as mirror_tune runs them
    budget = step_budget(encoder, config, memory_budget, paired=config.pairs)
    # rows sharing a partner are kept in separate batches, as the run keeps them (mirror.pairs.partner_groups)
    plan = RunPlan.of(lengths, config, budget, groups=partner_groups(partners))
    extra = encoder.tokenizer.num_special_tokens_to_add()
    maskable = [bool(encoder.mask_token) and config.mask_span > 0 and len(t) >= config.mask_min_chars for t in texts]
    sides = [[n + extra + m for n, m in zip(side, maskable, strict=True)] for side in (pad_by or (lengths,))]
    steps = [(len(b), *(min(max(side[i] for i in b), budget.max_length) for side in sides)) for b in plan.batches]
    unsplit = 0
    if (
        count_unsplit and plan.split
    ):  # the same draws with memory to spare (splitting draws nothing from the plan's stream)
        roomy = dataclasses.replace(budget, total=2**62)
        unsplit = RunPlan.of(lengths, config, roomy, groups=partner_groups(partners)).steps
    return TrainSteps(steps, plan.split, budget.total, unsplit)


def chooses(config: MirrorConfig, partners: Sequence[str | None] | None) -> bool:
    """Whether a run of `config` on rows with these `partners` chooses its blend (mirror.job): a pairs run with
    enough held-out rows (too few: the preset's own α, nothing chosen, and never a second training)."""
    from mirror.job import CHOICE_ROWS_LEAST
    from mirror.pairs import held_out_rows

    if not config.blend_choose or partners is None:
        return False
    return len(held_out_rows(partners, config)) >= 2 * CHOICE_ROWS_LEAST


def choice_price(
    lengths: Sequence[int],
    config: MirrorConfig,
    partners: Sequence[str | None] | None,
    index_s: float,
    per_dev: float,
    cal: Any,
    base_kept: bool = False,
) -> float:
    """What a pairs run's blend choice costs (mirror/choose.py), 0 for a run that does not choose: the weights as
    trained saved once more, a pool of at most POOL strings encoded by the base and at each α, and the general checks'
    dev halves scored for, typically, CHOICE_ALPHA_ROUNDS α (checked in the order of their held-out gain) and the
    base, unless its side is kept already (`base_kept`: mirror.checks.kept_side, from an earlier run on this base).

    `per_dev`: one encoder's round of the dev halves (their own encoding priced, as a run's checks measured them:
    stdlib's documents encode ~25% more in the dev halves; priced as the check halves, a 1,000-row run's choice took
    1.7x its price, bench/RESULTS.md "Estimate vs run on a dictionary")."""
    from mirror.choose import ALPHAS, POOL

    if not lengths or not chooses(config, partners):
        return 0.0
    pool = min(1.0, POOL / len(lengths))
    rounds = CHOICE_ALPHA_ROUNDS + (0 if base_kept else 1)
    return cal.save_s + (1 + len(ALPHAS)) * pool * index_s + rounds * per_dev


# α's dev halves scored before one keeps the rule (or all four when none does): 4, 2, 4 and 1 on the Gene Ontology,
# FOLDOC, stdlib and WordNet check halves (bench/RESULTS.md "Pairs: the choice with room for a dev half's noise")
CHOICE_ALPHA_ROUNDS = 2.75


_GENERAL_PADDED: dict[tuple[str, str, int], float] = {}


def anchor_batches(config: MirrorConfig, encoder: Encoder) -> list[tuple[int, float]]:
    """(texts, padded length) of what a step's anchors (mirror.terms: the long-text and the general anchor) put
    through the tuned model (one view, forward and backward) and the frozen base: the long texts at the anchor's
    token bound (joined to about that), the general texts at their chunks' mean padded length (a step draws one
    chunk, its texts of one join: measured once a process with this tokenizer)."""
    from mirror.terms import GENERAL_PER_STEP, GENERAL_TOKENS, LONG_PER_STEP, LONG_TOKENS, general_texts

    extra = encoder.tokenizer.num_special_tokens_to_add()
    out: list[tuple[int, float]] = []
    if config.long_anchor > 0:
        out.append((LONG_PER_STEP, min(LONG_TOKENS[1], encoder.token_limit)))
    if config.general_anchor > 0:
        limit = min(GENERAL_TOKENS, encoder.token_limit)
        key = (str(getattr(encoder.tokenizer, "name_or_path", "")), config.mode, limit)
        if key not in _GENERAL_PADDED:
            texts = general_texts(config.mode, config.seed)
            lengths = [min(n + extra, limit) for n in encoder.token_lengths(texts)]
            chunks = [max(lengths[i : i + GENERAL_PER_STEP]) for i in range(0, len(lengths), GENERAL_PER_STEP)]
            _GENERAL_PADDED[key] = sum(chunks) / len(chunks)
        out.append((GENERAL_PER_STEP, _GENERAL_PADDED[key]))
    return out


def steps_price(
    steps: Sequence[tuple[int, ...]], config: MirrorConfig, encoder: Encoder, cal: Any, partnered: bool
) -> float:
    """Seconds of a run's steps (`train_plan`'s (strings, padded, second padded)) at `cal`'s costs: each side of a
    step padded to its own longest (a mirror run's two views; a pairs run's strings and partners), what the frozen base
    encodes (distillation: the strings, and the partners too where each is distilled toward itself) and each step's
    anchors (`anchor_batches`: one view through the tuned model, forward and backward, and an encode by the base)."""
    teacher = cal.encode if config.distill else lambda *_: 0.0
    teacher2 = teacher if config.distills_own and partnered else lambda *_: 0.0
    anchors = sum(cal.step(n * p, p) / 2 + cal.encode(n * p, p) for n, p in anchor_batches(config, encoder))
    return sum(
        (cal.step(n * p, p) + cal.step(n * q, q)) / 2 + teacher(n * p, p) + teacher2(n * q, q) + anchors
        for n, p, q in steps
    )
