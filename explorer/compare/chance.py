"""Where a pairs run's loss curve has its "knows nothing" line.

The curve divides each step's loss by log(2B-1) (mirror.loss.chance_loss): a mirror run's contrastive loss of a
model that knows nothing (every view as like its string as the 2B-1 others) reads 1, and a mirror run starts below
it. A pairs run's loss is the same InfoNCE plus, on a sentence-encoder base, the distillation term of its preset
(mirror.terms.Distill, λ 10: mirror.config.PAIRS_ENCODER_ADJUSTMENTS). The preset distils each view toward the
frozen base's embedding of its own text (pair_distill_own), which a model at the base already meets. Without
pair_distill_own both views go toward the base's embedding of the *string*; the second view is the partner, so that
term pays for every partner not where its string is: before any training the bundled model's first step read 1.54
on FOLDOC rows (B 200), above the mirror line all run, as issue 60 saw (1.56 -> 1.17).

A model that knows nothing of the pairs sees the two columns as the base does but not which partner is whose: the
base with every string given another row's partner. Its contrastive term (`shuffled_loss`, ÷ log(2B-1)) is 1 when
a string is as like the other strings as a partner, more when the base keeps the columns apart (a random tiny model:
1.3); its distillation term is λ/2 x (1 - c0) for each row with a partner (the string's own view starts at the
base's: 0), c0 being the base's mean cosine between a string and another row's partner. Both are measured on a
seeded sample of the run's rows, the line divided like the loss:

    chance(B) = p · shuffled + (1 - p) + (λ / 2) · p · (1 - c0) / log(2B - 1)

with p the share of the step's strings that have a partner (a row without one trains its mirror views: line 1). A
base that knows nothing of the pairs starts on it (the tiny random BERT: first step 1.47, line 1.48); one that
already knows them starts below it (400 FOLDOC rows, bundled model, B 200: line 2.5, first step 1.54: the base
finds a term's definition at cos 0.43 against 0.10 for another's). Without distillation (λ 0: a plain-MLM base's
pairs preset) the line is the shuffled contrastive term alone, and so it is with each partner distilled toward the
base's embedding of itself (pair_distill_own, the preset's): the base, which knows nothing of the pairs, owes that
term nothing. A run with MNRL's loss form (pair_loss "one-way": each partner against the batch's B strings) knows
nothing at log(B), so its lines are measured with that loss and a row without a partner reads log(B) / log(2B-1)
(still divided like the curve).
"""

from __future__ import annotations

import math
import random
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from mirror.config import PAIR_LOSSES
from mirror.loss import chance_loss

if TYPE_CHECKING:
    from explorer.resources.models import ModelCache
    from explorer.resources.record import RunInfo
    from explorer.resources.sessions import Session

SAMPLE = 128  # rows whose cosines stand for c0 (a seeded sample: the live and the kept curve draw one line)
KEPT = 16  # kept runs' lines held in memory (each costs an encode of its sample): by run folder
_kept: OrderedDict[Any, PairsChance | None] = OrderedDict()
_lock = threading.Lock()


@dataclass(frozen=True)
class PairsChance:
    """A pairs run's "knows nothing" line: its distillation weight λ, the share of its trained strings with a
    partner, the base's mean cosine between two of its strings (c0), and its batch size (strings past it in a step
    are mixed-in general text, without a partner)."""

    distill: float
    paired: float
    unrelated: float
    batch_size: int
    shuffled: float = 1.0  # the contrastive term of the base with the partners shuffled, ÷ log(2B-1)
    one_way: bool = False  # the run's pair_loss is "one-way": its chance is log(B), not log(2B-1)

    def at(self, batch: int) -> float:
        """The line at a step of `batch` strings, divided as the curve divides the loss (module docstring)."""
        if batch <= 0:
            return 1.0
        share = self.paired * min(1.0, self.batch_size / batch)
        alone = math.log(max(2, batch)) / chance_loss(batch) if self.one_way else 1.0  # a row without a partner
        contrastive = share * self.shuffled + (1 - share) * alone
        return contrastive + self.distill / 2 * share * max(0.0, 1.0 - self.unrelated) / chance_loss(batch)


def sample_ids(n: int, most: int = SAMPLE) -> list[int]:
    """The rows whose cosines stand for c0: a seeded sample of at most `most` of `n`, sorted."""
    return sorted(random.Random(0).sample(range(n), min(n, most)))


def cross_cosine(strings: Any, partners: Any) -> float:
    """The mean cosine between a string and another row's partner (unit rows, row for row):
    (Σs · Σp - Σ s_i · p_i) / (n(n - 1))."""
    s, p = np.asarray(strings, dtype=np.float64), np.asarray(partners, dtype=np.float64)
    n = len(s)
    if n < 2:
        return 0.0
    return float((s.sum(axis=0) @ p.sum(axis=0) - (s * p).sum()) / (n * (n - 1)))


