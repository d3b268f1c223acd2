"""Pairs in words: what the load found (the columns paired and why), and what a pairs run gained on its held-out
rows (mirror.pairs), for tab ① and the verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from explorer.resources.runfacts import as_trained, choice_of, gain_of, pairs_of, served_alpha
from mirror.checks import CHECKS
from mirror.choose import retry_sentence, room_left

if TYPE_CHECKING:
    from explorer.resources.record import RunInfo

MARGINS = {c.name: c.margin for c in CHECKS}  # each general check's margin, as the blend choice's rule reads it


def pairing_md(info: dict[str, Any]) -> str:
    """The load's pairing (or why there is none), under the strings' summary; "" for a file without a choice."""
    pairing = info.get("pairing")
    if pairing is None:
        note = info.get("pair_note")
        return f"**Pairs:** none ({note})." if note and info.get("columns") else ""
    string_col, partner_col = pairing.columns()
    why = f" — {pairing.note}" if pairing.note else ""
    other = pairing.stats.other
    # many strings repeated with other partners (man pages: 1,660 commands sharing a description): those partners
    # are gone from the index too, which the other column as the strings keeps (a newcomer's pass)
    lost = (
        f" To search every `{partner_col}`, pick it as the *Text column* (rows sharing a `{string_col}` then train "
        "without it)."
        if other >= max(20, 0.1 * info["strings"])
        else ""
    )
    return (
        f"**Pairs:** each `{string_col}` is tuned with its `{partner_col}` as its positive{why}. "
        f"{pairing.stats.summary(info['strings'])}.{lost} Pick *(none)* under *Paired with* to tune on the strings "
        "alone."
    )


def pairs_md(run: RunInfo | None) -> str:
    """What a pairs run gained on its own held-out rows, in one sentence and a verdict word; or why nothing measured
    it (nothing held out); "" for a run without pairs."""
    pairs = pairs_of(run)
    if pairs is None:
        return ""
    string_col, partner_col = pairs.columns
    gain = pairs.gain
    if gain is None:
        return (
            f"**Your pairs:** {pairs.stats.paired:,} `{string_col}` trained with their `{partner_col}`; none were "
            "held out (held-out share 0, or under 40 pairs), so nothing measures the gain on your rows."
        )
    word = {"better": "better", "worse": "**worse**", "same": "no better than the base (within the interval)"}
    return (
        f"**Your held-out pairs — {word.get(gain.verdict, gain.verdict)}.** {gain.sentence()}{report_rows(run)}"
        f"{blended(run)}"
    )


def report_rows(run: RunInfo | None) -> str:
    """A run that chose its blend measured two halves of its held-out rows: these (the report rows) and the choice
    rows the blend table shows. Said where the figure is, so the two gains for one model are not a contradiction (a
    newcomer read "+0.9, no better" here and "+3.2" for the same α in the table below); "" without a choice."""
    choice = choice_of(run)
    if choice is None:
        return ""
    return (
        f" These are its report rows: the blend was chosen on {choice['rows']:,} other held-out rows (the table "
        "below), whose gain for the α they pick runs high, as any choice's own rows do."
    )


def blended(run: RunInfo | None) -> str:
    """A blend's held-out figures are its tuned run's, at the α that run served (its choice, or its preset's: they
    are measured after its own blend, mirror.job): said, since the blend itself was not measured on them. (It said
    "before the blend, α = 1" of a pairs run that had served α 0.25: a newcomer's pass.)"""
    origin = run.record.origin if run is not None else None
    if origin is None or origin.alpha is None:
        return ""
    parent = f"run `{origin.parent[:8]}`" if origin.parent else "the tuned model"
    served = f"as it served α = {measured_alpha(run):g}"
    if same_alpha(run):  # served again at the α its run was measured at: these very weights' figures
        return f" _(Measured on {parent} {served}: these weights.)_"
    # *Serve another α* → 1: the run's weights as trained, not a blend
    these = "its weights as trained, α 1," if as_trained(origin.alpha) else f"this blend at α = {origin.alpha:g}"
    choice = choice_of(run)
    tried = next((c for c in (choice or {}).get("candidates", ()) if same(c["alpha"], origin.alpha)), None)
    if tried is not None:  # the run's choice measured this α on its other half (newcomers: "was not measured" under
        # a table whose row for it said 56.0, +1.6; for α 1 too)
        gained = float(tried["mrr10"]) - float(choice["base_mrr10"])
        return f" _(Measured on {parent} {served}; {these} on the choice rows only: {gained:+.1f} in the table below.)_"
    return f" _(Measured on {parent} {served}; {these} {'were' if as_trained(origin.alpha) else 'was'} not measured.)_"


def same(a: Any, b: Any) -> bool:
    """Two α as a record keeps them (JSON floats) are the same blend."""
    return abs(float(a) - float(b)) < 1e-6


def same_alpha(run: RunInfo) -> bool:
    """Whether a blend is served at the α its run's held-out figures were measured at (`measured_alpha`): a run that
    chose α 1 served at α 1 again, or at its own α after another: the figures are its own."""
    origin = run.record.origin
    return origin.alpha is not None and same(origin.alpha, measured_alpha(run))


def measured_alpha(run: RunInfo) -> float:
    """The α a run's held-out figures were measured at: its tuned run's own (run_alpha: its choice or its preset's),
    1 where the record does not say."""
    alpha = run.record.training.run_alpha
    return float(alpha) if isinstance(alpha, int | float) else 1.0


def pairs_row(run: RunInfo | None) -> str:
    """The held-out pairs as a row of the general checks' table (base and tuned MRR@10, the change and its interval)."""
    gain = gain_of(run)
    if gain is None:
        return ""
    base, tuned, low, high = gain.base["mrr10"], gain.tuned["mrr10"], gain.low["mrr10"], gain.high["mrr10"]
    origin = run.record.origin if run is not None else None
    # a blend's column shows its tuned run's figures (the blend was not measured on them): the row says whose
    whose = ""
    if origin is not None and origin.alpha is not None and not same_alpha(run):
        this = "not these weights as trained" if as_trained(origin.alpha) else "not this blend"
        whose = f" (at α {measured_alpha(run):g}, {this})"
    return (
        f"| **your held-out pairs**{whose} | MRR@10 ×100 | {gain.rows:,} | {base:.1f} | {tuned:.1f} | "
        f"{tuned - base:+.1f} | {low:+.1f} to {high:+.1f} | {gain.verdict} |\n"
    )


def a_or_an(word: str) -> str:
    """The indefinite article for `word` (a column's name in a sentence): "an acronym", "a definition", "an `id`";
    by its first letter, a u taking "a" ("a unit", "a url"): "an hour" is beyond it.

    >>> a_or_an("acronym"), a_or_an("`term`"), a_or_an("Expansion")
    ('an', 'a', 'an')
    """
    first = next((c for c in str(word) if c.isalnum()), "")
    return "an" if first.lower() in tuple("aeio") else "a"


def search_by_partner(run: RunInfo | None, example: dict[str, Any] | None = None) -> str:
    """Under a pairs run's Search header: which column is searched, what its partner column is for (it trained the
    pairs, it is shown under each hit), and searching by the partner side (type a description, find the name) with
    a held-out row's partner to try, never trained on: `example` (explorer.compare.searching.Searcher.example: one
    the tuned model finds higher than the base, or said to be found by the base too), else the first kept."""
    pairs = pairs_of(run)
    if pairs is None:
        return ""
    string_col, partner_col = pairs.columns
    line = (
        f"\n\nSearching the `{string_col}` column (your strings); the `{partner_col}` column trained the pairs (each "
        f"`{string_col}` with its `{partner_col}` as its positive) and is shown under each hit. Tuned on pairs: type "
        f"{a_or_an(partner_col)} `{partner_col}` to find its `{string_col}`"
    )
    if example is None and pairs.examples:
        partner, string = pairs.examples[0]
        example = {"partner": partner, "string": string}
    if example is not None:
        line += (
            f", e.g. a row it never trained on: *{_cut(example['partner'])}* (its `{string_col}`: "
            f"*{_cut(example['string'])}*){found_by(example)}"
        )
    return line + "."


def found_by(example: dict[str, Any]) -> str:
    """Where the tuned and the base model rank an example's string (Searcher.example), in a few words; "" unknown."""
    if "better" not in example:
        return ""
    tuned, base = example.get("tuned_rank"), example.get("base_rank")

    def at(rank: Any) -> str:
        return f"at rank {rank}" if rank is not None else "not in its top 10"

    if example["better"]:
        return f": the tuned model finds it {at(tuned)}, the base {at(base)}"
    if tuned is None and base is None:  # not "the base finds it not in its top 10 too" (an acronym run's example)
        return (
            ": neither model finds it in its top 10, and the tuned one finds none of the held-out rows kept to try "
            "higher than the base: your other queries show what tuning changed"
        )
    return (
        f": the base finds it {at(base)} too (the tuned model {at(tuned)}), as it does each of the held-out rows "
        "kept to try: your other queries show what tuning changed"
    )


def strings_of(run: RunInfo) -> str:
    """A run's strings as its page and its model card count them: "12,640" and, for a pairs run that held rows out,
    how many trained and how many were held out (mirror.pairs: the card's "strings" counts those that trained)."""
    pairs = pairs_of(run)
    held = pairs.held_out if pairs is not None else 0
    if not held:
        return f"{run.n_texts:,}"
    return f"{run.n_texts:,} ({run.n_texts - held:,} trained on, {held:,} held out to measure the gain)"


def _cut(text: str, n: int = 120) -> str:
    text = " ".join(str(text).split()).replace("*", "")
    return text if len(text) <= n else text[: n - 1] + "…"


def blend_choice_md(run: RunInfo | None) -> str:
    """The blend a pairs run chose and the others it measured (mirror/choose.py), as a table; "" without one."""
    choice = choice_of(run)
    if choice is None or run is None:
        return ""
    served, chosen, base = served_alpha(run), float(choice["alpha"]), float(choice["base_mrr10"])
    rows = []
    for c in choice["candidates"]:
        alpha, checks = float(c["alpha"]), c.get("checks") or {}
        spread = c.get("noise") or {}  # a run chosen before issue 60's noise room has none

        # the check nearest the rule as the rule reads it (mirror.choose.room_left)
        def left(kv: tuple[str, float], spread: dict[str, float] = spread) -> float:
            return room_left(kv[1], spread.get(kv[0], 0.0), MARGINS.get(kv[0], 1.0))

        worst = min(checks.items(), key=left) if checks else None
        # (to two decimals, as the rule's bound: "-0.2 … ≥ -0.20 … no" read as passing)
        worst_s = f"{worst[0]} {worst[1]:+.2f}" if worst else "not needed"
        if worst and worst[0] in spread:
            worst_s += f" ± {spread[worst[0]]:.2f}"
        if worst:  # what the rule asks of it (room_left >= 0): "-0.2 ± 0.3 → no" read as arbitrary without it
            worst_s += f" (the rule: ≥ {round(worst[1] - left(worst), 2) + 0.0:+.2f})"  # (never "-0.00")
        rule = {True: "yes", False: "**no**", None: "—"}[c.get("within")]
        mark = " (served)" if served is not None and abs(alpha - served) < 1e-9 else ""
        mark += " ← chosen" if abs(alpha - chosen) < 1e-9 else ""
        rows.append(f"| α {alpha:g}{mark} | {c['mrr10']:.1f} | {c['mrr10'] - base:+.1f} | {worst_s} | {rule} |")
    head = (
        f"| blend | held-out MRR@10 ({choice['rows']:,} rows among {choice['pool']:,} strings) | vs the base "
        f"({base:.1f}) | general checks' dev halves: the worst change ± its standard error (what the rule asks of it) | "
        "within the rule |\n|---|---:|---:|---|---|"
    )
    retry = choice.get("retry")
    twice = ""
    if isinstance(retry, dict) and "second" not in retry:  # none started, or it stopped itself: the first served
        twice = f"\n\n**Trained once:** {retry_sentence(retry)}."
    elif isinstance(retry, dict):
        twice = (
            f"\n\n**Trained twice:** {retry_sentence(retry)}. The table is the served training's; a blend picked "
            "below blends its weights as trained."
        )
    return (
        f"**The blend this run chose:** {choice['reason']}. Measured after training on half its held-out rows (the "
        "other half reports its gain) and the checks' dev halves; the rule: no check more than half its margin below "
        "the base, even one standard error (±) lower (that room at most the half margin: a check too small to tell holds "
        "when it measured no loss). Serve another with one click under *Serve another α* (④ Explore, *Space health "
        "and general checks*; the weights as trained are kept: no training again).\n\n"
        f"{head}\n" + "\n".join(rows) + halves_note(choice, gain_of(run)) + twice
    )


def halves_note(choice: dict[str, Any], gain: Any) -> str:
    """When the chosen α's gain on the choice rows falls outside the report rows' 95% interval (the gain the page
    reports, at that α): said, with the rows each half holds, not left as a contradiction between two tables (a
    newcomer's 1,000-row file: +3.4 on 50 choice rows, -0.3 on 50 report rows). "" when they agree or one is missing."""
    if gain is None or not gain.low or not gain.high:
        return ""
    chosen = next((c for c in choice["candidates"] if abs(float(c["alpha"]) - float(choice["alpha"])) < 1e-9), None)
    if chosen is None:
        return ""
    picked = float(chosen["mrr10"]) - float(choice["base_mrr10"])
    low, high = gain.low["mrr10"], gain.high["mrr10"]
    if low <= picked <= high:
        return ""
    reported = gain.tuned["mrr10"] - gain.base["mrr10"]
    why = (
        "The choice rows picked this α for scoring highest on them, so they tend to overstate it"
        if chosen.get("within")
        # no blend kept the rule: the lowest is served whatever it scored (a newcomer read "picked … for scoring
        # highest" under a table where α 0.25 scored lowest)
        else "This α was served because no blend kept every check (the lowest is), not for its score; the two "
        "halves differ by chance"
    )
    return (
        f"\n\n_The two halves disagree: on its {choice['rows']:,} choice rows α {float(choice['alpha']):g} gained "
        f"{picked:+.1f} MRR@10 (searched among {choice['pool']:,} strings), on the {gain.rows:,} report rows above "
        f"{reported:+.1f} ({low:+.1f} to {high:+.1f}, 95%). {why}; the report rows, not used to choose, are the "
        "figure to trust. More held-out rows (a larger file) bring the two closer._"
    )
