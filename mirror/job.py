"""The job behind the app's Launch: tune, then index the strings with both encoders; its events, its memory budget.

    from index.store import FolderIndexes
    from mirror.job import tune_and_index
    tune_and_index(texts, MirrorConfig.preset("words"), Path("runs/r1"), indexes=FolderIndexes())
    # model/, base_index/, tuned_index/

The job reports through `emit` and stops when `should_stop()` says so; it builds and reads its indexes through the
`Indexes` it is handed (index.store.FolderIndexes: FAISS folders), so the engine knows nothing of FAISS and index/
holds search only. `python -m mirror train FILE --out DIR --index` runs it from the command line.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from mirror.choose import retry_note
from mirror.config import MirrorConfig
from mirror.pairs import HeldOut, clean_pairs


@dataclass(frozen=True)
class Phase:
    """A labelled stage of a job ("Loading the base model"); `done` of `total` strings when it has a bar. `said`: a
    turn the user should not miss though its line passes in a blink (a second training stopped): also a note."""

    text: str
    done: int = 0
    total: int = 0
    said: bool = False
    kind: ClassVar[str] = "phase"


@dataclass(frozen=True)
class Step:
    """One optimiser step: its loss; the app fills in the time left (explorer.tune.eta: None where not known)."""

    step: int
    total: int
    loss: float
    eta: float | None = None
    batch: int = 0  # the step's strings (0: not known); its loss starts at mirror.loss.chance_loss(batch)
    after: float | None = None  # of `eta`, the seconds of what follows the training (save, tuned index, checks...)
    training: int = 1  # 2: a pairs run's second training (`_train_again`), its steps counted from 1 again
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


# a run chooses its blend (mirror.choose) on half its held-out rows when both halves have at least this many
CHOICE_ROWS_LEAST = 20
# a second training with the general anchor and its blend choice, against the first's (its sixteen general texts a
# step through the tuned model and the base: ~1.2x on the bundled model, CPU): what a time cap must leave for it
RETRY_COST = 1.3


@dataclass(frozen=True)
class Replanned:
    """The run trains within less memory than its plan was made with (`planned` bytes): the machine has less than
    that free now, so it plans its steps within `budget` (batches of long strings split more: its Steps' total says
    how many steps it takes now)."""

    planned: int
    budget: int
    kind: ClassVar[str] = "replanned"


Event = Phase | Step | Finished | Stopped | Replanned  # the job's events (the app adds its own: explorer.events)


class Indexes(Protocol):
    """Where the job's indexes are built and read: a folder per index (index.store.FolderIndexes)."""

    def build(self, encoder: Any, texts: list[str], folder: Path, on_progress: Callable[[int, int], None]) -> None:
        """Encode `texts` with `encoder` and save their index in `folder`, calling on_progress(done, total)."""

    def vectors(self, folder: Path, encoder: Any) -> Any:
        """Every row of the index in `folder` as unit vectors (None when it keeps no exact copy)."""


