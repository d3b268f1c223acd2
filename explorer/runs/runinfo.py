"""`RunInfo`: one served run, as the sessions, the model cache, the events and the Explore tab all see it.

A leaf module (it imports nothing of explorer/), so each of them can name it without importing the others.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class RunInfo:
    """A tuned model served to one session, with everything in `folder` (model/, base_index/, tuned_index/)."""

    folder: Path
    base_model: str
    pooling: str
    corpus: str
    n_texts: int
    texts_key: str
    stats: dict[str, Any]
    losses: list[float]
    summary: str
    model_zip: Path
    index_zip: Path
    created: float = field(default_factory=time.time)
    # served before its general checks ran (explorer.runs.training): they, its card and its downloads follow
    checks_pending: bool = False
