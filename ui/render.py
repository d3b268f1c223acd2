"""What the user reads: status lines, progress bars, result tables and run summaries as Markdown or HTML.

Every string a user or an upload supplied is escaped here; nothing in this module knows about Gradio. The service
hands plain values over (a run's record, its facts: explorer.resources.runfacts); the words it says itself (a
duration, its note box: explorer.words) and its errors (explorer.errors) are its own.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from explorer.resources.runfacts import (
    as_trained,
    blend_name,
    blend_of,
    choice_of,
    served_alpha,
    served_label,
    uploaded_zip,
)
from explorer.words import fmt_seconds, message
from mirror.checks import SUGGESTED_ALPHA, blend_summary
from mirror.choose import retry_note
from mirror.config import BUNDLED_MODEL
from ui.render_hits import rank_move, render_results  # noqa: F401 (re-exported: render.render_results)
from ui.render_load import length_words, load_md, preset_blend  # noqa: F401 (re-exported: render.load_md)
from ui.render_pairs import (
    a_or_an,
    blend_choice_md,
    pairs_md,
    pairs_row,
    search_by_partner,
    strings_of,
)

if TYPE_CHECKING:
    from explorer.resources.record import Checks, RunInfo, Training
    from explorer.resources.sessions import Session


def status_box(text: str, kind: str = "info") -> str:
    """The run status as HTML (escaped; `code` and **bold** kept): errors in red, done in green."""
    color = {"error": "#dc2626", "warning": "#d97706", "info": "#6b7280", "ok": "#16a34a"}[kind]
    body = html.escape(text)
    body = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", body)
    body = re.sub(r"`(.+?)`", r"<code>\1</code>", body)
    prefix = "<b>Error:</b> " if kind == "error" else ""
    return f'<div class="mx-status-{kind}" style="border-left:4px solid {color};padding:6px 12px">{prefix}{body}</div>'


def progress_bar(label: str, done: int, total: int, right: str = "") -> str:
    """A labelled progress bar (HTML) for the run status; `label` is HTML, `right` plain text."""
    pct = 100.0 * done / total if total else 0.0
    return (
        f'<div class="mx-progress" data-done="{done}" data-total="{total}">'
        '<div style="display:flex;justify-content:space-between;gap:12px;margin-bottom:4px">'
        f'<span>{label}</span><span style="opacity:0.8">{html.escape(right)}</span></div>'
        '<div style="height:12px;border-radius:6px;background:rgba(127,127,127,0.2);overflow:hidden">'
        f'<div style="height:100%;width:{pct:.1f}%;background:var(--color-accent, #f97316);'
        'transition:width 0.3s"></div></div></div>'
    )


SMOOTHING = 0.8  # exponential moving average of the raw losses: one batch's loss is noisy


def toast_text(text: str) -> str:
    """A message for a toast (gr.Warning): plain words, no Markdown marks; escaped, since Gradio renders a
    toast's text as HTML."""
    text = re.sub(r"\*\*(.+?)\*\*", r"\1", text)
    return html.escape(re.sub(r"`(.+?)`", r"\1", text), quote=False)


def moved_header(run: RunInfo | None) -> str:
    """Tab ③'s heading over the pairs whose rank moved most: with tuning, or, when the served model is a blend, with
    the blend (its α and run, and its column's name, as the rest of the tab names it)."""
    blend = blend_of(run)
    if blend is None:
        what, who, col = "with tuning", "tuning", "tuned"
    elif as_trained(blend[0]):  # α 1 served again: the tuned weights as trained, not a blend
        what, who, col = f"with tuning (the weights as trained, {blend_words(blend)})", "tuning", served_label(run)
    else:
        what, who, col = f"with the blend ({blend_words(blend)})", "the blend", served_label(run)
    return (
        f"**Pairs whose rank moved most {what}.** A pair's rank is its place among all pairs of its set "
        f"(1 = most similar) by gold score, by base cosine and by {col} cosine. Per set: the pairs whose {col} rank "
        f"came closest to their gold rank (*toward gold* > 0: {who} helped) and those pushed farthest from it "
        f"(< 0: {who} hurt). Ranked by distance to the gold rank rather than by raw movement, since that is what "
        "moves the Spearman correlation."
    )


