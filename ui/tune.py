"""Tab ① Tune's layout, and its strings and settings in: loading (file, paste, example, Hub), presets, the plan."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import gradio as gr

from explorer import MirrorApp, Session
from explorer.errors import user_error
from explorer.tune.inputs import ADVANCED, CHOICE_FIELDS, EXAMPLES, HUB_MODELS, MAX_SHORT_TEXT, MODES, label
from mirror.config import BUNDLED_MODEL, MirrorConfig
from mirror.data import AUTO
from ui import render
from ui.handlers import PRIVATE
from ui.numbers import Number
from ui.plan_md import NO_STRINGS, bases_md, held_text, plan_text
from ui.uploads import NamedFile, given_name


def tune_tab(allow_hub: bool) -> SimpleNamespace:
    """Tab ①: strings in (file, paste, example, a Hub dataset), base model and settings, launch and progress,
    downloads."""
    ui = SimpleNamespace()
    with gr.Row():
        ui.runs = gr.Dropdown(
            label="Your runs on this server (this browser remembers them; a run's link opens it anywhere)",
            choices=[],
            value=None,
            scale=4,
            elem_id="mx-runs",
        )
        ui.open_run = gr.Button("Open this run", scale=1, elem_id="mx-open-run")
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            gr.Markdown("### 1. Your strings", elem_classes="mx-step")
            with gr.Tabs(overflow_behavior="wrap"):  # a phone shows all four ways in, Examples too (not a "⋯")
                with gr.Tab("Upload a file"):
                    ui.upload = NamedFile(  # any file: the loader says why it refuses one (ui/uploads.py)
                        label="A .txt (one string per line), .csv / .tsv or .jsonl file",
                        type="filepath",
                        elem_id="mx-upload",
                    )
                    with gr.Row():
                        ui.column = gr.Dropdown(label="Text column", choices=[], visible=False, elem_id="mx-column")
                        ui.pair_column = gr.Dropdown(
                            label="Paired with",
                            info="another text column: each string's partner (a definition, a description) is "
                            "tuned as its positive, and some rows are held out to measure the gain",
                            choices=[],
                            visible=False,
                            elem_id="mx-pair-column",
                        )
                with gr.Tab("Paste"):
                    ui.pasted = gr.Textbox(
                        label="One string per line",
                        lines=8,
                        max_lines=16,
                        placeholder="cat\ndog\nkitten\n…",
                        elem_id="mx-paste",
                    )
                    ui.paste_btn = gr.Button("Use these strings", elem_id="mx-paste-btn")
                with gr.Tab("Examples"):
                    ui.example = gr.Radio(
                        [(text, key) for key, (text, _) in EXAMPLES.items()], value="small", label="Bundled examples"
                    )
                    ui.example_btn = gr.Button("Load example", elem_id="mx-example-btn")
                with gr.Tab("Hugging Face dataset", visible=allow_hub):
                    with gr.Row():
                        ui.hub_dataset = gr.Textbox(
                            label="Dataset id", placeholder="user/dataset", scale=3, max_length=MAX_SHORT_TEXT
                        )
                        ui.hub_column = gr.Textbox(
                            label="Text column", placeholder="text", scale=2, max_length=MAX_SHORT_TEXT
                        )
                        ui.hub_split = gr.Textbox(
                            label="Split (optional)", placeholder="train", scale=1, max_length=MAX_SHORT_TEXT
                        )
                    ui.hub_btn = gr.Button("Load from the Hub", elem_id="mx-hub-dataset-btn")
            ui.input_md = gr.Markdown(
                "Load some strings: upload a file, paste them, or pick an example.", elem_id="mx-input"
            )
        with gr.Column(scale=2):
            gr.Markdown("### 2. Base model and settings", elem_classes="mx-step")
            ui.model = gr.Dropdown(
                HUB_MODELS,
                value=BUNDLED_MODEL,
                allow_custom_value=True,
                label="Base model",
                info="Pick one or type a Hugging Face model id (hub models need internet access).",
                elem_id="mx-model",
            )
            with gr.Accordion("Which base model? Suggestions by need", open=False, elem_id="mx-bases-box") as box:
                ui.bases_md = gr.Markdown(
                    "", elem_id="mx-bases"
                )  # filled as it opens or a plan is shown (`wire_bases`)
            ui.bases_box = box
            ui.mode = gr.Radio(MODES, value="auto", label="Preset", elem_id="mx-mode")
            ui.fields = advanced_settings()
    gr.Markdown("### 3. Tune", elem_classes="mx-step")
    ui.estimate_md = gr.Markdown(NO_STRINGS, elem_id="mx-estimate")
    with gr.Row():
        # enabled only when they can act: Launch once strings are loaded, Cancel while a run goes on
        ui.launch = gr.Button(
            "Launch mirror tuning", variant="primary", scale=4, interactive=False, elem_id="mx-launch"
        )
        ui.cancel = gr.Button("Cancel", variant="secondary", scale=1, interactive=False, elem_id="mx-cancel")
        # shown while a pairs run trains a second time: stop it, serve the first training's blend (Trainer.serve_first)
        ui.first = gr.Button(
            "Serve the first training", variant="secondary", scale=2, visible=False, elem_id="mx-first"
        )
    ui.status_md = gr.HTML("", elem_id="mx-status")
    ui.loss_plot = gr.LinePlot(
        None,  # no empty frame: Vega-Lite warns of an "Infinite extent" on a chart without rows
        x="step",
        y="loss",
        color="series",
        x_axis_format="d",  # steps are whole numbers, also on a 6-step run
        y_title="loss ÷ log(2B−1)",
        title=render.LOSS_TITLE,
        caption=render.LOSS_CAPTION,
        visible=False,
        elem_id="mx-loss",
    )
    ui.result_md = gr.Markdown("", elem_id="mx-result")
    with gr.Row(elem_id="mx-downloads"):
        # links of our own (ui.handlers.download): no server path in them, the zips served from the run folder
        ui.model_file = gr.HTML("", visible=False, elem_id="mx-model-zip")
        ui.index_file = gr.HTML("", visible=False, elem_id="mx-index-zip")
    with gr.Accordion("Reuse a model you tuned here before", open=False):
        gr.Markdown("Load your strings in step 1, then upload the model .zip you downloaded: both encoders index them.")
        ui.saved_zip = gr.File(
            label="Tuned model .zip", file_types=[".zip"], type="filepath", height=150, elem_id="mx-saved-zip"
        )
        # room for the upload's progress (its phases, its place in the training queue): on an empty Markdown (no height)
        # Gradio's progress text was in the page but drawn nowhere
        ui.saved_md = gr.Markdown("", min_height=56, elem_id="mx-saved-md")
    return ui


def advanced_settings() -> dict[str, gr.components.Component]:
    """Every MirrorConfig field but mode and model, two to a row, showing the words preset's values."""
    with gr.Accordion("Advanced settings", open=False):
        gr.Markdown(
            "Every setting of the engine. *Pooling* auto keeps the model's own ([CLS] for plain BERT checkpoints); "
            "each string is contrasted with the other 2B−2 views of its batch; the second view of a string at least "
            "*Mask strings from* characters long has a span of *Mask span k* characters masked. Loading strings "
            "(preset *Auto*) sets the ones you have not changed to the detected preset's values (yours are kept); "
            "choosing a preset sets them all."
        )
        fields: dict[str, gr.components.Component] = {}
        preset, names = MirrorConfig.preset("words"), list(ADVANCED)
        for i in range(0, len(names), 2):
            with gr.Row():
                for name in names[i : i + 2]:
                    fields[name] = setting_component(name, getattr(preset, name))
    return fields


