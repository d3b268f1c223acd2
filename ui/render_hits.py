"""Search hits as HTML: the tuned and the base encoder's top k side by side (the Search tab, Explore's neighbours),
each hit's move from the base ranking, and in a pairs run each hit's partner beside it. Every string is escaped."""

from __future__ import annotations

import html
from typing import Any

__all__ = ["rank_move", "render_results"]


def rank_move(rank: int, base_rank: int | None) -> str:
    """A tuned hit's move from its base rank: "↑3" (3 places higher with tuning), "↓2", "=" or "new" (not in
    the base top k)."""
    if base_rank is None:
        return "new"
    if base_rank == rank:
        return "="
    return f"↑{base_rank - rank}" if base_rank > rank else f"↓{rank - base_rank}"


def render_results(
    results: list[dict[str, Any]], base_label: str, dom_id: str = "mx-search-hits", served: str = ""
) -> str:
    """Side-by-side HTML tables per query; strings only one side found are highlighted, each tuned hit shows
    its move from the base ranking. A base-only result (no tuned model yet) is one table, said so. All text is
    escaped. `dom_id`: the wrapper's id, one per place on the page (the Search tab's hits, Explore's neighbours,
    both shown at once); the class `mx-results` styles them all. `served`: what the tuned side is when it is not the
    weights as trained ("blend α=0.5": after *Serve another α* the tables said "Tuned (mirror)" of a blend)."""
    new_bg, gone_bg = "rgba(34,197,94,0.18)", "rgba(245,158,11,0.20)"
    base_only = any(r.get("base_only") for r in results)
    legend = (
        f'<p style="margin:0 0 8px 0;font-size:0.9em"><span style="background:{new_bg};padding:1px 6px;border-radius:4px">'
        f'green</span> only the tuned encoder finds it · <span style="background:{gone_bg};padding:1px 6px;'
        "border-radius:4px\">amber</span> only the base encoder finds it · <b>move</b>: a tuned hit's rank against "
        "the base encoder's (↑3: three places higher after tuning, ↓2: lower, new: not in the base top k)</p>"
    )
    if base_only:
        legend = (
            '<p class="mx-base-only" style="margin:0 0 8px 0;font-size:0.9em">No tuned model yet: these are the '
            f"<b>base encoder</b>'s hits alone ({html.escape(base_label)}). Tune a model in tab ① to see what "
            "tuning changes.</p>"
        )
    columns = next((r["columns"] for r in results if r.get("columns")), None)
    legend = columns_note(columns, base_only) + legend
    blocks = []
    for r in results:
        if r.get("base_only"):
            head, tables = "", _hits_table(r["base"], "Base · " + html.escape(base_label), "", "", False, columns)
        else:
            changed = sum(h["only_here"] for h in r["tuned"])
            head = f' <span style="opacity:0.7">· {changed} of {len(r["tuned"])} tuned hits are new</span>'
            title = "Tuned (mirror)" + (f" · {html.escape(served)}" if served else "")
            tuned = _hits_table(r["tuned"], title, new_bg, "mx-only-tuned", True, columns)
            tables = tuned + _hits_table(
                r["base"], "Base · " + html.escape(base_label), gone_bg, "mx-only-base", False, columns
            )
        hidden = r.get("hidden")
        if hidden is not None and columns:  # the query's own row, left out of the hits: its partner said here
            partner = hidden.get("partner")
            its = f"its {html.escape(str(columns['partner']))}: <b>{html.escape(str(partner))}</b>" if partner else ""
            head += (
                f'<div class="mx-hidden-own" style="font-size:0.85em;opacity:0.8">The query is one of your strings'
                f"{' (' + its + ')' if its else ''}, left out of the hits: <i>Hide the query itself</i> is on.</div>"
            )
        blocks.append(
            f'<div class="mx-query" style="margin-bottom:18px"><div style="font-size:1.05em;margin-bottom:6px">'
            f"Query: <b>{html.escape(r['query'])}</b>{head}</div>"
            f'<div style="display:flex;gap:18px;flex-wrap:wrap">{tables}</div></div>'
        )
    return f'<div id="{html.escape(dom_id)}" class="mx-results">' + legend + "".join(blocks) + "</div>"