# The chart's title stays short: Vega-Lite lays a title out on one line, and on a phone a long one pushed the plot
# out of its box (the chart drew its axis at the right edge and no curve). The rest is the caption under it.
LOSS_TITLE = "Training loss ÷ log(2B−1)"
LOSS_CAPTION = (
    "1 = a model that knows nothing (a mirror run). A pairs run draws its own line in red: a model that knows nothing "
    "of which partner is whose (the base with the partners shuffled, and the pull of a partner toward its string's "
    "base embedding where the run distils so); "
    "for it that line, not 1, is the mark, and a base that already pairs most rows starts well below it. Each step, "
    "and smoothed (each step weighted by its strings)"
)
CHANCE_SERIES = "knows nothing (pairs)"  # a pairs run's own line (explorer.compare.chance)


def loss_frame(losses: Sequence[float], batches: Sequence[int] | None = None, chance: Any = None) -> Any:
    """The loss curve as rows (step, loss, series): each step's loss divided by log(2B-1) of its batch of B strings
    (mirror.loss.chance_loss: the loss of a model that knows nothing), and their moving average with each step
    weighted by its strings. Raw InfoNCE is not comparable across batch sizes (3.0 -> 0.52 -> 2.4 on the small
    example, whose third batch has 11 strings): divided, a batch of 11 still reads lower than one of 200 (fewer
    negatives make an easier task for a model that already knows something), hence the weighted average, which
    a short batch hardly moves. Raw losses, plainly averaged, when the batch sizes are not known (older runs).
    `chance` (a pairs run's explorer.compare.chance.PairsChance): its own "knows nothing" line as a third series,
    CHANCE_SERIES, at a full batch's value (the loss of a pairs run adds its distillation to the mirror loss; a short
    last batch's own line is higher, as its loss is: the smoothed curve, which weighs steps by their strings, reads
    against this one)."""
    import pandas as pd

    from mirror.loss import chance_loss

    raw = [float(x) for x in losses]
    weights = [1.0] * len(raw)
    if batches is not None and len(batches) == len(raw) and all(b > 0 for b in batches):
        raw = [x / chance_loss(b) for x, b in zip(raw, batches, strict=True)]
        weights = [b / max(batches) for b in batches]
    smooth, avg = [], None
    for x, w in zip(raw, weights, strict=True):
        step = (1 - SMOOTHING) * w  # a full batch moves the average as before, a batch of 11 of 200 by 1/18 of that
        avg = x if avg is None else (1 - step) * avg + step * x
        smooth.append(avg)
    steps = list(range(1, len(raw) + 1))
    series = ["each step"] * len(raw) + ["smoothed"] * len(raw)
    if chance is not None and batches is not None and len(batches) == len(raw) and all(b > 0 for b in batches):
        line = [round(chance.at(max(batches)), 4)] * len(raw)  # at a full batch, as the smoothed curve weighs them
        return pd.DataFrame(
            {"step": steps * 3, "loss": raw + smooth + line, "series": series + [CHANCE_SERIES] * len(raw)}
        )
    return pd.DataFrame({"step": steps * 2, "loss": raw + smooth, "series": series})


