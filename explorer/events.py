"""Progress events: one frozen dataclass per kind, born in the job runner and drawn by the UI, the API and the CLI.

A training job yields Phase, Step, Note and Tick while it runs, then one of Finished (its files are in its
folder) or Stopped (cancelled, timed out, abandoned) or Failed. The service turns Finished into Done (the run
it now serves) and Stopped into Cancelled (with the sentence to show). Adding a field is one edit here.
Every event has a `kind` string, the same for an event and the dict an API client gets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from explorer.sessions import RunInfo


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
    kind: ClassVar[str] = "step"


@dataclass(frozen=True)
class Note:
    """Something the user should know about this run (a cap applied, a fallback taken)."""

    text: str
    kind: ClassVar[str] = "note"


@dataclass(frozen=True)
class Tick:
    """Nothing new; sent twice a second so a consumer can redraw and the job can tell its consumer is alive."""

    kind: ClassVar[str] = "tick"


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


@dataclass(frozen=True)
class Done:
    """The run is served now."""

    run: RunInfo
    notes: tuple[str, ...] = ()
    kind: ClassVar[str] = "done"


@dataclass(frozen=True)
class Cancelled:
    """The run stopped early; the previous run (if any) stays served."""

    text: str
    losses: tuple[float, ...] = ()
    stats: dict[str, Any] = field(default_factory=dict)
    kind: ClassVar[str] = "cancelled"


@dataclass(frozen=True)
class Failed:
    """The run failed with a message for the user; the previous run (if any) stays served."""

    text: str
    kind: ClassVar[str] = "error"


Event = Phase | Step | Note | Tick | Finished | Stopped | Done | Cancelled | Failed
TERMINAL = (Done, Cancelled, Failed)
