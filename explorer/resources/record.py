"""A run's record, typed, and the one place that turns it into JSON and back.

`RunInfo` is one served run as the sessions, the model cache, the events and the Explore tab all see it: its files
and its `RunRecord` (what its training did, its general checks, its timing and where its model came from: trained
here, uploaded as a zip, or a blend of a parent run at α). run.json is `to_json(info)`; run.json's `stats`, the
/train summary's fields and the model card's input are `flat(record)`; every run.json a version of this app wrote,
old ones included, is read back by `from_json` (`record_of` for its stats).

Nothing else reads a run's record by string keys: a renamed field is an AttributeError where it is read (and a
TypeError where it is made), never a blank cell. A leaf module (it imports nothing of explorer/), so the sessions,
the model cache, the events and the renderers can all name RunInfo without importing each other.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from mirror.pairs import PairGain, PairStats

Kind = Literal["trained", "uploaded", "blend"]


@dataclass(frozen=True)
class Pairs:
    """A run on pairs (issue 50, mirror.pairs): what cleaning kept of the partners, the two columns, the rows held
    out of training, the first few of them (partner, string: what the Search tab offers to try, never trained on)
    and, when any were held out, the gain measured on them."""

    stats: PairStats
    columns: tuple[str, str] = ("string", "partner")
    held_out: int = 0
    gain: PairGain | None = None
    examples: tuple[tuple[str, str], ...] = ()


@dataclass
class Training:
    """What the training did: the engine's `MirrorResult.stats()` and what mirror.job adds. A blend's and an
    uploaded model's are those of the training their weights came from (the table their page shows)."""

    steps: int | None = None
    total_steps: int | None = None
    seconds: float | None = None  # the training's own (a run's wall time is its Timing's)
    device: str | None = None  # and its precision: "cpu (2 threads), bf16"
    first_loss: float | None = None
    final_loss: float | None = None
    cancelled: bool | None = None
    strings: int | None = None  # the strings it trained on (a pairs run's held-out rows are not among them)
    base_model: str | None = None
    mode: str | None = None  # the preset: "words", "sentences" ("?": an uploaded model that does not say)
    batch_sizes: list[int] | None = None  # each step's strings (the loss curve divides by log(2B-1))
    epochs: int | None = None
    min_steps: int | None = None
    run_alpha: float | None = None  # the run's own blend with its base after training (MirrorConfig.blend_alpha)
    pairs: Pairs | None = None
    blend_choice: dict[str, Any] | None = None  # how a pairs run chose its α (mirror.choose.Choice.to_dict)
    # what its loss adds to InfoNCE (mirror.terms.added_terms: "distillation to the base λ 10"); None: not recorded
    loss_terms: list[str] | None = None
    loss_form: str | None = None  # its contrastive loss (mirror.terms.contrastive_name); None: InfoNCE (not recorded)


@dataclass
class Checks:
    """A run's general checks (explorer.compare.forgetting): one row per check (the engine's dict, drawn as a table
    row), the verdict, their seconds and the label-free self-check on the run's own long strings; or why they did
    not run (`skipped`); or that they could not run here (`failed`: logged, the run is served without them)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    verdict: str = ""
    seconds: float | None = None
    own_long_texts: dict[str, Any] | None = None
    skipped: str | None = None
    failed: bool = False

    @property
    def worse(self) -> bool:
        """Whether the tuned model is worse than its base on any check."""
        return any(r.get("worse") for r in self.rows)


@dataclass(frozen=True)
class Origin:
    """Where the served model came from: trained here; uploaded as a zip (`zip`: its name, as the user gave it); or
    a blend made here of the tuned weights of run `parent` at `alpha`. A zip of a blend is "uploaded" and keeps its
    α and parent; a blend of an uploaded run keeps the zip's name (its training is that zip's)."""

    kind: Kind = "trained"
    alpha: float | None = None
    parent: str | None = None  # the run id (or its first 8 digits, as a zip records it); "" when not known
    zip: str | None = None


@dataclass
class Timing:
    """Seconds a run took, each kind its own: a training from its folder to served (`served_seconds`) and with its
    checks and downloads (`wall_seconds`, between the clock times `started_at` and `finished_at`); an uploaded zip
    loaded and indexed (`load_seconds`); a blend made and indexed (`blend_seconds`); and, of every kind, its strings
    encoded with its tuned model (`tuned_index_seconds`: what a blend of it re-encodes, said before it is asked for)."""

    wall_seconds: float | None = None  # a training: from its folder to served with its checks and downloads
    started_at: float | None = None  # (time.time)
    finished_at: float | None = None
    served_seconds: float | None = None  # a training: from its folder to searchable
    load_seconds: float | None = None  # an uploaded zip
    blend_seconds: float | None = None  # a blend
    tuned_index_seconds: float | None = None  # its tuned index built (mirror.job times a training's)
    waited_seconds: float | None = None  # a training: from asked for to its slot (waiting behind other runs)


@dataclass
class RunRecord:
    """Everything a run's page, its card and its API summary say about it, besides its files."""

    training: Training = field(default_factory=Training)
    origin: Origin = field(default_factory=Origin)
    timing: Timing = field(default_factory=Timing)
    checks: Checks | None = None  # None: not run (MIRROR_GENERAL_CHECKS=0, an uploaded zip, not in yet)
    neighbours_changed: float | None = None  # the share of the strings' 10 nearest neighbours tuning changed
    notes: list[str] = field(default_factory=list)  # what the user should know (a cap, a fallback, a repair)