def tune_and_index(
    texts: Sequence[str],
    config: MirrorConfig,
    run: Path,
    *,
    indexes: Indexes,
    roots: Sequence[Path] | None = None,
    build_base: bool = True,
    emit: Callable[[Event], None] = lambda ev: None,
    should_stop: Callable[[], bool] = lambda: False,
    memory: int | None = None,
    cache_dir: str | Path | None = None,
    pairs: Sequence[str | None] | None = None,
    columns: tuple[str, str] = ("string", "partner"),
    planned_memory: int | None = None,
    room: Callable[[float], str | None] | None = None,
    first: Callable[[], bool] | None = None,
) -> None:
    """Mirror-tune `config.model` on `texts` and write run/model, run/base_index (unless build_base is False)
    and run/tuned_index (built and read through `indexes`). Reports through `emit`; ends with Finished(stats) or, when `should_stop()` turned
    true, Stopped(stats) with nothing saved. `roots`: where a local model may be loaded from (None: anywhere);
    `cache_dir`: where a hub model is (or is downloaded to; None: Hugging Face's cache). `pairs`: each string's
    partner text (mirror.pairs): `config.pair_holdout` of the rows with one never trains, and Finished's stats["pairs"]
    says how much better the tuned encoder finds their strings from their partners than the base (`columns`: the
    names of the two sides, for the sentence that says so). `planned_memory`: the budget the run's plan was made with
    (the app's Launch: `memory` is then not read), kept unless the machine has less than that free when the training
    starts (`kept_memory`; then Replanned says so). `room(seconds)`: None when the run may go on that many seconds
    more, else why not (a server's caps: its time for a run, its visitor's CPU); a pairs run's second training
    (`retry_anchor`) it has no room for is not started, one going slower than that is stopped by the job itself
    (`Outlasting`) and the first training served, and its record says why. `first()`: true once the user asked for
    the first training's blend while a second one trains (the page's *Serve the first training*): that training
    stops at its next step, and the first is served as where it stops itself."""
    from mirror.encoder import load_encoder
    from mirror.train import add_stats, mirror_tune, save_result

    texts = list(texts)
    held, pair_stats, train_texts, train_partners = None, None, texts, None
    if pairs is not None:
        texts, partners, _, pair_stats = clean_pairs(texts, pairs)
        held = HeldOut.of(texts, partners, config.pair_holdout, config.seed, columns)
        train_texts, train_partners = held.training()
    memory = run_memory(config, memory) if planned_memory is None else planned_memory
    emit(Phase("Loading the base model"))
    encoder = load_encoder(
        config.model,
        pooling=config.pooling,
        device=config.device,
        dropout=config.dropout,
        allowed_roots=roots,
        cache_dir=cache_dir,
    )
    index_s = 0.0  # what indexing the strings took: the tuned index after a second training takes about as long
    if build_base:
        started = time.perf_counter()
        index_with(indexes, encoder, texts, run / "base_index", "Indexing your strings with the base encoder", emit)
        index_s = time.perf_counter() - started
    base_ranks = None
    if held is not None and held.rows:  # before training: the encoder is tuned in place
        emit(Phase(f"Measuring the base on {len(held.rows):,} held-out rows"))
        base_ranks = held.ranks(encoder, indexes.vectors(run / "base_index", encoder))
    if should_stop():
        emit(Stopped({"steps": 0, "total_steps": 0}))
        return
    if planned_memory is not None:  # the plan's budget, read now: the model is loaded, the base indexed
        memory = kept_memory(config, planned_memory)
        if memory < planned_memory:
            emit(Replanned(planned_memory, memory))
    # Before step 1: mirror_tune tokenizes every string and plans the batches, and the first step pays for the
    # optimiser's states and the kernels of new shapes (measured: a few seconds on a CPU, more under load).
    # a pairs run that chooses its blend trains unblended and keeps a copy of the base to blend with (mirror.choose)
    choose = config.blend_choose and held is not None and len(held.rows) >= 2 * CHOICE_ROWS_LEAST
    base_copy = copy.deepcopy(encoder) if choose else None
    emit(Phase(f"Starting the training: tokenizing {len(texts):,} strings, planning batches, first step (warm-up)"))
    began = time.perf_counter()
    result = mirror_tune(
        train_texts,
        dataclasses.replace(config, blend_alpha=1.0) if choose else config,
        on_step=lambda s, t, loss, batch: emit(Step(s, t, loss, batch=batch)),
        should_stop=should_stop,
        encoder=encoder,
        memory_budget=memory,
        pairs=train_partners,
    )
    stats = _stats_of(result)
    if result.cancelled:
        emit(Stopped(stats))
        return
    report_rows = held.rows if held is not None else []
    if base_copy is not None:
        chose_at = time.perf_counter()
        report_rows, choice = _choose_blend(base_copy, result, held, run / "tuned_model", emit, should_stop,
                                            config.blend_alpha)  # fmt: skip
        retry, again = None, False
        if choice is not None and config.retry_anchor > 0 and choice.bound:
            # the second training and its choice as long as the first's (the anchor adds a little), then the index
            needed = RETRY_COST * (time.perf_counter() - began) + index_s
            why = room(needed) if room is not None else None
            if why:
                retry = {"anchor": config.retry_anchor, "skipped": round(needed), "why": why}
                result.notes.append(retry_note(retry))
            else:
                again = True
                # what follows its steps: a blend choice as long as the first's, then the tuned index
                outlasting = Outlasting(room, time.perf_counter() - chose_at + index_s, first)
                result, choice, retry = _train_again(base_copy, result, choice, held, config, run, emit, should_stop,
                                                     memory, outlasting)  # fmt: skip
        del base_copy
        if choice is None:  # stopped: how far the training it stopped in got (a second one says so)
            emit(Stopped({**_stats_of(result), "second_training": True} if again else stats))
            return
        stats = _stats_of(result)  # the training served
        stats.update(run_alpha=choice.alpha, blend_choice={**choice.to_dict(), **({"retry": retry} if retry else {})})
    emit(Phase("Saving the tuned model"))
    save_result(result, run / "model")
    started = time.perf_counter()
    index_with(
        indexes, result.encoder, texts, run / "tuned_index", "Indexing your strings with the tuned encoder", emit
    )
    stats["tuned_index_seconds"] = round(time.perf_counter() - started, 1)  # what a blend of it re-encodes, timed
    if pair_stats is not None:
        stats["pairs"] = {**dataclasses.asdict(pair_stats), "columns": list(columns), "held_out": len(held.rows)}
        # a few held-out rows (partner, string): what the Search tab offers to try, never trained on
        stats["pairs"]["examples"] = [[held.partners[i], held.texts[i]] for i in held.rows[:5]]
        if base_ranks is not None:
            emit(Phase(f"Measuring the tuned model on the {len(held.rows):,} held-out rows"))
            tuned_ranks = held.ranks(result.encoder, indexes.vectors(run / "tuned_index", result.encoder))
            # the gain on the rows that did not choose the blend (all of them when the run did not choose)
            keep = np.isin(held.rows, report_rows)
            stats["pairs"]["gain"] = held.gain(base_ranks[keep], tuned_ranks[keep]).to_dict()
            stats["pairs"]["reported_rows"] = int(keep.sum())
        add_stats(run / "model", pairs=stats["pairs"])  # the model folder says what it trained on, and gained
    emit(Finished(stats))


