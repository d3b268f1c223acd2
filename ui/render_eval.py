"""What the Evaluate tab shows: the before/after table with its intervals, the bar chart with its interval bars, the
caption and notes, and the served encoder's columns named for it (a blend's, an uploaded model's). Every string a
user or an upload supplied is escaped here, as in ui.render."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from explorer.words import message


def fmt_interval(ci: Sequence[float] | None, signed: bool = False) -> str:
    """A 95% interval for a table cell: "0.612 – 0.701" ("+0.004 – +0.021" for a change); "n/a" without one."""
    if ci is None:
        return "n/a"
    spec = "+.4f" if signed else ".4f"
    return f"{ci[0]:{spec}} – {ci[1]:{spec}}"


def eval_table_rows(rows: list[dict[str, Any]], served: str = "tuned") -> list[dict[str, Any]]:
    """The evaluation rows for the table: intervals as text, the change signed, the tuned encoder's columns named
    `served` (render.served_label: "blend α=0.5" for a blend)."""
    out = []
    for r in rows:
        row = dict(r)
        for key in [k for k in r if k.endswith("95% CI")]:
            row[key] = fmt_interval(r[key], signed=key.startswith("change"))
        if "change" in r:
            row["change"] = f"{r['change']:+.4f}"
        out.append(served_columns(row, served))
    return out


def served_columns(row: dict[str, Any], served: str) -> dict[str, Any]:
    """`row` with its tuned encoder's keys ("tuned", "tuned 95% CI", "tuned rank") named `served`, order kept."""
    if served == "tuned":
        return row
    return {(served + k[len("tuned") :] if k == "tuned" or k.startswith("tuned ") else k): v for k, v in row.items()}


ENCODER_COLOURS = {"base": "#4c78a8", "tuned": "#f58518"}


def eval_chart(rows: list[dict[str, Any]], encoders: Sequence[str], served: str = "tuned") -> str:
    """Spearman per set and encoder as horizontal bars (HTML), each with its 95% interval as a whisker; the tuned
    encoder's bars labelled `served` ("blend α=0.5" for a blend). The axis runs from 0 (or the lowest value, when one
    is negative) to 1. All text is escaped."""
    names = {e: served if e == "tuned" else e for e in encoders}
    label_em = max(3.5, 0.6 * max((len(n) for n in names.values()), default=0))  # "blend α=0.25" needs room
    values = [r[e] for r in rows for e in encoders] + [
        lo for r in rows for e in encoders if r.get(f"{e} 95% CI") for lo in r[f"{e} 95% CI"][:1]
    ]
    left = min(0.0, *values) if values else 0.0

    def x(v: float) -> float:  # a value's position, in % of the bar's width
        return 100.0 * (max(left, min(1.0, v)) - left) / (1.0 - left)

    def bar(r: dict[str, Any], enc: str) -> str:
        v, ci, zero = r[enc], r.get(f"{enc} 95% CI"), x(0.0)
        start, width = min(zero, x(v)), abs(x(v) - zero)
        whisker = ""
        if ci:
            lo, hi = x(ci[0]), x(ci[1])
            whisker = (
                f'<div title="95% interval {ci[0]:.3f} – {ci[1]:.3f}" style="position:absolute;left:{lo:.1f}%;'
                f"width:{max(hi - lo, 0.3):.1f}%;top:3px;bottom:3px;border:2px solid var(--body-text-color,#333);"
                "border-top:none;border-bottom:none;background:linear-gradient(var(--body-text-color,#333),"
                'var(--body-text-color,#333)) center/100% 2px no-repeat"></div>'
            )
        return (
            f'<div class="mx-eval-bar" style="display:flex;align-items:center;gap:8px;margin:2px 0">'
            f'<span style="width:{label_em:g}em;flex:none;font-size:0.9em">{html.escape(names[enc])}</span>'
            '<div style="position:relative;flex:1;height:18px;background:rgba(127,127,127,0.12);border-radius:3px">'
            f'<div style="position:absolute;left:{start:.1f}%;width:{width:.1f}%;top:0;bottom:0;'
            f'background:{ENCODER_COLOURS.get(enc, "#888")};border-radius:3px"></div>{whisker}</div>'
            f'<span style="width:9.5em;font-size:0.9em;font-variant-numeric:tabular-nums">{v:.3f}'
            f"{f' ({ci[0]:.2f} – {ci[1]:.2f})' if ci else ''}</span></div>"
        )

    sets = "".join(
        f'<div style="margin:8px 0 2px 0;font-weight:600">{html.escape(str(r["gold set"]))} '
        f'<span style="font-weight:normal;opacity:0.7">· {r["pairs"]:,} pairs</span></div>'
        + "".join(bar(r, e) for e in encoders)
        for r in rows
    )
    return (
        '<div id="mx-eval-chart"><div style="font-weight:600">Spearman ρ, higher is better; the whisker is its '
        f"bootstrap 95% interval (axis {left:.2f} to 1)</div>{sets}</div>"
    )


def eval_md(rows: list[dict[str, Any]], notes: Sequence[str], caption: str = "") -> str:
    """Which run was evaluated, what the evaluation found in one line, then its notes (small sets, no tuned model)."""
    n = len(rows)
    head = f"Evaluated {n} set{'s' if n != 1 else ''}; intervals are bootstrap 95% intervals over the pairs."
    sts = next((r for r in rows if r.get("gold set") == "STS-B dev"), None)
    if sts is not None:
        head += " " + STS_NOTE.format(
            pairs=f"{sts.get('pairs', 'all'):,}" if isinstance(sts.get("pairs"), int) else "all"
        )
    return "\n\n".join([*([caption] if caption else []), message(head, "ok"), *(message(t, "warning") for t in notes)])


# Two figures named STS-B dev (issue 60: 92.5 -> 92.8 in the checks, 0.867 -> 0.868 here) are two subsets, said where
# each is shown: here every pair of the set; the general checks (Explore) score its check half, capped
# (mirror.checks: every other pair, at most 200), as Spearman x 100.
STS_NOTE = (
    "STS-B dev here is all {pairs} of its pairs (Spearman ρ, 0-1); the general checks' *STS-B dev* row (Explore) "
    "scores a subset of them (every other pair, at most 200: the check half), ×100, so the two figures differ."
)
