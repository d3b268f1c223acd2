"""What a run made (`MirrorResult`: the tuned encoder and how the run went) and how it is kept: a sentence-transformers
folder with mirror_config.json (the config, the stats, the versions: `save_result`), stats measured after the save
added to it (`add_stats`).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mirror.config import MirrorConfig
from mirror.encoder import Encoder, save_encoder
from mirror.terms import added_terms, contrastive_name


@dataclass
class MirrorResult:
    """What a run produced: the tuned encoder (in eval mode) and how the run went."""

    encoder: Encoder
    config: MirrorConfig  # as run: pooling resolved to "cls"/"mean"
    losses: list[float]
    steps: int
    total_steps: int
    seconds: float
    device: str
    cancelled: bool
    n_texts: int
    notes: list[str] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)  # strings in each step (losses of different B differ)

    @property
    def final_loss(self) -> float | None:
        tail = self.losses[-10:]
        return sum(tail) / len(tail) if tail else None

    def stats(self) -> dict[str, Any]:
        return {
            "base_model": self.config.model,
            "strings": self.n_texts,
            "steps": self.steps,
            "total_steps": self.total_steps,
            "seconds": round(self.seconds, 3),
            "device": self.device,
            "cancelled": self.cancelled,
            "first_loss": self.losses[0] if self.losses else None,
            "final_loss": self.final_loss,
            # what the raw loss adds to InfoNCE (mirror.terms.added_terms): the run table names it
            "loss_terms": added_terms(self.config),
            "loss_form": contrastive_name(self.config),
            "notes": self.notes,
        }

    def summary(self) -> str:
        status = "cancelled" if self.cancelled else "done"
        loss = f"{self.final_loss:.4f}" if self.final_loss is not None else "n/a"
        return (
            f"{status}: {self.steps}/{self.total_steps} steps on {self.n_texts} strings in {self.seconds:.1f}s "
            f"on {self.device}; final loss {loss}; pooling {self.config.pooling}, mode {self.config.mode}"
        )


def save_result(result: MirrorResult, out_dir: str | Path) -> Path:
    """Save the tuned encoder as a sentence-transformers folder plus mirror_config.json (atomic)."""
    return save_encoder(
        result.encoder,
        out_dir,
        extra={"config": result.config.to_dict(), "stats": result.stats(), "versions": versions()},
    )


def add_stats(folder: str | Path, **stats: Any) -> None:
    """Add `stats` to the run stats in a saved model's mirror_config.json (what was measured after the save: a pairs
    run's held-out gain), atomically."""
    import json
    import os

    path = Path(folder) / "mirror_config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["stats"] = {**data.get("stats", {}), **stats}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def versions() -> dict[str, str]:
    import transformers

    import mirror

    return {
        "mirror": mirror.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }
