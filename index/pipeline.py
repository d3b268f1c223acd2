"""Tune, then index the strings with both encoders: the job behind the app's Launch, callable from Python.

    from index.pipeline import tune_and_index
    tune_and_index(texts, MirrorConfig.preset("words"), Path("runs/r1"))   # model/, base_index/, tuned_index/

`python -m mirror train FILE --out DIR --index` runs it from the command line.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from mirror.config import MirrorConfig
from mirror.pairs import HeldOut, clean_pairs


@dataclass(frozen=True)
class Phase:
    """A labelled stage of a job ("Loading the base model"); `done` of `total` strings when it has a bar."""

    text: str
    done: int = 0
    total: int = 0
    kind: ClassVar[str] = "phase"


@dataclass(frozen=True)
class Step:
    """One optimiser step: its loss and the time left, measured on the steps so far (None at the first)."""

    step: int
    total: int
    loss: float
    eta: float | None = None
    batch: int = 0  # the step's strings (0: not known); its loss starts at mirror.loss.chance_loss(batch)
    after: float | None = None  # of `eta`, the seconds of what follows the training (save, tuned index, checks...)
    kind: ClassVar[str] = "step"


@dataclass(frozen=True)
class Finished:
    """The job's end: model/ and the indexes are in its folder; `stats` says how the training went."""

    stats: dict[str, Any]
    kind: ClassVar[str] = "finished"


@dataclass(frozen=True)
class Stopped:
    """The job stopped before its end (cancelled, over the time cap, or its consumer went away); nothing saved."""

    stats: dict[str, Any]
    kind: ClassVar[str] = "stopped"


Event = Phase | Step | Finished | Stopped  # the job's events (the app adds its own: explorer.events)


def tune_and_index(
    texts: Sequence[str],
    config: MirrorConfig,
    run: Path,
    *,
    roots: Sequence[Path] | None = None,
    build_base: bool = True,
    emit: Callable[[Event], None] = lambda ev: None,
    should_stop: Callable[[], bool] = lambda: False,
    memory: int | None = None,
    cache_dir: str | Path | None = None,
    pairs: Sequence[str | None] | None = None,
    columns: tuple[str, str] = ("string", "partner"),
) -> None:
    """Mirror-tune `config.model` on `texts` and write run/model, run/base_index (unless build_base is False)
    and run/tuned_index. Reports through `emit`; ends with Finished(stats) or, when `should_stop()` turned
    true, Stopped(stats) with nothing saved. `roots`: where a local model may be loaded from (None: anywhere);
    `cache_dir`: where a hub model is (or is downloaded to; None: Hugging Face's cache). `pairs`: each string's
    partner text (mirror.pairs): `config.pair_holdout` of the rows with one never trains, and Finished's stats["pairs"]
    says how much better the tuned encoder finds their strings from their partners than the base (`columns`: the
    names of the two sides, for the sentence that says so)."""
    from mirror.encoder import load_encoder
    from mirror.train import add_stats, mirror_tune, save_result

    texts = list(texts)
    held, pair_stats, train_texts, train_partners = None, None, texts, None
    if pairs is not None:
        texts, partners, _, pair_stats = clean_pairs(texts, pairs)
        held = HeldOut.of(texts, partners, config.pair_holdout, config.seed, columns)
        train_texts, train_partners = held.training()
    memory = run_memory(config, memory)
    emit(Phase("Loading the base model"))
    encoder = load_encoder(
        config.model,
        pooling=config.pooling,
        device=config.device,
        dropout=config.dropout,
        allowed_roots=roots,
        cache_dir=cache_dir,
    )
    if build_base:
        index_with(encoder, texts, run / "base_index", "Indexing your strings with the base encoder", emit)
    base_ranks = None
    if held is not None and held.rows:  # before training: the encoder is tuned in place
        emit(Phase(f"Measuring the base on {len(held.rows):,} held-out rows"))
        base_ranks = held.ranks(encoder, _vectors(run / "base_index", encoder))
    if should_stop():
        emit(Stopped({"steps": 0, "total_steps": 0}))
        return
    # Before step 1: mirror_tune tokenizes every string and plans the batches, and the first step pays for the
    # optimiser's states and the kernels of new shapes (measured: a few seconds on a CPU, more under load).
    emit(Phase(f"Starting the training: tokenizing {len(texts):,} strings, planning batches, first step (warm-up)"))
    result = mirror_tune(
        train_texts,
        config,
        on_step=lambda s, t, loss, batch: emit(Step(s, t, loss, batch=batch)),
        should_stop=should_stop,
        encoder=encoder,
        memory_budget=memory,
        pairs=train_partners,
    )
    stats = {**result.stats(), "summary": result.summary(), "pooling": result.config.pooling}
    stats.update(mode=result.config.mode, losses=list(result.losses), batch_sizes=list(result.batch_sizes))
    # what the page says a run did: the epochs it ran (a small upload trains more: min_steps), its own blend
    stats.update(epochs=result.config.epochs, min_steps=result.config.min_steps, run_alpha=result.config.blend_alpha)
    if result.cancelled:
        emit(Stopped(stats))
        return
    emit(Phase("Saving the tuned model"))
    save_result(result, run / "model")
    started = time.perf_counter()
    index_with(result.encoder, texts, run / "tuned_index", "Indexing your strings with the tuned encoder", emit)
    stats["tuned_index_seconds"] = round(time.perf_counter() - started, 1)  # what a blend of it re-encodes, timed
    if pair_stats is not None:
        stats["pairs"] = {**dataclasses.asdict(pair_stats), "columns": list(columns), "held_out": len(held.rows)}
        # a few held-out rows (partner, string): what the Search tab offers to try, never trained on
        stats["pairs"]["examples"] = [[held.partners[i], held.texts[i]] for i in held.rows[:5]]
        if base_ranks is not None:
            emit(Phase(f"Measuring the tuned model on the {len(held.rows):,} held-out rows"))
            tuned_ranks = held.ranks(result.encoder, _vectors(run / "tuned_index", result.encoder))
            stats["pairs"]["gain"] = held.gain(base_ranks, tuned_ranks).to_dict()
        add_stats(run / "model", pairs=stats["pairs"])  # the model folder says what it trained on, and gained
    emit(Finished(stats))


def _vectors(folder: Path, encoder) -> Any:
    """Every row of the index in `folder` as unit vectors (None when it keeps no exact copy: the ranks then encode)."""
    from index.store import VectorIndex

    index = VectorIndex.load(folder, encoder, gpu=False)
    return index.stored(range(len(index)))


def index_with(encoder, texts: list[str], folder: Path, label: str, emit: Callable[[Event], None]) -> None:
    """Build and save the index of `texts` with `encoder`, reporting progress as Phase events."""
    from index.store import VectorIndex

    emit(Phase(label, 0, len(texts)))
    VectorIndex.build(encoder, texts, gpu=False, on_progress=lambda d, t: emit(Phase(label, d, t))).save(folder)


def run_memory(config: MirrorConfig, memory: int | None) -> int | None:
    """The memory a run plans its steps with: an operator's cap (`memory`), never more than the machine has free
    now (mirror_tune's own default); None: that default. The estimate prices the same plan with it."""
    from mirror.encoder import resolve_device
    from mirror.memory import available_bytes

    return min(memory, available_bytes(resolve_device(config.device))) if memory else memory