def loss_summary(losses: Sequence[float], n: int = 10) -> str:
    """Like with like: the mean loss of the first n steps against the mean of the last n."""
    if not losses:
        return "n/a"
    k = max(1, min(n, len(losses) // 2))
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    change = f"{(last - first) / first:+.0%}"
    if k == 1:
        return f"{last:.4f} (last step; first step: {first:.4f}, {change})"
    return f"{last:.4f} (mean of the last {k} steps; first {k}: {first:.4f}, {change})"


def or_na(value: Any) -> Any:
    """A figure of a run's record, or "n/a" where the record does not have it."""
    return "n/a" if value is None else value


def count(n: int, noun: str) -> str:
    """`n` and its noun, singular for 1: "1 string", "1,204 strings"."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def end_losses(training: Training) -> str:
    """The loss of a run whose steps are not kept (a model zip reused: its folder keeps the first and last step's
    loss only), or "n/a"."""
    first, last = training.first_loss, training.final_loss
    if not isinstance(last, int | float):
        return "n/a"
    if not isinstance(first, int | float) or not first:
        return f"{last:.4f} (last step)"
    return f"{last:.4f} (last step; first step: {first:.4f}, {(last - first) / first:+.0%})"


def loss_label(t: Any) -> str:
    """The run table's loss row: the raw training loss, InfoNCE plus what the run added to it (a pairs run's
    distillation to the base: its first step is not InfoNCE's alone); "raw" alone for a record that does not say."""
    if t.loss_terms is None:
        return "Loss (raw)"
    form = t.loss_form or "InfoNCE"
    return f"Loss (raw {form}" + "".join(f" + {term}" for term in t.loss_terms) + ")"


def run_md(run: RunInfo, notes: Sequence[str] = ()) -> str:
    t = run.record.training
    rows = [
        ("Device", or_na(t.device)),
        ("Training time", f"{t.seconds:.1f} s" if isinstance(t.seconds, (int, float)) else "n/a"),
        ("Steps", f"{or_na(t.steps)} / {or_na(t.total_steps)}"),
        (loss_label(t), loss_summary(run.losses) if run.losses else end_losses(t)),
        ("Strings", f"{strings_of(run)} from `{run.corpus}`"),
        ("Base model", f"`{run.base_model}` ({run.pooling} pooling), {t.mode or '?'} preset"),
    ]
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    choice = choice_of(run) or {}
    # the blend choice's reason and its second training's note: its own paragraphs say them (not twice)
    said = {choice.get("reason"), retry_note(choice["retry"]) if choice.get("retry") else None}
    extra = "".join("\n\n" + message(n, "warning") for n in list(notes) + list(run.record.notes) if n not in said)
    run_id, blend, zipped = run.folder.name, blend_of(run), uploaded_zip(run)
    if blend is not None:  # the training in the table is the parent's; the blend itself trained nothing
        alpha, parent = blend
        of = f"run `{parent[:8]}`" if parent else "the tuned model"
        where = "(" if zipped is None else f"you uploaded (`{zipped}`, "
        if as_trained(alpha):  # α 1 served again (*Serve another α*): the tuned weights as trained, not a blend
            made = "No training" if zipped is None else "Loaded now, trained earlier"
            head = (
                f"### Served: the tuned weights as trained {where}run `{run_id[:8]}`), α 1 of {of}\n"
                f"{made}: the weights of {of} as it trained them, nothing of the base; the table shows that training."
                f"\n\n| Trained as {of} | value |\n|---|---|\n{table}\n\n"
            )
        else:
            made = "No training" if zipped is None else "Loaded now, trained and blended earlier"
            head = (
                f"### Served: a blend {where}run `{run_id[:8]}`), α = {alpha:g} of {of}\n"
                f"{made}: its weights are {1 - alpha:g} × the base's + {alpha:g} × the tuned weights "
                f"of {of}, whose training the table shows.\n\n| Blended from {of} | value |\n|---|---|\n{table}\n\n"
            )
    elif zipped is not None:  # loaded and indexed now; the table's training was done earlier
        head = (
            f"### Served: the model you uploaded (`{zipped}`, run `{run_id[:8]}`)\n"
            f"Trained earlier, not now: the table shows that training.\n\n| Uploaded model | value |\n|---|---|\n{table}\n\n"
        )
    else:
        head = f"### Done: your tuned model is served (run `{run_id[:8]}`)\n| Run | value |\n|---|---|\n{table}\n\n"
    pending = getattr(run, "checks_pending", False)  # served before its checks: its downloads come with them
    downloads = "Downloads follow with the general checks." if pending else "Downloads below."
    changed = "\n\n".join(x for x in (pairs_md(run), blend_choice_md(run), change_sentence(run)) if x)
    changed = f"{changed}\n\n" if changed else ""
    return (
        f"{head}{changed}Both encoders indexed your {run.n_texts:,} strings: try the **② Search** tab. {downloads} "
        f"[Link to this run](?run={run_id}) (whoever has it can open the run; a run unused for a while is removed)."
        f"{extra}"
    )


def change_sentence(run: RunInfo | None) -> str:
    """One sentence on how much tuning changed the user's strings' neighbours, and why it is that much: the run's
    steps, the blend that keeps general ability (the preset's, or one made in the app), and how to tune harder.
    "" for a run that does not know (made before the figure was kept)."""
    if run is None:
        return ""
    t, share = run.record.training, run.record.neighbours_changed
    if not isinstance(share, int | float):
        return ""
    pct = 100 * float(share)
    shown = f"{pct:.0f}%" if pct >= 1 or pct == 0 else "under 1%"
    what = f"**{shown} of your strings' nearest neighbours changed** (of each string's 10 nearest, base vs "
    what += f"{served_label(run)})"
    blend, alpha = blend_of(run), t.run_alpha
    steps, epochs = t.steps, t.epochs
    trained = f"{steps} steps" if isinstance(steps, int) else "training"
    if isinstance(epochs, int) and 1 < epochs <= (steps if isinstance(steps, int) else 0):  # not a run cut short
        trained += f" ({epochs} epochs)"
    if blend is not None and as_trained(blend[0]):  # Serve another α → 1: the weights as trained, nothing nearer α 1
        why = "the served model is the tuned weights as trained (α 1)"
        harder = "a lower *Temperature τ* or more epochs change more; a lower α (Explore) changes less"
    elif blend is not None:
        why = f"the served model is a blend, α = {blend[0]:g} of the tuned weights"
        harder = "a blend nearer α 1 (or the run itself) changes more"
    elif isinstance(alpha, int | float) and alpha < 1 and choice_of(run) is not None:
        # a pairs run chose its α (mirror/choose.py): not the preset's default, and its other α are one click away
        why = f"after {trained} the run blended its weights with the base's at α {alpha:g}, the blend it chose"
        harder = (
            "to tune harder, serve a higher α under *Serve another α* (④ Explore; α 1: the run as trained) and read "
            "the general checks: on a sentence encoder, more change costs general ability"
        )
    elif isinstance(alpha, int | float) and alpha < 1:
        why = (
            f"after {trained} the run blended its weights with the base's at α {alpha:g} to keep general ability "
            "(the preset's default; the general checks say whether it held)"
        )
        harder = (
            "to tune harder, raise *Blend with the base after training: α* toward 1 (1: the run as trained) in "
            "Advanced settings and read the general checks: on a sentence encoder, more change costs general ability"
        )
    else:
        why = f"after {trained}, unblended"
        harder = "a lower *Temperature τ* or more epochs change more; a blend (Explore) changes less"
    return f"{what}: {why}. {harder[0].upper()}{harder[1:]}."


def done_status(run: RunInfo) -> str:
    """Tab ①'s status line once a run is served: how long it took (a blend: its own seconds, not its parent's; an
    uploaded model: the seconds it took to load and index now, its training named as done earlier). A load or a
    blend often takes under a second: said so, not "0 s"."""
    timing, checks = run.record.timing, run.record.checks
    blend, zipped = blend_of(run), uploaded_zip(run)
    if blend is not None and zipped is None:
        took = timing.blend_seconds
        return blended_words(blend) + (f" in {fmt_seconds(float(took))}." if took is not None else ".")
    if zipped is not None:
        took, trained = timing.load_seconds, run.record.training.seconds
        what = "a blend" if blend is None or not as_trained(blend[0]) else "the tuned weights as trained"
        now = "Loaded and indexed" if blend is None else f"Loaded {what} ({blend_words(blend)}) and indexed"
        now += f" in {fmt_seconds(float(took))}" if took is not None else ""
        return now + (
            f"; trained earlier in {fmt_seconds(float(trained))}." if trained is not None else "; trained earlier."
        )
    done = f"Tuned and indexed in {fmt_seconds(float(timing.wall_seconds or 0))}"
    waited = timing.waited_seconds
    # the wait for a training slot is not in the wall time: said (a second visitor read "in 5 min" 15 min after Launch)
    after = f", after {fmt_seconds(float(waited))} waiting for a training slot" if waited and waited >= 5 else ""
    served, checked = timing.served_seconds, checks.seconds if checks is not None else None
    if served is not None and checked is not None:  # served before its checks: searchable then, and what they took
        return (
            f"{done}: searchable after {fmt_seconds(float(served))}, then its general checks ({fmt_seconds(checked)})"
            f"{after}."
        )
    return done + after + "."


def kept_md(run: RunInfo | None) -> str:
    """Tab ①'s result panel while a new run starts: what stays served until it is done (the summary of the run before
    is not the new run's)."""
    if run is None:
        return ""
    return f"*A new run is starting. Run `{run.folder.name[:8]}` stays served until it is done; a failed or cancelled run leaves it served.*"


def reattached_md(strings: tuple[int, str]) -> str:
    """Under the upload of a page reloaded while its run trains: the strings that run tunes (loaded again at its end)."""
    n, source = strings
    what = f"**{count(n, 'string')}**" + (f" from `{source.replace('`', chr(39))}`" if source else "")
    return f"Your run in progress tunes {what}; they are loaded here again when it ends."


def opened_status(run: RunInfo) -> str:
    """Tab ①'s status line when a kept run is opened (the run list, a link, a reloaded page): which run, and what it
    took when it was made, never the line of the run served before it."""
    made = done_status(run)
    return f"Serving run `{run.folder.name[:8]}`, opened from your runs or its link. When it was made: {made[0].lower()}{made[1:]}"


def served_status(run: RunInfo) -> str:
    """Tab ①'s status line when a run is served before its general checks (the Served event)."""
    blend = blend_of(run)
    timing = run.record.timing
    took = timing.blend_seconds if blend is not None else timing.served_seconds
    when = f" in {fmt_seconds(float(took))}" if took is not None else ""
    what = blended_words(blend) if blend is not None else "Tuned and indexed"
    return (
        f"{what}{when}: Search and Explore use it now. Checking general similarity (the forgetting check); "
        "the downloads and the checks' table follow when they are done, and Launch opens again then (the run holds "
        "its training slot until its checks end)."
    )


def run_caption(run: RunInfo | None) -> str:
    """Which run a panel belongs to, in one Markdown line (its id, strings and base model), or the base-only case."""
    if run is None:
        return f"Base encoder only (`{BUNDLED_MODEL}`): no tuned model yet."
    caption = (
        f"Run `{run.folder.name[:8]}` · {run.n_texts:,} strings from `{run.corpus}` · tuned from `{run.base_model}`"
    )
    return caption + blend_part(run)


def blended_words(blend: tuple[float, str]) -> str:
    """What was done to serve a blend, for a status line: "Blended and indexed"; α 1 (*Serve another α* → 1) is the
    tuned weights served again as trained, not blended."""
    return "Served the weights as trained (α 1) and indexed" if as_trained(blend[0]) else "Blended and indexed"


def blend_words(blend: tuple[float, str]) -> str:
    """A blend (`blend_of`) in a few words: "α = 0.5 of run `abcd1234`" ("of the tuned weights" when its run is not
    known)."""
    alpha, parent = blend
    return f"α = {alpha:g} of " + (f"run `{parent[:8]}`" if parent else "the tuned weights")


def blend_part(run: RunInfo) -> str:
    """For a blend, what to add to its name (Markdown: " · blend α=0.5 of run `abcd1234`"); "" for a run as trained."""
    blend = blend_of(run)
    if blend is None:
        return ""
    alpha, parent = blend
    return f" · {blend_name(alpha)}" + (f" of run `{parent[:8]}`" if parent else "")


def tuned_side(run: RunInfo | None) -> str:
    """The tuned side of the hits for render_results: a blend's name ("blend α=0.5", "as trained α=1": it said
    "Tuned (mirror)" alone after *Serve another α* → 1, as for the run's own α); "" for a run itself."""
    blend = blend_of(run)
    if blend is None:  # a run's own blend (its preset's, its choice) named too: a blend of the same α was, not it
        alpha = alpha_served(run) if run is not None else 1.0
        return f"α={alpha:g}" if alpha < 1 else ""
    return blend_name(blend[0])


def served_md(session: Session | None, example: dict[str, Any] | None = None) -> str:
    """The Search tab's header: the run searched (a pairs run: which column, what its partner column is for, and a
    held-out row to try: `example`, explorer.compare.searching.Searcher.example), or the base model alone."""
    run = getattr(session, "run", None)
    if run is None:
        pairing = getattr(session, "pairing", None)
        both = ""
        if pairing is not None and getattr(session, "partners", None) is not None:
            strings, partner = pairing.columns()
            both = (
                f" Searching the `{strings}` column; each hit's `{partner}` is shown under it (the column that will "
                f"train the pairs): type {a_or_an(partner)} `{partner}` to find its `{strings}`."
            )
        # the page's first header (no session yet), and again after each load (ui.search: the load summary's change)
        texts = getattr(session, "texts", None)
        what = (  # strings loaded: said (a visitor with the example loaded read "load your strings in tab ①")
            f"your {len(texts):,} strings from `{session.source}` are searched here with the base model; tune a model"
            if texts
            else "load your strings in tab ① (step 1) to search them here with the base model, then tune one there"
        )
        return message(
            f"No tuned model yet: {what} (or upload a saved model) to compare it with the base.{both}", "info"
        )
    other = getattr(session, "extra", None)  # this session's other corpus, for the run it serves
    extra = f" · other corpus: `{other.name}`" if other is not None and other.run == run.folder else ""
    return (
        f"Run `{run.folder.name[:8]}`: searching **{run.n_texts:,} strings** from `{run.corpus}` · tuned from `{run.base_model}` "
        f"({run.pooling} pooling){blend_part(run)} at {time.strftime('%H:%M', time.localtime(run.created))}{extra}"
        f"{search_by_partner(run, example)}"
    )


def health_md(health: dict[str, Any], run: RunInfo | None = None) -> str:
    """Space health before and after tuning (explorer.compare.health.compare_health) as a small table and its one-line
    reading; `run` names the served model's column (a blend's is not "tuned")."""
    base, tuned = health.get("base", {}), health.get("tuned", {})
    names = health.get("labels", {})
    rows = "\n".join(
        f"| {names.get(key, key)} | {base[key]:.3f} | {tuned.get(key, float('nan')):.3f} |"
        for key in base
        if isinstance(base[key], int | float)
    )
    table = f"| space health of your strings | base | {served_label(run)} |\n|---|---:|---:|\n{rows}"
    return f"**Space health.** {health.get('summary', '')}\n\n{table}"


CHECKS_PENDING = (
    "**General checks:** running now on the served model (word pairs, sentence pairs, real documents); their table "
    "appears here when they are done. Search and Explore already use the tuned model."
)


def forgetting_md(run: RunInfo | None) -> str:
    """The general checks of a run (base -> tuned on bundled word pairs, sentence pairs and real long documents,
    each change with its interval and a plain word) and the verdict."""
    from explorer.compare.forgetting import MARGIN
    from mirror.checks import word_of

    if run is not None and getattr(run, "checks_pending", False):
        return message(CHECKS_PENDING, "info")
    check = run.record.checks if run is not None else None
    if check is not None and check.skipped:
        return f"**General checks:** not run for this run ({check.skipped})."
    if check is None or not check.rows:
        return "**General checks:** not run for this run." if run is not None else ""
    rows = "\n".join(
        f"| {c['name']} | {c.get('metric', 'Spearman ×100')} | {c.get('items', c.get('pairs', ''))} | "
        f"{c['base']:.1f} | {c['tuned']:.1f} | {'**' if c.get('worse') else ''}{c['delta']:+.1f}"
        f"{'** ⚠' if c.get('worse') else ''} | {_interval(c.get('ci'))} | {word_of(c)} |"
        for c in check.rows
    )
    head = (
        f"| general check | score | items | base | {served_label(run)} | change | 95% interval of the change | verdict |\n"
        "|---|---|---:|---:|---:|---:|---:|---|"
    )
    kind = "warning" if check.worse else "ok"
    blend = blend_of(run)
    verdict = check.verdict if blend is None else blend_verdict(check.rows, blend[0])
    if blend is None and check.worse and not remedy_offered(run):  # its verdict's "blend at α 0.5": α served is lower
        verdict = f"The served model is this run's own blend, α = {alpha_served(run):g} of the tuned weights. "
        verdict += blend_summary(check.rows)
    took = f" The checks took {check.seconds:g} s." if check.seconds is not None else ""
    note = (
        "\n\nThe check half of each bundled set (its dev half chose the defaults). *Worse* means a drop of more than "
        f"{MARGIN:g} point with its whole interval below zero, *better* the same upwards; *Long documents* asks "
        "whether the top 10 for a real document are its related documents (World English Bible chapters: the next "
        "chapter, then its book, then books of its kind), *Short articles* the same for the Jargon File's entries "
        f"of 40-110 words (one refers to the other, then both to a third).{sts_subset(check.rows)}{took}"
    )
    changed = "\n\n".join(x for x in (pairs_md(run), blend_choice_md(run), change_sentence(run)) if x)
    changed = f"{changed}\n\n" if changed else ""
    return f"{changed}{message(verdict, kind)}\n\n{head}\n{pairs_row(run)}{rows}{note}{own_long_md(check)}"


def sts_subset(rows: Sequence[dict[str, Any]]) -> str:
    """The general checks' STS-B dev is a subset (its check half, capped), not the Evaluate tab's whole set: said."""
    sts = next((r for r in rows if r.get("name") == "STS-B dev"), None)
    if sts is None:
        return ""
    items = sts.get("items", sts.get("pairs"))
    n = f"{items:,} of its pairs" if isinstance(items, int) else "a subset of its pairs"
    return (
        f" *STS-B dev* here scores {n} (every other pair, capped: the check half), ×100; the Evaluate tab's STS-B dev "
        "scores every pair of the set (ρ, 0-1): the two figures differ."
    )


def blend_verdict(rows: Sequence[dict[str, Any]], alpha: float) -> str:
    """What a blend's general checks mean, naming it a blend (the verdict kept with a run speaks of "the tuned model"
    and, when a check is worse, suggests a blend, which this already is); α 1 served again is the tuned weights as
    trained, whose remedy is a blend again."""
    if as_trained(alpha):
        return f"The served model is the tuned weights as trained (α 1). {blend_summary(rows, as_trained=True)}"
    return f"The served model is a blend: α = {alpha:g} of the tuned weights. {blend_summary(rows)}"


def own_long_md(check: Checks) -> str:
    """The label-free self-check on the run's own long strings (explorer.compare.forgetting.own_long_texts), if it ran."""
    own = check.own_long_texts
    if not own:
        return ""
    return (
        f"\n\n**Your own long texts — information, not a quality score.** On your {own['strings']:,} longest strings "
        f"(≥ {own['min_tokens']} tokens): the tuned model keeps {100 * own['overlap_at_10']:.0f}% of each one's 10 "
        f"nearest long strings under the base; finding a string's second half from its first half, MRR ×100 "
        f"{own['halves_mrr_base']:.1f} (base) → {own['halves_mrr_tuned']:.1f} (tuned). No labels say which neighbours "
        "are right: a low overlap means tuning changed how your long texts relate, not that it made them worse."
    )


def _interval(ci: Any) -> str:
    """A 95% interval; an end that is not 0 but rounds to it keeps two decimals ("+0.04 to +2.7": "+0.0 to +2.7"
    read as touching zero beside *better*, whose whole interval is above it)."""

    def end(x: float) -> str:
        return f"{x:+.2f}" if x and abs(x) < 0.05 else f"{x:+.1f}"

    return f"{end(ci[0])} to {end(ci[1])}" if ci else ""


def alpha_served(run: RunInfo) -> float:
    """The α of the tuned weights the served model is (a blend's, the run's own; 1 when none is recorded)."""
    alpha = served_alpha(run)
    return 1.0 if alpha is None else float(alpha)


def default_alpha(run: RunInfo | None) -> float:
    """Where the blend slider starts: the α served (a blend's, or the run's own: its choice, its preset's), so Blend
    unmoved serves the same model (it said 1 over a run served at α 0.75: a newcomer's pass); the suggested α when
    `remedy_offered`. Every α is of the tuned weights as trained (runfacts.own_blend). Only a starting point."""
    if run is None:
        return 1.0
    return float(SUGGESTED_ALPHA) if remedy_offered(run) else alpha_served(run)


def remedy_offered(run: RunInfo | None) -> bool:
    """Whether the one-click remedy (a blend at the suggested α) is offered: the run as trained (not a blend), served
    above the suggested α, has a general check worse than the base (served at or below it already, such a blend
    would take back less of the base, not more)."""
    if run is None or blend_of(run) is not None or alpha_served(run) <= SUGGESTED_ALPHA:
        return False
    checks = run.record.checks
    return checks is not None and checks.worse


def blend_info(run: RunInfo) -> str:
    """What a blend costs, said before it is asked for: the weights mix at once, every string is encoded again (14,257
    strings took 81 s on a busy 2-core machine) as long as the run's tuned index took, the general checks again."""
    took = run.record.timing.tuned_index_seconds
    here = f"this run's took {fmt_seconds(float(took))} here; " if took is not None else ""
    return (
        f"Interpolates the weights at once, then re-encodes your {run.n_texts:,} strings with them ({here}no "
        "retraining), then the general checks"
    )


def blend_text(run: RunInfo) -> str:
    """What the user reads when a blend is served."""
    alpha, parent = blend_of(run) or (1.0, "")
    of = f" of run `{parent[:8]}`" if parent else ""
    if as_trained(alpha):  # Serve another α → 1: the run's weights as trained, nothing of the base (not called a blend)
        return (
            f"Serving the tuned weights as trained (run `{run.folder.name[:8]}`, α 1{of}: nothing of the base). "
            "Search, the maps and the downloads now use them; the general checks above are their own."
        )
    return (
        f"Serving a blend (run `{run.folder.name[:8]}`): α = {alpha:g} of the tuned weights{of}, {1 - alpha:g} of "
        "the base. Search, the maps and the downloads now use it; the general checks above are its own."
    )
