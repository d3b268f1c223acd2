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


def recorded_blend(info: Any) -> tuple[float, str] | None:
    """The blend a saved model's mirror_config.json records (written by `blend`): its α of the tuned weights and what
    it blends ("of": the app's run id, "" when not recorded); None for a model as trained. The sentences preset's
    own blend after training (`MirrorConfig.blend_alpha`) is part of how that preset trains, so its output reads as
    a model as trained, not as a blend: only a blend made after training is recorded here."""
    record = info.get("blend") if isinstance(info, dict) else None
    if not isinstance(record, dict):
        return None
    try:
        alpha = check_alpha(record.get("alpha"))
    except MirrorError:
        return None  # a hand-edited record: not trusted as a blend
    return alpha, str(record.get("of") or "")


def blend(
    base: Encoder, tuned: Encoder, alpha: float, of: str | None = None, blended_at: float | None = None
) -> Encoder:
    """A new encoder with the tuned model's tokenizer, pooling and config and weights (1 - α)·base + α·tuned; `of`
    names the tuned model in the record (the app: its run id). When `tuned` is itself a blend of this base at α0
    (a saved blend loaded again, e.g. a model zip; or `blended_at` α0: a run's own blend after training, which its
    folder does not record as a blend), α stays α of the tuned weights it blends: the weights are
    base + (α/α0)·(blend - base), not α·α0 of them. MirrorError when the two models' weights do not match one for
    one (not the same architecture), or when `tuned` is a blend at α0 = 0 (the base: its tuned weights are gone)."""
    alpha = check_alpha(alpha)
    weight, prior = alpha, recorded_blend(tuned.info)
    if prior is None and blended_at is not None and blended_at < 1 - 1e-6:  # (1: the weights as trained)
        prior = (check_alpha(blended_at), "")
    if prior is not None:
        if prior[0] == 0.0 and alpha != 0.0:
            raise MirrorError(
                "this model is a blend at α = 0 (the base itself): its tuned weights cannot be recovered; "
                "blend the tuned model it was made from"
            )
        weight = alpha / prior[0] if alpha else 0.0
        of = of or prior[1]
    mixed = copy.deepcopy(tuned.model)
    mix_weights(mixed, base.model, weight)
    info = copy.deepcopy(tuned.info) if isinstance(tuned.info, dict) else {}
    info["blend"] = {"alpha": alpha, "base": str(base.source), **({"of": of} if of else {})}
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
    `Encoder.changing_weights` when the model is an encoder's); α > 1 extrapolates (`blend` of a blend). MirrorError
    when the weights do not match."""
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


def blend_folder(
    base: Encoder | str | Path | None,
    tuned_dir: str | Path,
    alpha: float,
    out_dir: str | Path,
    of: str | None = None,
    blended_at: float | None = None,
) -> Path:
    """Blend the tuned model saved in `tuned_dir` with `base` (an encoder, a model name or folder; None: the
    base the tuned folder names) and save the blend to `out_dir` as a model mirror wrote (its mirror_config.json
    records α, the base and `of`, so the folder, its zip and the CLI know it for a blend: `recorded_blend`).
    `blended_at`: the α the folder's weights already are of the tuned weights (`blend`)."""
    alpha = check_alpha(alpha)
    tuned = load_encoder(tuned_dir)
    if not isinstance(base, Encoder):
        name = base if base is not None else tuned.base_model
        if not name:
            raise MirrorError(f"{Path(tuned_dir).name}: the folder does not name its base model; give --base")
        base = load_encoder(check_model_name(str(name)), pooling=tuned.pooling)  # a name from a file: checked
    mixed = blend(base, tuned, alpha, of, blended_at)
    return save_encoder(mixed, out_dir, extra=mixed.info)