def shuffled_loss(strings: Any, partners: Any, temperature: float, batch_size: int, pair_loss: str = "views") -> float:
    """The contrastive term (mirror.loss.nt_xent) of unit `strings` each with another row's partner (the rows
    rotated by one), in batches of at most `batch_size`, ÷ log(2B-1): what the base scores when it knows nothing of
    which partner is whose, its sides as it sees them (strings nearer each other than a partner: above 1)."""
    import torch

    from mirror.loss import PAIR_LOSS

    loss = PAIR_LOSS[pair_loss]

    s, p = torch.as_tensor(np.asarray(strings), dtype=torch.float32), torch.as_tensor(np.asarray(partners))
    p = torch.roll(p.float(), 1, dims=0)
    n, b = len(s), max(2, min(batch_size, len(s)))
    parts = [(i, min(n, i + b)) for i in range(0, n - 1, b) if min(n, i + b) - i >= 2]
    with torch.no_grad():
        losses = [float(loss(s[i:j], p[i:j], temperature)) / chance_loss(j - i) for i, j in parts]
    return sum(losses) / len(losses) if losses else 1.0


def measure(encoder: Any, texts: Sequence[str], partners: Sequence[str | None], config: Any) -> tuple[float, float]:
    """(c0, shuffled): the base `encoder`'s mean cosine between a string and another row's partner, and its
    contrastive term with the partners shuffled (`shuffled_loss`), on a seeded sample of the rows with a partner."""
    rows = [i for i, p in enumerate(partners) if p is not None]
    picked = [rows[j] for j in sample_ids(len(rows))]
    strings = encoder.encode([texts[i] for i in picked], normalize=True)
    others = encoder.encode([str(partners[i]) for i in picked], normalize=True)
    shuffled = shuffled_loss(strings, others, config.temperature, config.batch_size, config.pair_loss)
    return cross_cosine(strings, others), shuffled


def paired_share(partners: Sequence[str | None], held: int) -> float:
    """The share of a run's trained strings with a partner: its `partners` (row for row, None for none) less the
    `held` rows held out (each has one)."""
    trained = len(partners) - held
    return max(0.0, (sum(p is not None for p in partners) - held) / trained) if trained > 0 else 0.0


def of_run(run: RunInfo | None, models: ModelCache, kept: Any = None) -> PairsChance | None:
    """A kept pairs run's line: λ and its batch size from the config its model folder records (a blend: the tuned
    model it blends), the share from its record, c0 from its base model on its rows (`kept`: its partners,
    explorer.compare.search.Partners, as explorer.compare.searching.Searcher.partners reads them). None for a mirror
    run, or a run that does not say (its line is then the mirror one). Measured once per run (KEPT held)."""
    pairs = run.record.training.pairs if run is not None else None
    if run is None or pairs is None:
        return None
    with _lock:
        if run.folder in _kept:
            _kept.move_to_end(run.folder)
            return _kept[run.folder]
    line = _measured(run, models, kept)
    with _lock:
        _kept[run.folder] = line
        while len(_kept) > KEPT:
            _kept.popitem(last=False)
    return line


def _measured(run: RunInfo, models: ModelCache, kept: Any) -> PairsChance | None:
    from explorer.resources.store import tuned_weights
    from mirror.card import read_mirror_config

    pairs = run.record.training.pairs
    assert pairs is not None
    config = read_mirror_config(tuned_weights(run.folder)).get("config") or {}
    distill, batch_size, tau = config.get("distill"), config.get("batch_size"), config.get("temperature")
    strings = run.record.training.strings
    if not isinstance(distill, int | float) or not isinstance(batch_size, int) or not strings:
        return None
    if not isinstance(tau, int | float) or tau <= 0:
        return None
    share = max(0.0, min(1.0, (pairs.stats.paired - pairs.held_out) / strings))
    texts = list(models.loaded(run).main.tuned.texts)
    if kept is None or len(kept.rows) != len(texts):
        return None
    encoder = models.base_encoder(run.base_model, run.pooling)
    pair_loss = config.get("pair_loss") if config.get("pair_loss") in PAIR_LOSSES else "views"
    settings = SimpleNamespace(temperature=float(tau), batch_size=batch_size, pair_loss=pair_loss)
    c0, shuffled = measure(encoder, texts, kept.rows, settings)
    distill = 0.0 if config.get("pair_distill_own") else float(distill)
    return PairsChance(distill, share, c0, batch_size, shuffled, pair_loss == "one-way")


def live(session: Session, models: ModelCache) -> Callable[[], PairsChance | None]:
    """The line of the pairs run `session` is launching, measured when first asked (its curve's second step): λ and
    the batch size of the config its Launch runs (the session's held settings), the share from its partners, c0
    from the base encoding a sample of its rows. A callable returning None for a mirror run or unknown settings."""
    texts, partners, tuning = list(session.texts), session.partners, session.tuning

    def line() -> PairsChance | None:
        from explorer.tune.inputs import build_config
        from mirror.pairs import held_out_rows

        if partners is None or tuning is None or len(partners) != len(texts) or len(texts) < 2:
            return None
        config, _ = build_config(
            texts, tuning.model, tuning.mode, dict(tuning.overrides), pairs=True, partners=partners
        )
        held = len(held_out_rows(partners, config))
        encoder = models.base_encoder(config.model, config.pooling)
        c0, shuffled = measure(encoder, texts, partners, config)
        share = paired_share(partners, held)
        distill = 0.0 if config.distills_own else config.distill
        return PairsChance(distill, share, c0, config.batch_size, shuffled, config.pair_loss == "one-way")

    return line