def columns_note(columns: dict[str, str] | None, base_only: bool = False) -> str:
    """Over a pairs run's hits (`columns`: {"strings": …, "partner": …}, the search result's): which column is
    searched, and what the partner column shown beside each hit is for. "" for strings without partners."""
    if not columns:
        return ""
    strings, partner = html.escape(str(columns["strings"])), html.escape(str(columns["partner"]))
    what = "will train" if base_only else "trained"
    return (
        '<p class="mx-columns" style="margin:0 0 6px 0;font-size:0.9em">Searching the <b>'
        f"{strings}</b> column (your strings). Under each hit, its <b>{partner}</b>: the column that {what} the "
        f"pairs (each {strings} with its {partner} as its positive), shown here, not searched.</p>"
    )


PARTNER_CHARS = 160  # of a partner under its hit (a definition may be long); its whole text is the cell's tooltip


def partner_line(h: dict[str, Any], column: str) -> str:
    """The hit's partner under its string (cut at PARTNER_CHARS, whole in its tooltip), or "" when the hit has none
    to show (not a pairs search)."""
    if "partner" not in h:
        return ""
    partner = h["partner"]
    if partner is None:
        # (cleaning kept none: "no code" was untrue for a name whose code is the name itself, Fum / fum)
        shown, tip = f"trained on its own (its {column} was empty, the string itself, or another row's)", ""
    else:
        text = " ".join(str(partner).split())
        shown = text if len(text) <= PARTNER_CHARS else text[: PARTNER_CHARS - 1] + "…"
        tip = f' title="{html.escape(text)}"'
    return (
        f'<div class="mx-partner"{tip} style="font-size:0.85em;opacity:0.75">'
        f"<i>{html.escape(column)}:</i> {html.escape(shown)}</div>"
    )


def _hits_table(
    hits: list[dict[str, Any]], title: str, bg: str, cls: str, moves: bool, columns: dict[str, str] | None = None
) -> str:
    """One side's hits; `moves`: a column with each hit's rank move from the base ranking; `columns` (a pairs
    search's): the strings' column names the string column, each hit's partner under it."""
    cell = "padding:2px 8px"
    string_col, partner_col = (columns["strings"], columns["partner"]) if columns else ("string", "partner")
    colour = {"↑": "#16a34a", "↓": "#d97706", "n": "#16a34a"}

    def move(h: dict[str, Any]) -> str:
        if not moves:
            return ""
        mark = rank_move(h["rank"], h.get("base_rank"))
        base = h.get("base_rank")
        tip = f"base rank {base}" if base is not None else "not in the base top k"
        return (
            f'<td class="mx-move" title="{tip}" style="{cell};text-align:right;white-space:nowrap;'
            f'color:{colour.get(mark[0], "inherit")}">{mark}</td>'
        )

    body = "".join(
        f'<tr class="{cls if h["only_here"] else ""}" style="background:{bg if h["only_here"] else "transparent"}">'
        f'<td style="{cell};opacity:0.7">{h["rank"]}</td>'
        f'<td style="{cell}">{html.escape(h["text"])}{partner_line(h, partner_col)}</td>'
        f'<td style="{cell};text-align:right;font-variant-numeric:tabular-nums">{h["score"]:.3f}</td>{move(h)}</tr>'
        for h in hits
    )
    move_head = f'<th style="text-align:right;{cell};width:3.5em">move</th>' if moves else ""
    return (
        f'<div style="flex:1;min-width:260px"><div style="font-weight:600;margin-bottom:4px">{title}</div>'
        f'<table style="width:100%;border-collapse:collapse"><thead><tr><th style="text-align:left;{cell};width:2.5em">#</th>'
        f'<th style="text-align:left;{cell}">{html.escape(string_col)}</th>'
        f'<th style="text-align:right;{cell};width:5em">cosine</th>'
        f"{move_head}</tr></thead><tbody>{body}</tbody></table></div>"
    )
