"""What a run's record says of it, as plain values: whether it is a blend (its α and parent) or an uploaded model, the
name of its served column, a pairs run's pairs, held-out gain and blend choice, and a pairs run in plain text for an
export's README. The service and the pages read a run through these; drawing it is ui.render's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from explorer.resources.record import Pairs, RunInfo
    from mirror.pairs import PairGain


def blend_of(run: RunInfo | None) -> tuple[float, str] | None:
    """A blend's α and the id of the run it blends ("" when not known); None for a run as trained, or no run."""
    origin = run.record.origin if run is not None else None
    return None if origin is None or origin.alpha is None else (float(origin.alpha), origin.parent or "")


def uploaded_zip(run: RunInfo) -> str | None:
    """The name of the model zip the served model itself was loaded from, None when it was made here: trained, or
    blended (a blend made here of an uploaded run copies its parent's stats, "uploaded" included, beside its own
    blend_seconds)."""
    origin = run.record.origin
    return origin.zip if origin.kind == "uploaded" else None


def as_trained(alpha: float | None) -> bool:
    """Whether a blend's α is 1: *Serve another α* → 1 serves the run's weights as trained, nothing of the base (not
    a blend, and never called one). Within float noise of 1 (an α typed as 0.99999999 prints as 1)."""
    return alpha is not None and float(alpha) >= 1 - 1e-6


def blend_name(alpha: float) -> str:
    """A blend's name in a run's label: "blend α=0.5"; α 1 (`as_trained`) is not a blend: "as trained α=1"."""
    return "as trained α=1" if as_trained(alpha) else f"blend α={alpha:g}"


def served_label(run: RunInfo | None) -> str:
    """The served model's column in a base-against-served table: "tuned", "blend α=0.5" for a blend, "tuned α=1" for
    the tuned weights served again as trained (*Serve another α* → 1: not a blend)."""
    blend = blend_of(run)
    return "tuned" if blend is None else ("tuned α=1" if as_trained(blend[0]) else f"blend α={blend[0]:g}")


def pairs_of(run: RunInfo | None) -> Pairs | None:
    """A pairs run's pairs (explorer.resources.record.Pairs), or None."""
    return run.record.training.pairs if run is not None else None


def gain_of(run: RunInfo | None) -> PairGain | None:
    """A pairs run's held-out gain (mirror.pairs.PairGain), or None."""
    pairs = pairs_of(run)
    return pairs.gain if pairs is not None else None


def pairs_about(run: RunInfo | None) -> str:
    """A pairs run in plain text, for an export's README: the columns paired, the counts, the held-out gain."""
    pairs = pairs_of(run)
    if pairs is None:
        return ""
    string_col, partner_col = pairs.columns
    measured = f" {pairs.gain.sentence()}" if pairs.gain else " None were held out: nothing measured the gain."
    return (
        f"Tuned on pairs: each {string_col} with its {partner_col} as its positive ({pairs.stats.paired:,} strings "
        f"had one, {pairs.held_out:,} rows held out of training).{measured}"
    )


def choice_of(run: RunInfo | None) -> dict[str, Any] | None:
    """How a pairs run chose its blend (mirror.choose.Choice.to_dict), or None (no choice made)."""
    choice = run.record.training.blend_choice if run is not None else None
    return choice if isinstance(choice, dict) and choice.get("candidates") else None


def served_alpha(run: RunInfo) -> float | None:
    """The α of the tuned weights the served model is: a blend's own, else the run's (its choice, or its preset's)."""
    origin = run.record.origin
    return float(origin.alpha) if origin.alpha is not None else run.record.training.run_alpha


def choice_alphas(run: RunInfo | None) -> list[float]:
    """The α a run chose among, for the one-click picker; [] without a choice."""
    choice = choice_of(run)
    return [float(c["alpha"]) for c in choice["candidates"]] if choice else []


def own_blend(run: RunInfo | None) -> float | None:
    """The α a run blended its saved weights (model/) with after training (its preset's, or one set in Advanced),
    which a blend of it starts from (explorer.resources.store.tuned_weights: model/ when there is no tuned_model/):
    a blend takes it into account (mirror.blend.blend's `blended_at`), so every blend's α is of the tuned weights as
    trained (the slider read 1 over a run served at α 0.75 and Blend at 1 served that α 0.75 again, called "the
    tuned weights as trained": a newcomer's pass). None where a blend starts from the weights as trained: no blend
    (α 1), or a pairs run that chose its α (it keeps them unblended in tuned_model/)."""
    alpha = run.record.training.run_alpha if run is not None else None
    if not isinstance(alpha, int | float) or alpha >= 1 or choice_of(run) is not None:
        return None
    return float(alpha)
