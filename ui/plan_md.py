"""What the Tune tab says of a plan: its steps (and why a small upload trains more epochs), the estimated total and
its phases, and how the costs were measured (calibrated here, busy then, the machine's speed now): the words of the
service's plan (explorer.tune.planning.Shown, an explorer.tune.estimate Estimate) and of the base-model box (Bases)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from explorer.tune.estimate import BUSY_LOAD, SPEED_SHOWN, Estimate
from explorer.tune.planning import UNSCALED_PHASES, Bases, Shown
from explorer.words import about, fmt_seconds, message
from mirror.config import BUNDLED_MODEL, MirrorConfig

NO_STRINGS = "Load some strings to see the plan and a time estimate."
# phases a run may not have, named in its plan only when it does (a run with no held-out rows to choose its blend
# on, or no pairs, said "blend choice <1 s")
OPTIONAL_PHASES = ("base index", "blend choice", "general checks")


def plan_md(shown: Shown) -> str:
    """The plan as the Tune tab shows it: the estimate's words, a refusal's note, or what to do first."""
    if shown.refused:
        return message(shown.refused, "warning")
    if shown.config is None:
        return NO_STRINGS
    return estimate_md(shown.est, shown.config, shown.notes, shown.why_rough)


def plan_text(app: Any, session: Any, model: str, mode: str, overrides: dict[str, Any]) -> str:
    """The plan of the session's run with these settings, as the page shows it (app.planner.plan, worded)."""
    return plan_md(app.planner.plan(session, model, mode, overrides))


def held_text(app: Any, session: Any, model: str, mode: str, overrides: dict[str, Any]) -> str:
    """The plan of the settings the session holds (app.planner.held), as the page shows it."""
    return plan_md(app.planner.held(session, model, mode, overrides))


def bases_md(bases: Bases) -> str:
    """The base-model box: the bases suggested by need, each with its size and what a run of the session's strings
    would cost here (the bundled model's estimate scaled by each base's compute per token), and where models load
    from. Three columns: the box sits in a narrow column (and on a phone)."""
    from explorer.tune.bases import SUGGESTED, fmt_params, relative_compute, shape_of
    from mirror.memory import fmt_gb

    est, why = bases.est, bases.why
    rows = ["| base · size | pick it for | time |", "|---|---|---:|"]
    for base in SUGGESTED:
        shape, ratio = shape_of(base.model), relative_compute(base.model)
        size = "?" if shape is None else fmt_params(shape.params)
        if base.model != BUNDLED_MODEL and shape is not None:
            size += f", {fmt_gb(4 * shape.params)} download"
        if est is None or ratio is None:
            cost = "?" if bases.loaded else "–"
        else:
            scaled = sum(s * (1 if name in UNSCALED_PHASES else ratio) for name, s in est.phases)
            cost = f"~{short_seconds(scaled)}"
        rows.append(f"| **{base.name}** · {size} | {base.need} | {cost} |")
    ids = ", ".join(f"`{b.model}`" for b in SUGGESTED)
    if est is None:
        how = f"Times: {why}." if why else "Times: load some strings to see what a run of them costs here."
    else:
        which = "calibrated here" if est.calibration is not None else f"a rough guess so far; it {why}"
        how = (
            f"Times: this machine's estimate of the whole run for the bundled model ({which}), scaled by each "
            "model's compute per token; a hub model's first run also downloads it."
        )
    hub = (
        "This server loads no hub models (MIRROR_ALLOW_HUB=0)."
        if not bases.allow_hub
        else "Hub ids need internet: this server is offline (HF_HUB_OFFLINE), so only those downloaded before load."
        if bases.offline
        else "Hub ids need internet on the server."
    )
    local = (
        " A local folder (a sentence-transformers or Hugging Face model) is typed as its path; this server takes "
        "folders under MIRROR_MODEL_ROOTS."
        if bases.local_roots
        else ""
    )
    return "\n".join(rows) + f"\n\nIn the Base model box: {ids}.\n\n_{how} {hub}{local}_"


def short_seconds(s: float) -> str:
    """A phase's seconds in a few characters: "<1 s", "12 s", "3 min"."""
    return "<1 s" if s < 1 else fmt_seconds(s)