# ---------------------------------------------------------------------------------------------- to JSON and back

TRAINING = ("base_model", "strings", "steps", "total_steps", "seconds", "device", "cancelled", "first_loss")
TRAINING += ("final_loss",)
TRAINED_MORE = (
    "mode",
    "batch_sizes",
    "epochs",
    "min_steps",
    "run_alpha",
    "blend_choice",
    "loss_terms",
    "loss_form",
)  # after summary, pooling: mirror.job
TIMING = ("load_seconds", "blend_seconds", "served_seconds", "wall_seconds", "started_at", "finished_at")
TIMING += ("tuned_index_seconds", "waited_seconds")


def training_of(stats: Mapping[str, Any]) -> Training:
    """The Training of a flat stats dict: mirror.job's Finished(stats), a saved model's mirror_config.json
    `stats`, or run.json's."""
    fields = {k: stats.get(k) for k in (*TRAINING, *TRAINED_MORE)}
    terms = fields["loss_terms"]  # (an uploaded zip's mirror_config.json says anything: a list of names, or nothing)
    fields["loss_terms"] = [str(t) for t in terms] if isinstance(terms, list) else None
    form = fields["loss_form"]
    fields["loss_form"] = form[:80] if isinstance(form, str) and form.strip() else None
    return Training(**fields, pairs=pairs_of(stats.get("pairs")))


def pairs_of(data: Any) -> Pairs | None:
    """A run's pairs from their flat form ({paired, empty, same, shared, columns, held_out, gain, examples}), or
    None."""
    if not isinstance(data, Mapping) or not data:
        return None
    counts = PairStats(**{k: int(data.get(k) or 0) for k in ("paired", "empty", "same", "shared", "other")})
    columns = (list(data.get("columns") or []) + ["string", "partner"])[:2]
    gain = data.get("gain")
    gain = PairGain.from_dict(gain) if isinstance(gain, Mapping) else None
    rows = [row for row in data.get("examples") or [] if isinstance(row, list | tuple) and len(row) == 2]
    examples = tuple((str(partner), str(string)) for partner, string in rows)
    return Pairs(counts, (str(columns[0]), str(columns[1])), int(data.get("held_out") or 0), gain, examples)


def checks_of(data: Any) -> Checks | None:
    """A run's checks from run.json's `forgetting`: absent (None here), null (they failed), skipped, or their rows."""
    if data is None:
        return Checks(failed=True)
    if not isinstance(data, Mapping):
        return None
    if data.get("skipped"):
        return Checks(skipped=str(data["skipped"]))
    return Checks(
        rows=list(data.get("checks") or []),
        verdict=str(data.get("verdict") or ""),
        seconds=data.get("seconds"),
        own_long_texts=data.get("own_long_texts"),
    )


def origin_of(stats: Mapping[str, Any]) -> Origin:
    """Where a run's model came from, from its flat stats: `blend_alpha` and `blended_from` name a blend's α and
    parent, `uploaded` the zip; a blend made here has its own `blend_seconds` (one of an uploaded run keeps the
    zip's name beside them)."""
    alpha, zipped = stats.get("blend_alpha"), stats.get("uploaded")
    kind: Kind = "trained"
    if alpha is not None:
        kind = "blend" if zipped is None or stats.get("blend_seconds") is not None else "uploaded"
    elif zipped is not None:
        kind = "uploaded"
    parent = stats.get("blended_from")
    return Origin(
        kind,
        None if alpha is None else float(alpha),
        None if parent is None else str(parent),
        None if zipped is None else str(zipped),
    )


def record_of(stats: Mapping[str, Any]) -> RunRecord:
    """The RunRecord of a flat stats dict (run.json's `stats`, whichever version wrote it): keys it does not know
    are left out, keys it lacks are None."""
    checks = checks_of(stats["forgetting"]) if "forgetting" in stats else None
    return RunRecord(
        training=training_of(stats),
        origin=origin_of(stats),
        timing=Timing(**{k: stats.get(k) for k in TIMING}),
        checks=checks,
        neighbours_changed=stats.get("neighbours_changed"),
        notes=[str(n) for n in stats.get("notes") or []],
    )


def flat_checks(checks: Checks) -> dict[str, Any] | None:
    """The checks as run.json, the card and the API keep them (`forgetting`)."""
    if checks.failed:
        return None
    if checks.skipped is not None:
        return {"skipped": checks.skipped}
    out: dict[str, Any] = {"checks": checks.rows, "verdict": checks.verdict, "seconds": checks.seconds}
    if checks.own_long_texts is not None:
        out["own_long_texts"] = checks.own_long_texts
    return out


