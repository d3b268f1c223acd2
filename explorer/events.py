"""Progress events: one frozen dataclass per kind, born in the job runner and drawn by the UI, the API and the CLI.

A training job yields Phase, Step, Note and Tick while it runs (and Replanned when the machine has less memory free
than its plan was made with), then one of Finished (its files are in its folder) or Stopped (cancelled, timed out,
abandoned) or Failed (Phase, Step, Replanned, Finished and Stopped are the tune -> index job's own, defined with it in
mirror.job). The training producer turns Replanned into a Note with the run's new step count, and fills in each
Step's time left (explorer.tune.eta). The service turns Finished into Served (the run it now serves) and,
once its general checks, card and downloads are made, Done; and Stopped into Cancelled (with the sentence to show).
Adding a field is one edit here.
Every event has a `kind` string, the same for an event and the dict an API client gets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from mirror.errors import without_paths
from mirror.job import Finished, Phase, Replanned, Step, Stopped

if TYPE_CHECKING:
    from explorer.resources.record import RunInfo


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
class Done:
    """The run is served now."""

    run: RunInfo
    notes: tuple[str, ...] = ()
    kind: ClassVar[str] = "done"


@dataclass(frozen=True)
class Served:
    """The run's model and indexes are served now (search and Explore use them); its general checks, card and
    downloads follow, then Done."""

    run: RunInfo
    kind: ClassVar[str] = "served"


@dataclass(frozen=True)
class Cancelled:
    """The run stopped early; the previous run (if any) stays served."""

    text: str
    losses: tuple[float, ...] = ()
    stats: dict[str, Any] = field(default_factory=dict)
    kind: ClassVar[str] = "cancelled"

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", without_paths(self.text))


@dataclass(frozen=True)
class Failed:
    """The run failed with a message for the user; the previous run (if any) stays served."""

    text: str
    kind: ClassVar[str] = "error"

    def __post_init__(self) -> None:  # whatever failed, its message names no server path
        object.__setattr__(self, "text", without_paths(self.text))


__all__ = [
    "Cancelled",
    "Done",
    "Event",
    "Failed",
    "Finished",
    "Note",
    "Phase",
    "Replanned",
    "Served",
    "Step",
    "Stopped",
    "TERMINAL",
    "Tick",
]

Event = Phase | Step | Note | Tick | Finished | Stopped | Replanned | Served | Done | Cancelled | Failed
TERMINAL = (Done, Cancelled, Failed)