def _stats_of(result: Any) -> dict[str, Any]:
    """What a run's record keeps of its training (`result`, a MirrorResult)."""
    stats = {**result.stats(), "summary": result.summary(), "pooling": result.config.pooling}
    stats.update(mode=result.config.mode, losses=list(result.losses), batch_sizes=list(result.batch_sizes))
    # what the page says a run did: the epochs it ran (a small upload trains more: min_steps), its own blend
    stats.update(epochs=result.config.epochs, min_steps=result.config.min_steps, run_alpha=result.config.blend_alpha)
    return stats


def _choose_blend(base, result, held, folder: Path, emit, should_stop, fallback_alpha: float,
                  which: str = "") -> tuple[list[int], Any]:  # fmt: skip
    """Split the held-out rows (every other one chooses, the rest report), save the unblended weights in `folder`
    (run/tuned_model: what a later blend of this run blends), and leave `result` at the chosen α (mirror.choose):
    (the reporting rows, the Choice), or (rows, None) when a stop was asked meanwhile. `which`: the training's name
    in the phases ("" for the first)."""
    from mirror.choose import ALPHAS, choose_blend
    from mirror.train import save_result

    choosing, reporting = held.rows[0::2], held.rows[1::2]
    emit(Phase(f"Saving the unblended tuned model{which}"))
    trained_as = result.config  # blend_alpha 1: the weights as trained
    result.config = dataclasses.replace(trained_as, blend_alpha=fallback_alpha)  # its config: the settings launched
    save_result(result, folder)
    if should_stop():
        return reporting, None
    label = f"Choosing the blend{which}: {len(choosing):,} held-out rows and the general checks at α " + ", ".join(
        f"{a:g}" for a in ALPHAS
    )
    emit(Phase(label))

    class Asked(Exception):  # a stop asked while it measures: it ends there, nothing saved as served
        pass

    def measuring(what: str) -> None:
        if should_stop():
            raise Asked
        emit(Phase(f"{label}: {what}"))

    try:
        choice = choose_blend(base, result.encoder, held.texts, held.partners, choosing, seed=result.config.seed,
                              on_alpha=measuring)  # fmt: skip
    except Asked:
        return reporting, None
    result.config = dataclasses.replace(result.config, blend_alpha=choice.alpha)
    result.notes.append(choice.reason)
    return reporting, choice


class Outlasting:
    """Asked between a second training's steps: whether, going on at the pace of its steps so far, it and what
    follows them (`after` seconds: its blend choice and the tuned index) would outlast the run's `room` (its server's
    time for a run, its visitor's hour of CPU: explorer.runs.execute.Runner.room). Then the job stops that training
    itself and serves the first (`why` says why), where the server's stop would serve nothing: the room asked before
    it started priced it at the first's pace, which others' work on the same cores can halve (a run yields its steps
    to every visitor's maps and evaluations; a server training two runs at once shares its cores). `first()` true:
    the user asked for the first training's blend (`asked`), honoured at once."""

    # steps before it judges: the first pays for the optimiser's states and new kernels, and one step of long strings
    # takes several of short ones (a 953-row run's steps took 2 to 16 s), so a tenth of the steps at least
    SETTLED = 3

    def __init__(
        self,
        room: Callable[[float], str | None] | None,
        after: float,
        first: Callable[[], bool] | None = None,
    ):
        self.room, self.after, self.first = room, after, first
        self.step = self.total = 0
        self.first_at: float | None = None
        self.why: str | None = None
        self.asked = False

    def stepped(self, step: int, total: int) -> None:
        if step == 1:
            self.first_at = time.perf_counter()
        self.step, self.total = step, total

    def wanted(self) -> bool:
        """The user asked for the first training's blend (read once more after the last step: asked during it)."""
        if self.first is not None and not self.asked and self.first():
            self.asked, self.why = True, "you asked for the first training's blend"
        return self.asked

    def __call__(self) -> bool:
        if self.wanted():
            return True
        if self.room is None or self.first_at is None or self.step < max(self.SETTLED, self.total // 10):
            return False
        per_step = (time.perf_counter() - self.first_at) / (self.step - 1)
        self.why = self.room(per_step * (self.total - self.step) + self.after)
        return self.why is not None


def _train_again(base, first, choice, held, config: MirrorConfig, run: Path, emit, should_stop, memory,
                 outlasting: Outlasting) -> tuple[Any, Any, Any]:  # fmt: skip
    """The general checks held `first`'s blend (`choice`) below its best α: train once more from the base with
    general text held near it (`retry_anchor` as the general anchor), choose that training's blend on the same rows,
    and serve the better (mirror.choose.better_of). Returns (the result served, its Choice, what the retry found for
    the record), or (the second, None, None) when a stop was asked meanwhile. `config`: the run's as launched. The first's
    weights wait on the CPU, its encoder trains again (no third model in memory); run/tuned_model ends up the served
    training's."""
    import shutil

    import torch

    from mirror.choose import better_of
    from mirror.train import mirror_tune

    anchored = dataclasses.replace(config, blend_alpha=1.0, general_anchor=config.retry_anchor)
    encoder = first.encoder
    kept = {k: v.detach().to("cpu", copy=True) for k, v in encoder.model.state_dict().items()}  # at its α

    def restore(state: dict[str, Any]) -> None:
        with encoder.changing_weights(), torch.no_grad():
            encoder.model.load_state_dict(state)

    restore(base.model.state_dict())
    emit(Phase(f"Training again with general text held near the base (general anchor λ {config.retry_anchor:g}): "
               f"the general checks held the blend at α {choice.alpha:g}, below the α its held-out rows gain most at"))  # fmt: skip
    texts, partners = held.training()

    def stepped(s: int, t: int, loss: float, b: int) -> None:
        outlasting.stepped(s, t)
        emit(Step(s, t, loss, batch=b, training=2))

    second = mirror_tune(texts, anchored, on_step=stepped, should_stop=lambda: should_stop() or outlasting(),
                         encoder=encoder, memory_budget=memory, pairs=partners)  # fmt: skip
    # it stopped itself, or the user asked for the first (also during its last step): the first is served
    if not should_stop() and ((second.cancelled and outlasting.why) or outlasting.wanted()):
        restore(kept)
        retry = {"anchor": config.retry_anchor, "stopped": [outlasting.step, outlasting.total], "why": outlasting.why}
        retry.update({"asked": True} if outlasting.asked else {})
        how = ", as you asked" if outlasting.asked else f": going on, it {outlasting.why}"
        emit(Phase(f"Second training stopped after {outlasting.step} of {outlasting.total} steps{how}; serving the "
                   "first training's blend", said=True))  # fmt: skip
        first.notes.append(retry_note(retry))
        return first, choice, retry
    folder = run / "tuned_model.anchored"
    again = None
    if not second.cancelled:
        again = _choose_blend(base, second, held, folder, emit, should_stop, config.blend_alpha,
                              " of the second training")[1]  # fmt: skip
    if again is None:
        shutil.rmtree(folder, ignore_errors=True)
        return second, None, None
    # asked for the first after its last step's report went out (the page offered it till the next phase): honoured
    asked = not should_stop() and outlasting.wanted()
    served = better_of(choice, again) and not asked
    retry = {
        "anchor": config.retry_anchor,
        "served": "second" if served else "first",
        **({"asked": True} if asked else {}),
        "first": {"alpha": choice.alpha, "gain": round(choice.gain, 2), "kept": choice.kept},
        "second": {"alpha": again.alpha, "gain": round(again.gain, 2), "kept": again.kept},
        "seconds": [round(first.seconds, 1), round(second.seconds, 1)],  # each training's (the plan prices the first)
    }
    if served:
        shutil.rmtree(run / "tuned_model")
        folder.rename(run / "tuned_model")
        second.notes.append(retry_note(retry))
        return second, again, retry
    shutil.rmtree(folder)
    restore(kept)
    first.notes.append(retry_note(retry))
    return first, choice, retry


def index_with(
    indexes: Indexes, encoder: Any, texts: list[str], folder: Path, label: str, emit: Callable[[Event], None]
) -> None:
    """Build and save the index of `texts` with `encoder` in `folder`, reporting progress as Phase events."""
    emit(Phase(label, 0, len(texts)))
    indexes.build(encoder, texts, folder, lambda d, t: emit(Phase(label, d, t)))


def run_memory(config: MirrorConfig, memory: int | None) -> int | None:
    """The memory a run plans its steps with: an operator's cap (`memory`), never more than the machine gives a run
    now (memory.available_bytes, mirror_tune's own default); None: that default, read when the run plans."""
    from mirror.encoder import resolve_device
    from mirror.memory import available_bytes

    return min(memory, available_bytes(resolve_device(config.device))) if memory else memory


def plan_memory(config: MirrorConfig, memory: int | None) -> int:
    """The budget a server's run is planned with (`run_memory` under the operator's cap `memory`), as a number: the
    plan shown prices it, and the run keeps it (`kept_memory`)."""
    from mirror.encoder import resolve_device
    from mirror.memory import available_bytes

    return run_memory(config, memory) or available_bytes(resolve_device(config.device))


def kept_memory(config: MirrorConfig, planned: int) -> int:
    """The budget of a run whose plan was made within `planned` bytes: those, while the machine has at least that
    much free (a run plans within a share of what is free, memory.available_bytes, and that share moves as models load
    and indexes are built: the plan must not); else, the machine truly having less, what it gives a run now."""
    from mirror.encoder import resolve_device
    from mirror.memory import CPU_FRACTION, GPU_FRACTION, available_bytes

    device = resolve_device(config.device)
    now = available_bytes(device)
    free = now / (GPU_FRACTION if device.type == "cuda" else CPU_FRACTION)
    return planned if planned <= free else min(planned, now)
