"""Blend a tuned model with its base: every weight (1 - α)·base + α·tuned (WiSE-FT, Wortsman et al. 2022), a new
model in seconds without retraining. α = 0 is the base exactly, α = 1 the tuned model exactly; in between, most
of what tuning gained on the user's strings is usually kept while less of what the base knew is lost
(bench/RESULTS.md, "Forgetting check and blend").

    python -m mirror blend runs/r1/model --alpha 0.5 --out runs/r1-blend
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

from mirror.encoder import Encoder, load_encoder, save_encoder
from mirror.errors import MirrorError
from mirror.names import check_model_name


def check_alpha(alpha: Any) -> float:
    """α as a float in [0, 1], or MirrorError."""
    try:
        a = float(alpha)
    except (TypeError, ValueError, OverflowError):
        raise MirrorError("α (the blend weight) must be a number from 0 to 1") from None
    if not math.isfinite(a) or not 0.0 <= a <= 1.0:
        raise MirrorError(f"α (the blend weight) must be from 0 (the base) to 1 (the tuned model), got {alpha!r}")
    return a


def blend(base: Encoder, tuned: Encoder, alpha: float) -> Encoder:
    """A new encoder with the tuned model's tokenizer, pooling and config and weights (1 - α)·base + α·tuned.
    MirrorError when the two models' weights do not match one for one (not the same architecture)."""
    alpha = check_alpha(alpha)
    mixed = copy.deepcopy(tuned.model)
    mix_weights(mixed, base.model, alpha)
    info = copy.deepcopy(tuned.info) if isinstance(tuned.info, dict) else {}
    info["blend"] = {"alpha": alpha, "base": str(base.source)}
    return Encoder(
        model=mixed,
        tokenizer=tuned.tokenizer,
        pooling=tuned.pooling,
        max_seq_length=tuned.max_seq_length,
        source=f"{tuned.source} (blend α={alpha:g})",
        info=info,
    )


def mix_weights(model: Any, base_model: Any, alpha: float) -> None:
    """Set `model`'s floating-point weights to (1 - α)·base + α·model, in place (the caller owns the write: inside
    `Encoder.changing_weights` when the model is an encoder's). MirrorError when the weights do not match."""
    import torch

    ours, theirs = model.state_dict(), base_model.state_dict()
    if ours.keys() != theirs.keys() or any(ours[k].shape != theirs[k].shape for k in ours):
        raise MirrorError(
            "the tuned model and the base model have different weights (not the same architecture); "
            "blend a tuned model with the base it was tuned from"
        )
    with torch.no_grad():
        for key, w in ours.items():
            if not w.is_floating_point():
                continue  # position ids and the like: the tuned model's own
            b = theirs[key].to(w.device, w.dtype)
            if alpha == 0.0:
                w.copy_(b)
            elif alpha != 1.0:
                w.copy_(b * (1.0 - alpha) + w * alpha)


def blend_folder(base: Encoder | str | Path | None, tuned_dir: str | Path, alpha: float, out_dir: str | Path) -> Path:
    """Blend the tuned model saved in `tuned_dir` with `base` (an encoder, a model name or folder; None: the
    base the tuned folder names) and save the blend to `out_dir` as a model mirror wrote (its mirror_config.json
    records α and the base)."""
    alpha = check_alpha(alpha)
    tuned = load_encoder(tuned_dir)
    if not isinstance(base, Encoder):
        name = base if base is not None else tuned.base_model
        if not name:
            raise MirrorError(f"{Path(tuned_dir).name}: the folder does not name its base model; give --base")
        base = load_encoder(check_model_name(str(name)), pooling=tuned.pooling)  # a name from a file: checked
    mixed = blend(base, tuned, alpha)
    return save_encoder(mixed, out_dir, extra=mixed.info)