def setting_component(name: str, value: Any) -> gr.components.Component:
    """The input for one MirrorConfig field, by its kind."""
    kind, elem_id = ADVANCED[name], f"mx-set-{name}"
    if kind == "choice":
        return gr.Dropdown(list(CHOICE_FIELDS[name]), value=value, label=label(name), elem_id=elem_id)
    if kind == "bool":
        return gr.Checkbox(value=bool(value), label=label(name), elem_id=elem_id)
    if kind == "str":
        return gr.Textbox(value=value, label=label(name), elem_id=elem_id, max_length=MAX_SHORT_TEXT)
    # max length: no BERT-family model offered here takes more than 512 positions; the engine caps it further
    # at the chosen model's own limit (with a note), for API callers too.
    limit = {"maximum": 512, "minimum": 4} if name == "max_length" else {}
    precision = 0 if kind == "int" else None
    return Number(value=value, label=label(name), precision=precision, elem_id=elem_id, **limit)


def wire_inputs(app: MirrorApp, state: gr.State, ui: SimpleNamespace) -> None:
    """Loading strings (upload, column, paste, example) and the plan they give with the chosen settings."""
    fields, field_list = ui.fields, list(ui.fields.values())
    keep_fields = [gr.update() for _ in fields]
    # the settings this page's user changed by hand: a load keeps them (a preset chosen on purpose sets them all)
    ui.touched = gr.State([])

    def after_load(session: Session, load: Callable[[], dict], mode_value: str, model_value, touched, vals) -> tuple:
        """Outputs after a load: its summary, the preset's values for the settings the user did not change (mode
        Auto), the plan; or the error. Also what the load read: the file's column choices, the column of the strings
        and the partner column (or None). The settings shown are the ones the session holds (Planner.after_load)."""
        try:
            info = load()
        except Exception as exc:  # MirrorError, or a bug: a render.message, never a traceback
            error = user_error(exc)
            gr.Warning(render.toast_text(error))
            if not session.texts:
                failed = [render.message(error), *keep_fields, NO_STRINGS]
                return [*failed, gr.update(interactive=False), session], getattr(exc, "columns", []), None, None
            # the strings loaded before stay loaded (and armed), and the page says so plainly
            paired = f", each with its `{session.pairing.partner_column}`" if session.pairing is not None else ""
            kept = (
                f"Still loaded: **{len(session.texts):,} strings** from `{session.source}`{paired}; Launch tunes those."
            )
            can_launch = gr.update(interactive=app.registry.of(session) is None)
            shown = render.message(error) + "\n\n" + render.message(kept, "info")
            # (the columns of the refused file, when it has any; None: it has none, and the pickers keep the loaded
            # file's: a newcomer's bad file after a good one hid the good one's Text column and Paired with)
            return (
                [shown, *keep_fields, gr.update(), can_launch, session],
                getattr(exc, "columns", None) or None,
                None,
                None,
            )
        shown = dict(zip(fields, vals, strict=True))
        values, own = app.planner.after_load(session, mode_value, model_value, shown, touched)
        mine, kept = set(touched or []), [label(n).split(" (")[0] for n in own]
        updates = keep_fields
        if mode_value == "auto":
            updates = [gr.update() if n in mine else gr.update(value=values[n]) for n in fields]
        # the plan and its time come in a second step (`then_estimate`): the first estimate of a model times it on
        # this machine (seconds), and the strings' summary must not wait for that
        estimate = render.message("Planning the run and timing it on this machine…", "info")
        can_launch = gr.update(interactive=app.registry.of(session) is None)
        shown = render.load_md(info)
        if kept:
            shown += "\n\n" + render.message(
                f"Kept your own settings: {', '.join(kept)}; the rest follow the {info['mode']} preset.", "info"
            )
        info_cols = (info.get("columns", []), info.get("column"), info.get("pair_column"))
        return [shown, *updates, estimate, can_launch, session], *info_cols

    def pickers(cols: list[str], used: str | None, paired: str | None) -> list[Any]:
        """The two column pickers after a load: the strings' column (the one read: its note says why) and the
        partner column (the one read, or (none)), each offering the other columns."""
        column = [("(detect)", "")] + [(c, c) for c in cols]
        partner = [("(none)", "")] + [(c, c) for c in cols if c != used]
        return [
            gr.update(choices=column, value=used if used in cols else "", visible=bool(cols)),
            gr.update(choices=partner, value=paired if paired in cols else "", visible=len(cols) > 1),
        ]

    def on_upload(path, col, touched, mode_value, model_value, s, *vals):
        session = app.session(s)
        if not path:  # cleared (its ✕; or a moment before another file lands on it)
            hidden = gr.update(choices=[], value=None, visible=False)
            if not session.upload or not session.texts:  # a paste's or an example's strings: the page says them
                return [gr.update(), hidden, hidden, *keep_fields, gr.update(), gr.update(), session]
            # the file's strings stay loaded (a bad file after a good one keeps the good one: issue 28, and a file
            # is replaced by clearing it first), said where the page said the file was loaded (issue 60's newcomers:
            # the summary still named a file the box no longer showed, and Launch tuned it)
            # (the file last loaded: a refused one since, removed here, was never loaded: a review)
            paired = f", each with its `{session.pairing.partner_column}`," if session.pairing is not None else ""
            kept = (
                f"The file was removed from the box; the **{len(session.texts):,} strings** from `{session.upload}`"
                f"{paired} stay loaded and Launch tunes them, until you load others (a file, a paste, an example or "
                "the Hub)."
            )
            return [render.message(kept, "info"), hidden, hidden, *keep_fields, gr.update(), gr.update(), session]
        load = lambda: app.loader.load_file(session, path, None, given_name(path), AUTO)  # noqa: E731
        out, cols, used, paired = after_load(session, load, mode_value, model_value, touched, vals)
        shown = pickers(cols, used, paired) if cols is not None else [gr.update(), gr.update()]
        return [out[0], *shown, *out[1:]]

    def on_column(path, col, pair, touched, mode_value, model_value, s, *vals):
        """Another column of strings: its partner stays the one picked (detected again when it is that column)."""
        session = app.session(s)
        if not path:
            return [gr.update(), gr.update(), *keep_fields, gr.update(), gr.update(), session]
        pair = AUTO if pair and pair == col else pair
        load = lambda: app.loader.load_file(session, path, col or None, given_name(path), pair or "")  # noqa: E731
        out, cols, used, paired = after_load(session, load, mode_value, model_value, touched, vals)
        return [out[0], pickers(cols, used, paired)[1] if cols else gr.update(), *out[1:]]

    def on_pair(path, col, pair, touched, mode_value, model_value, s, *vals):
        """Another partner column, or (none): the same strings, paired with it."""
        session = app.session(s)
        if not path:
            return [gr.update(), *keep_fields, gr.update(), gr.update(), session]
        load = lambda: app.loader.load_file(session, path, col or None, given_name(path), pair or "")  # noqa: E731
        out, _, _, paired = after_load(session, load, mode_value, model_value, touched, vals)
        # refused (an empty column, the strings again): the picker shows the pairing still loaded, not the refused one
        kept = paired or (session.pairing.partner_column if session.pairing is not None else "")
        return [*out, gr.update(value=kept)]

    def elsewhere(session, load, mode_value, model_value, touched, vals) -> list:
        """A load from the paste, an example or the Hub; once it loaded, the upload box and its column pickers are
        emptied: they showed the file no longer loaded, and picking a column there loaded it again over the paste
        (a newcomer's pass). A refused load keeps them, as it keeps the strings."""
        out, cols, _, _ = after_load(session, load, mode_value, model_value, touched, vals)
        if cols is None:  # refused: what was loaded stays, and so does the box that loaded it
            return [*out, gr.update(), gr.update(), gr.update()]
        # the pickers hidden, their choices kept: emptying the box fires its `change` with their values, which
        # Gradio checks against their choices ("Value: definition is not in the list of choices: []")
        return [*out, gr.update(value=None), gr.update(visible=False), gr.update(visible=False)]

    def on_paste(text, touched, mode_value, model_value, s, *vals):
        session = app.session(s)
        load = lambda: app.loader.load_pasted(session, text)  # noqa: E731
        return elsewhere(session, load, mode_value, model_value, touched, vals)

    def on_example(key, touched, mode_value, model_value, s, *vals):
        session = app.session(s)
        load = lambda: app.loader.load_example(session, key)  # noqa: E731
        return elsewhere(session, load, mode_value, model_value, touched, vals)

    def on_hub(dataset, column, split, touched, mode_value, model_value, s, *vals):
        session = app.session(s)
        load = lambda: app.loader.load_hub_dataset(session, dataset, column, split)  # noqa: E731
        return elsewhere(session, load, mode_value, model_value, touched, vals)

    def on_mode(mode_value, model_value, s, *vals):
        session = app.session(s)
        values = app.planner.preset(session, mode_value, model_value)  # held by the session, as shown
        updates = [gr.update(value=values[n]) for n in fields]
        # a preset chosen on purpose: every setting is the preset's again
        return [*updates, plan_text(app, session, model_value, mode_value, values), session, []]

    def on_settings(mode_value, model_value, s, *vals):
        """A setting changed by hand: the settings shown, held, and their plan."""
        session = app.session(s)
        app.planner.hold(session, model_value, mode_value, dict(zip(fields, vals, strict=True)))
        return estimate_only(app, ui, mode_value, model_value, session, *vals)

    def on_model(mode_value, model_value, s, *vals):
        """Another base model (picked, or shown by a reloaded page): held with the session's settings, and planned
        (the page's text left alone without strings: a reattached page's model set during its run)."""
        session = app.session(s)
        app.planner.hold_model(session, model_value, mode_value, dict(zip(fields, vals, strict=True)))
        return estimate_only(app, ui, mode_value, model_value, session, *vals)

    inputs = [ui.mode, ui.model, state, *field_list]
    loaded = [ui.input_md, *field_list, ui.estimate_md, ui.launch, state]
    # (estimate_only leaves the text as it is when the session has no strings: a file input fires `change` as the
    # file is cleared and again as it lands, and the first one's plan must not land after the second's)
    plan = lambda *a: estimate_only(app, ui, *a)  # noqa: E731
    estimated = {"fn": plan, "inputs": inputs, "outputs": [ui.estimate_md, state], **PRIVATE}
    upload_out = [ui.input_md, ui.column, ui.pair_column, *loaded[1:]]
    mine = [ui.touched, *inputs]  # a load's inputs: the settings changed by hand, then the plan's
    ui.upload.change(on_upload, [ui.upload, ui.column, *mine], upload_out, **PRIVATE).then(**estimated)
    columns_in = [ui.upload, ui.column, ui.pair_column, *mine]
    column_out = [ui.input_md, ui.pair_column, *loaded[1:]]
    ui.column.select(on_column, columns_in, column_out, **PRIVATE).then(**estimated)
    # `select`, not `input`: a dropdown's `input` fired twice for one pick (two loads, two toasts)
    ui.pair_column.select(on_pair, columns_in, [*loaded, ui.pair_column], **PRIVATE).then(**estimated)
    other = [*loaded, ui.upload, ui.column, ui.pair_column]  # a load from elsewhere empties the upload box
    ui.paste_btn.click(on_paste, [ui.pasted, *mine], other, **PRIVATE).then(**estimated)
    ui.example_btn.click(on_example, [ui.example, *mine], other, **PRIVATE).then(**estimated)
    hub_in = [ui.hub_dataset, ui.hub_column, ui.hub_split, *mine]
    ui.hub_btn.click(on_hub, hub_in, other, **PRIVATE).then(**estimated)
    ui.mode.input(on_mode, inputs, [*field_list, ui.estimate_md, state, ui.touched], **PRIVATE)
    for name, field in fields.items():  # a setting changed by hand is the user's: loads keep it

        def touch(touched, name=name):
            return sorted({*(touched or []), name})

        field.input(touch, [ui.touched], [ui.touched], queue=False, **PRIVATE)
    # "always_last": a setting changed while the plan of the one before is still being made is planned after it;
    # Gradio's default ("once") dropped it (batch 16 then max_steps 3 typed quickly: the plan kept 8 steps, a fresh
    # clone's browser test failed at random on a loaded machine)
    planned = {
        "inputs": inputs,
        "outputs": [ui.estimate_md, state],
        "show_progress": "hidden",
        "trigger_mode": "always_last",
        **PRIVATE,
    }
    ui.model.change(on_model, **planned)
    gr.on([f.input for f in field_list], on_settings, **planned)