def small_upload_note(steps: int, config: MirrorConfig) -> str:
    """Why a run trains more epochs than one: " of 5 steps: a small upload trains at least 50 steps", or "" where the
    epochs are not the fewest that reach `min_steps` (the epochs asked for, not raised by it)."""
    from mirror.config import MIN_STEPS_EPOCHS

    if not config.min_steps or config.epochs <= 1 or not steps:
        return ""
    per_epoch = -(-steps // config.epochs)
    of = f" of {per_epoch:,} step{'s' if per_epoch != 1 else ''}: a small upload trains"
    if config.epochs == MIN_STEPS_EPOCHS and steps < config.min_steps:  # 40 strings: 25 steps, the preset's "at
        # least 50" said beside them (a newcomer's pass)
        return f"{of} at most {MIN_STEPS_EPOCHS} epochs, short of its min steps ({config.min_steps})"
    if not (config.epochs - 1) * per_epoch < config.min_steps <= steps:
        return ""
    return f"{of} at least {config.min_steps} steps"


def estimate_md(
    est: Estimate, config: MirrorConfig, notes: Sequence[str] = (), why_rough: str = "", going: bool = False
) -> str:
    """The Tune tab's Markdown: the plan, the estimated total and its phases, and how the costs were measured.
    `going`: the plan of a run already launched (a reattached page): nothing of what Launch would keep."""
    plan = (
        f"**Plan:** {est.steps:,} steps ({config.mode} preset, batch {config.batch_size}, {config.epochs} epoch"
        f"{'s' if config.epochs != 1 else ''}{small_upload_note(est.steps, config)})"
    )
    if config.max_steps is not None and est.steps >= config.max_steps:  # the epochs do not count them: said so
        plan = f"**Plan:** {est.steps:,} steps (max steps {config.max_steps:,}; {config.mode} preset, batch {config.batch_size})"
    if est.split and est.memory:
        # planned with the memory free now: a plan made at another moment (another visitor's, a page of another
        # time) may split fewer or more and count other steps; said here, not only in the run's report afterwards
        from mirror.memory import fmt_gb

        fewer = f"; {est.unsplit:,} with more memory free" if est.unsplit and est.unsplit != est.steps else ""
        plan += (
            f" · {est.split:,} batch{'es' if est.split != 1 else ''} of long strings split into smaller steps to fit "
            f"the {fmt_gb(est.memory)} of memory a run gets here now ({est.steps:,} steps{fewer})"
        )
        plan += "" if going else "; Launch keeps this plan unless less is free by then"
    extra = f" · {'; '.join(notes)}" if notes else ""
    cal = est.calibration
    if cal is None:
        train, index = est.phase("training"), est.phase("base index") + est.phase("tuned index")
        # the phases after training a run has too (a pairs run's blend choice, the general checks): a newcomer's plan
        # said "~2 min training + ~4 s indexing" and its run spent ~3 min more on these, unannounced
        later = "".join(
            f" + {about(est.phase(name))} {words}"
            for name, words in (("blend choice", "choosing the blend"), ("general checks", "general checks"))
            if est.phase(name) > 0
        )
        return (
            f"{plan} · **estimated** (rough guess) {about(train)} training + {about(index)} indexing"
            f"{later}{retry_md(est)}{f' · {why_rough}' if why_rough else ''}{extra}"
        ).replace("~", "\\~")
    shown = " · ".join(f"{name} {short_seconds(s)}" for name, s in est.phases if s > 0 or name not in OPTIONAL_PHASES)
    reused = "" if est.phase("base index") > 0 else " (the served run has these strings: its base index is reused)"
    how = f"calibrated on this machine just now ({cal.seconds:.1f} s)" if est.fresh else "calibrated on this machine"
    if est.borrowed:  # this model's calibration here at another length (explorer.tune.estimate.Estimator.estimate)
        how = (
            f"priced with this model's calibration on this machine at steps of ~{est.borrowed} tokens, not yet timed "
            f"at this run's ~{est.key[-1]}{f'; {why_rough}' if why_rough else ''}"
        )
    total = about(est.total)
    if est.quiet >= SPEED_SHOWN:
        # other work shares the machine: priced at the speed it gives now (one probe a quarter minute), and the range
        # down to its quickest here (what the run takes if that work stops); a quieter machine only lowers both
        total = f"{about(est.total)} ({about(est.at_quietest)}–{fmt_seconds(est.total)})"
        how += (
            f"; the machine is {est.quiet:.1f}x slower now than at its quickest here (other work is running): priced "
            "at this speed, less if that work stops"
        )
    elif est.busy or cal.load >= BUSY_LOAD:  # honest about itself: a busy machine's timings move with the other work
        how += "; the machine is busy (other work shares its cores): the run may take less, or more"
    after = est.phase("general checks") + est.phase("downloads")  # the run is served (searchable) before these
    ready = f" (searchable after {about(est.total - after)})" if est.phase("general checks") > 0 else ""
    # "~" escaped: two on a line are strikethrough in the page's Markdown ("~4 s (~3 s–4 s)" showed "4 s (3 s–4 s)")
    md = f"{plan} · **estimated {total}**{ready}{retry_md(est)} on this {cal.where}: {shown}{reused} · _{how}_{extra}"
    return md.replace("~", "\\~")


def retry_md(est: Estimate) -> str:
    """What a pairs run adds when its general checks hold its blend down (a second training: mirror.job), beside the
    total that leaves it out; "" for a run that never trains twice."""
    if est.retry <= 0:
        return ""
    return (
        f", {about(est.retry)} more if the general checks hold its blend down (a second training, general text held "
        "near the base, where this server's time and CPU limits leave room for it; *Serve the first training* stops "
        "it)"
    )
