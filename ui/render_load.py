"""What a load of strings says on the Tune tab: their counts (what cleaning removed), the preset detected for them
with its settings and blend, and their pairing (ui.render_pairs.pairing_md). Re-exported by ui.render."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from explorer.words import message
from mirror.config import MirrorConfig
from ui.render_pairs import pairing_md

if TYPE_CHECKING:
    from mirror.data import CleanStats


def preset_blend(p: MirrorConfig) -> str:
    """The blend a preset serves, as the Detected line says it: "the base", not "it" (without distillation "it" had
    nothing to stand for: "max length 50 tokens, blended with it at α 0.25"); a pairs run's α is the one the run
    chooses after training (mirror/choose.py), the preset's own only when too few rows are held out to choose on."""
    if p.blend_choose:
        from mirror.choose import ALPHAS

        alphas = ", ".join(f"{a:g}" for a in ALPHAS)
        picked = f"({alphas}; {p.blend_alpha:g} when few rows are held out)"
        # mirror.job._train_again: said where the preset says how it blends, as the plan prices it
        again = (
            f"; trained again with general text held near the base (λ {p.retry_anchor:g}) if the general checks hold "
            "that α down"
            if p.retry_anchor > 0
            else ""
        )
        return f", blended with the base at the α the run picks after training {picked}{again}"
    return f", blended with the base at α {p.blend_alpha:g}" if p.blend_alpha < 1 else ""


def load_md(info: dict[str, Any]) -> str:
    stats: CleanStats = info["stats"]
    paired = info.get("pairing") is not None  # the pairs preset's settings (mirror.config.PAIRS_ADJUSTMENTS)
    p = MirrorConfig.preset(info["mode"], pairs=paired)
    kind = "single words and short terms" if info["mode"] == "words" else "sentences"
    counts = (
        "as the run kept them"  # its file's counts were said when it was loaded; a newcomer read "0 duplicates removed"
        # beside the pairs line's "1,660 duplicate strings removed"
        if info.get("restored")
        else f"{stats.lines:,} lines, {stats.empty:,} empty dropped, {stats.duplicates:,} duplicate"
        f"{'s' if stats.duplicates != 1 else ''} removed, {stats.case_duplicates:,} case variant"
        f"{'s' if stats.case_duplicates != 1 else ''} merged (first spelling kept)"
    )
    lines = [
        f"**{info['strings']:,} strings** loaded from `{info['source']}`: {counts}.",
        f"**Detected:** {kind} → the **{info['mode']} preset{' for pairs' if paired else ''}** (τ {p.temperature}, "
        f"{p.epochs} epoch{'s' if p.epochs != 1 else ''}{f', at least {p.min_steps} steps' if p.min_steps else ''}, "
        f"{length_words(p, paired)}{distilled(p)}"
        f"{preset_blend(p)}). <small>{info['reason']}.</small>",
    ]
    lines += [pairs] if (pairs := pairing_md(info)) else []
    lines += [message(n, "warning") for n in info.get("notes", [])]
    return "\n\n".join(lines)


def distilled(p: MirrorConfig) -> str:
    """The preset's distillation as the Detected line says it: a pairs run's each column toward the base's embedding
    of itself (pair_distill_own), or both toward the string's."""
    if not p.distill:
        return ""
    toward = ", each column toward its own embedding" if p.distills_own else ""
    return f", distilled from the base (λ {p.distill:g}{toward})"


def length_words(p: MirrorConfig, paired: bool) -> str:
    """The preset's max length as Advanced names it: a pairs run's is each side's ("Pairs: max length of either side"),
    not Advanced's "Max length" (a newcomer read "max length 128 tokens" here and 50 there)."""
    return f"pairs' max length {p.pair_max_length} tokens a side" if paired else f"max length {p.max_length} tokens"