def wire_bases(app: MirrorApp, state: gr.State, ui: SimpleNamespace) -> None:
    """The suggested bases: their sizes when the box is opened, their costs here whenever the plan shown changes
    (strings, settings). Not as the UI is built nor as a page loads: reading model configs imports torch and
    transformers (seconds on a loaded machine, holding a worker the page's first upload waits for)."""
    fields = list(ui.fields)

    def on_plan(mode_value, s, *vals):
        if s is None:  # no session yet: the sizes only
            return bases_md(app.planner.bases(None, mode_value, {}))
        return bases_md(app.planner.bases(app.session(s), mode_value, dict(zip(fields, vals, strict=True))))

    inputs = [ui.mode, state, *ui.fields.values()]
    ui.bases_box.expand(on_plan, inputs, ui.bases_md, show_progress="minimal", **PRIVATE)
    ui.estimate_md.change(on_plan, inputs, ui.bases_md, show_progress="hidden", **PRIVATE)


def estimate_only(
    app: MirrorApp, ui: SimpleNamespace, mode_value: str, model_value: str, s: Session | None, *vals: Any
) -> tuple:
    """The Tune tab's plan and time estimate for the session's strings and the settings it holds, which the page
    shows (the values sent where it holds none); unchanged when the session has no strings: the page's own text
    stays."""
    session = app.session(s)
    if not session.texts:  # nothing to plan; a fresh session is not sent back over one an upload just made
        return gr.update(), session if s is not None else gr.update()
    shown = dict(zip(ui.fields, vals, strict=True))
    return held_text(app, session, model_value, mode_value, shown), session
