"""The extra terms of a step's loss, each one object the step asks, chosen once from the config (`terms_for`).

A term may add inputs to a step (`prepare`: tokenized on the host, ahead of the step on a GPU), leave some in-batch
negatives out of the contrastive loss (`mask`) and add a penalty (`penalty`). The step sums what the terms give; the
loop never branches on one. Adding a remedy is one new class here and one line in `terms_for`.

The terms that look at the base share one frozen copy of it (`FrozenBase`), which is also the other end of the blend
after training (mirror.train).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mirror.config import MirrorConfig
from mirror.encoder import pooled
from mirror.loss import distill_cosine, guided_mask, l2_to_anchor

Batch = dict[str, torch.Tensor]

LONG_TOKENS = (128, 256)  # the long-text anchor's texts: the user's strings joined to about this many tokens
LONG_PER_STEP = 4  # long texts a step pulls toward the base's embedding
GENERAL_PER_STEP = 16  # general texts a step pulls toward the base's embedding
GENERAL_JOINS = (1, 2, 4, 8)  # a general text: this many consecutive Wikipedia sentences (a sentence to a paragraph)
GENERAL_TOKENS = 256  # and at most this many tokens


def needs_base(config: MirrorConfig) -> bool:
    """Whether the run keeps a frozen copy of the base (distillation, L2 to the base, a blend after training, guided
    negatives, the long-text anchor)."""
    return (
        config.distill > 0
        or config.l2_base > 0
        or config.blend_alpha < 1.0
        or config.guide_margin > 0
        or config.long_anchor > 0
        or config.general_anchor > 0
    )


@dataclass
class FrozenBase:
    """A copy of the weights as the run starts, in eval mode (no dropout), no gradients: the teacher of distillation,
    the point L2-SP pulls toward, the guide of the negatives, the other end of the blend after training."""

    model: Any
    pooling: str

    @staticmethod
    def of(model: Any, pooling: str) -> FrozenBase:
        return FrozenBase(copy.deepcopy(model).eval().requires_grad_(False), pooling)

    def embed(self, batch: Batch) -> torch.Tensor:
        with torch.no_grad():
            return pooled(self.model, batch, self.pooling)


def first(batch: Batch, n: int) -> Batch:
    """The first n rows of a tokenized batch: the unmasked view of each string (the views are view1 + view2)."""
    return {k: v[:n] for k, v in batch.items()}


class Term:
    """One extra term; every hook gives nothing unless the term overrides it."""

    def prepare(self, batch_ids: list[int]) -> Batch | None:  # noqa: ARG002
        """What this term needs tokenized for the step of strings `batch_ids` (host side), or None."""
        return None

    def mask(self, batch: Batch, b: int) -> torch.Tensor | None:  # noqa: ARG002
        """(b, b) bool: pairs of this step's strings not to count as each other's negatives, or None."""
        return None

    def penalty(  # noqa: ARG002
        self, student: Any, batch: Batch, z1: torch.Tensor, z2: torch.Tensor, extra: Batch | None, second=None
    ):
        """A scalar added to the loss (z1, z2: this step's two views' embeddings; `second`: a pairs step's second
        views, tokenized apart), or None."""
        return None


@dataclass
class Distill(Term):
    """λ·mean(1 − cos) of both views against the base's embedding of the unmasked string; with `own`, a pairs step's
    second view (the partner) against the base's embedding of that view itself, not of its string."""

    base: FrozenBase
    weight: float
    own: bool = False

    def penalty(self, student, batch, z1, z2, extra, second=None):  # noqa: ARG002
        target = self.base.embed(first(batch, len(z1)))
        target2 = self.base.embed(second) if self.own and second is not None else target
        return self.weight * (distill_cosine(z1, target) + distill_cosine(z2, target2)) / 2


@dataclass
class L2ToBase(Term):
    """λ·Σ‖θ − θ_base‖² over the weights that train (L2-SP)."""

    pairs: list[tuple[torch.Tensor, torch.Tensor]]  # (trained weight, its base value)
    weight: float

    def penalty(self, student, batch, z1, z2, extra, second=None):  # noqa: ARG002
        if not self.pairs:
            return None
        return self.weight * l2_to_anchor([p for p, _ in self.pairs], [a for _, a in self.pairs]).to(z1.device)


@dataclass
class GuidedNegatives(Term):
    """GISTEmbed's guide: a negative the frozen base finds within `margin` of a positive's cosine is left out of the
    contrastive loss, not pushed away (near-duplicates in the user's list)."""

    base: FrozenBase
    margin: float

    def mask(self, batch, b):
        return guided_mask(self.base.embed(first(batch, b)), self.margin)


@dataclass
class TextAnchor(Term):
    """A few texts a step (`prepare` picks them) embedded by the tuned model (dropout on, with gradients) and by the
    frozen base: λ·mean(1 − cos)."""

    base: FrozenBase
    weight: float
    texts: list[str]
    tokenize: Callable[[list[str]], Batch]

    def penalty(self, student, batch, z1, z2, extra, second=None):  # noqa: ARG002
        if not extra:
            return None
        texts = {k: v.to(z1.device, non_blocking=True) for k, v in extra.items()}
        target = self.base.embed(texts)
        return self.weight * distill_cosine(pooled(student, texts, self.base.pooling), target)