def flat(record: RunRecord, summary: str = "", pooling: str | None = None) -> dict[str, Any]:
    """The record as one flat dict: run.json's `stats`, the fields of /train's summary, the model card's input.
    Fields that are None are left out (the checks excepted: `forgetting` is null when they failed)."""
    t, o = record.training, record.origin
    out: dict[str, Any] = {k: getattr(t, k) for k in TRAINING}
    out.update(notes=list(record.notes), summary=summary, pooling=pooling)
    out.update({k: getattr(t, k) for k in TRAINED_MORE})
    if t.pairs is not None:
        p = t.pairs
        counts = {k: v for k, v in dataclasses.asdict(p.stats).items() if v or k != "other"}  # (older runs: no "other")
        out["pairs"] = {**counts, "columns": list(p.columns), "held_out": p.held_out}
        if p.gain is not None:
            out["pairs"]["gain"] = p.gain.to_dict()
        if p.examples:
            out["pairs"]["examples"] = [list(row) for row in p.examples]
    out.update(uploaded=o.zip, blend_alpha=o.alpha, blended_from=o.parent)
    out.update({k: getattr(record.timing, k) for k in TIMING})
    out = {k: v for k, v in out.items() if v is not None}
    if record.checks is not None:
        out["forgetting"] = flat_checks(record.checks)
    if record.neighbours_changed is not None:
        out["neighbours_changed"] = record.neighbours_changed
    return out


@dataclass
class Made:
    """What a kind of run made, besides its files: its record, and the pooling, summary and losses it is served with."""

    record: RunRecord
    pooling: str
    summary: str = ""
    losses: list[float] = field(default_factory=list)

    @staticmethod
    def of_training(stats: Mapping[str, Any]) -> Made:
        """What a training made, from mirror.job's Finished(stats)."""
        losses = [float(x) for x in stats.get("losses") or []]
        return Made(record_of(stats), str(stats["pooling"]), str(stats.get("summary") or ""), losses)


# ---------------------------------------------------------------------------------------------- the served run


@dataclass
class RunInfo:
    """A tuned model served to one session, with everything in `folder` (model/, base_index/, tuned_index/)."""

    folder: Path
    base_model: str
    pooling: str
    corpus: str
    n_texts: int
    texts_key: str
    record: RunRecord
    losses: list[float]
    summary: str
    model_zip: Path
    index_zip: Path
    created: float = field(default_factory=time.time)
    # run.json was written while its general checks ran and no live run finished them: its server stopped meanwhile
    checks_unfinished: bool = False
    # the live run (explorer.runs.live.Run) that serves it before its checks, while it lives; never saved
    live: Any = field(default=None, repr=False, compare=False)

    @property
    def checks_pending(self) -> bool:
        """Served before its general checks, which still run (its live run's status says): its card and downloads
        follow with them."""
        return bool(getattr(self.live, "checking", False))

    @property
    def stats(self) -> Mapping[str, Any]:
        """The record as one flat, read-only mapping: what run.json keeps, what /train's summary and the model card
        say (`flat`). For the formats outside the app; the app itself reads `record`."""
        return MappingProxyType(flat(self.record, self.summary, self.pooling))


def to_json(info: RunInfo, checks_pending: bool = False) -> dict[str, Any]:
    """run.json: the run's fields, its record flat (`stats`), its paths relative to its folder, and whether its
    general checks were still to come when it was written (`checks_pending`: a server that stops before they are in
    leaves it so, and the run's next opening repairs it)."""
    return {
        "folder": ".",
        "base_model": info.base_model,
        "pooling": info.pooling,
        "corpus": info.corpus,
        "n_texts": info.n_texts,
        "texts_key": info.texts_key,
        "stats": flat(info.record, info.summary, info.pooling),
        "losses": list(info.losses),
        "summary": info.summary,
        "model_zip": os.path.relpath(info.model_zip, info.folder),
        "index_zip": os.path.relpath(info.index_zip, info.folder),
        "created": info.created,
        "checks_pending": checks_pending,
    }


def from_json(data: Mapping[str, Any], folder: Path) -> RunInfo:
    """The RunInfo a run.json in `folder` describes, whichever version wrote it."""
    stats = data.get("stats") if isinstance(data.get("stats"), Mapping) else {}
    return RunInfo(
        folder=folder,
        base_model=str(data["base_model"]),
        pooling=str(data.get("pooling") or stats.get("pooling") or "mean"),
        corpus=str(data.get("corpus") or ""),
        n_texts=int(data.get("n_texts") or 0),
        texts_key=str(data.get("texts_key") or ""),
        record=record_of(stats),
        losses=[float(x) for x in data.get("losses") or []],
        summary=str(data.get("summary") or stats.get("summary") or ""),
        model_zip=folder / data["model_zip"],
        index_zip=folder / data["index_zip"],
        created=float(data.get("created") or os.path.getmtime(folder)),
        checks_unfinished=bool(data.get("checks_pending")),
    )