@dataclass
class LongAnchor(TextAnchor):
    """Each step, LONG_PER_STEP long texts (the user's strings joined to about 192 tokens) held near the base's
    embedding: distillation where the short training strings cannot protect: long inputs."""

    def prepare(self, batch_ids):
        start = (batch_ids[0] * LONG_PER_STEP) % len(self.texts)
        return self.tokenize(
            [self.texts[(start + j) % len(self.texts)] for j in range(min(LONG_PER_STEP, len(self.texts)))]
        )


@dataclass
class GeneralAnchor(TextAnchor):
    """Each step, GENERAL_PER_STEP general texts (mirror.general's bundled Wikipedia: one to eight consecutive
    sentences, or words for a words run) held near the base's embedding: distillation on text that is not the user's,
    so what tuning moves is the user's domain and not how the model reads everything else (the general checks' data
    is not in it: mirror/general.py)."""

    def prepare(self, batch_ids):
        chunks = max(1, len(self.texts) // GENERAL_PER_STEP)
        start = (batch_ids[0] % chunks) * GENERAL_PER_STEP  # one chunk of texts of one join: little padding
        return self.tokenize(self.texts[start : start + GENERAL_PER_STEP])


def general_texts(mode: str, seed: int) -> list[str]:
    """The general anchor's texts: for a sentences run the bundled Wikipedia sentences, each GENERAL_JOINS run of
    consecutive ones joined (the file keeps each article's sentences in order: a paragraph of one article); for a
    words run the bundled words. Shuffled with the run's seed in chunks of GENERAL_PER_STEP texts of one join (a
    step's texts pad to about one length), the chunks in a seeded order."""
    from mirror.general import general_text

    lines = [t for t in general_text(mode) if t.strip()]
    rng = random.Random(seed + 7)  # its own stream, as joined()'s
    chunks: list[list[str]] = []
    for n in (1,) if mode == "words" else GENERAL_JOINS:
        texts = [" ".join(lines[i : i + n]) for i in range(0, len(lines) - n + 1, n)]
        rng.shuffle(texts)
        whole = max(1, len(texts) - GENERAL_PER_STEP + 1)  # chunks of GENERAL_PER_STEP (a remainder left out)
        chunks += [texts[i : i + GENERAL_PER_STEP] for i in range(0, whole, GENERAL_PER_STEP)]
    rng.shuffle(chunks)
    return [t for chunk in chunks for t in chunk]


def joined(texts: list[str], n: int, seed: int) -> list[str]:
    """Longer views: the strings in a seeded random order, joined `n` at a time with a space (as they are for n 1)."""
    if n <= 1:
        return texts
    order = list(texts)
    random.Random(seed + 2).shuffle(order)  # its own stream: the batch plan and the views draw from theirs
    return [" ".join(order[i : i + n]) for i in range(0, len(order), n)]


def long_texts(texts: Sequence[str], lengths: Sequence[int], seed: int) -> list[str]:
    """The user's strings (shuffled, seeded) joined into texts of about 192 tokens (LONG_TOKENS' middle): what the
    long-text anchor holds near the base, so long inputs keep their embedding when short ones are tuned."""
    mean = max(1.0, sum(lengths) / max(1, len(lengths)))
    n = max(1, round(sum(LONG_TOKENS) / 2 / mean))
    return joined(list(texts), n, seed + 5)


def contrastive_name(config: MirrorConfig) -> str:
    """The contrastive loss a step reports, as the run's page names it: a pairs run's pair_loss "one-way" is
    MultipleNegativesRankingLoss's form (mirror.loss.one_way), everything else InfoNCE over the 2B views."""
    return "one-way InfoNCE, as MNRL" if config.pairs and config.pair_loss == "one-way" else "InfoNCE"


def added_terms(config: MirrorConfig) -> list[str]:
    """What `terms_for` adds to the contrastive loss a step reports, as the run's page names them (a mask, guided
    negatives, adds nothing): the raw loss of a run with any is not InfoNCE alone."""
    distill = "distillation of both columns to the base" if config.distills_own else "distillation to the base"
    named = ((distill, config.distill), ("L2 to the base", config.l2_base))
    named += (("long-text anchor", config.long_anchor), ("general anchor", config.general_anchor))
    return [f"{name} λ {weight:g}" for name, weight in named if weight > 0]


def terms_for(
    config: MirrorConfig,
    model: Any,
    base: FrozenBase | None,
    texts: Sequence[str],
    lengths: Sequence[int],
    tokenize: Callable[[list[str], int], Batch],
    token_limit: int,
) -> list[Term]:
    """The run's terms, in the order the step asks them (the long-text anchor last: its tuned forward pass draws
    dropout after the step's own)."""
    if base is None:
        return []
    terms: list[Term] = []
    if config.distill > 0:
        terms.append(Distill(base, config.distill, own=config.distills_own))
    if config.l2_base > 0:
        pairs = [(p, a) for p, a in zip(model.parameters(), base.model.parameters(), strict=True) if p.requires_grad]
        terms.append(L2ToBase(pairs, config.l2_base))
    if config.guide_margin > 0:
        terms.append(GuidedNegatives(base, config.guide_margin))
    if config.long_anchor > 0:
        limit = min(LONG_TOKENS[1], token_limit)
        longs = long_texts(texts, lengths, config.seed)
        terms.append(LongAnchor(base, config.long_anchor, longs, lambda picked: tokenize(picked, limit)))
    if config.general_anchor > 0:
        limit = min(GENERAL_TOKENS, token_limit)
        general = general_texts(config.mode, config.seed)
        terms.append(GeneralAnchor(base, config.general_anchor, general, lambda picked: tokenize(picked, limit)))
    return terms
