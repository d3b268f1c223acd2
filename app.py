"""Mirror Explorer web app: tune an encoder on your strings, then search, evaluate and map what changed.

`python app.py` serves on 127.0.0.1:7860 (--host/--port, or GRADIO_SERVER_NAME/GRADIO_SERVER_PORT); limits come
from MIRROR_* variables (explorer/settings.py). The UI only: one builder per tab declares components, one wiring
function per tab connects them to `explorer.MirrorApp` (plain values in and out). Progress is born as typed
events in explorer/ and drawn here (`TrainView`, `RunView`). Importing this loads neither torch nor faiss.
"""

from __future__ import annotations

import argparse
import html
import itertools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import gradio as gr

from explorer import MirrorApp, Session, Settings, render
from explorer.events import Cancelled, Done, Event, Failed, Note, Phase, Step
from explorer.runs.sessions import RunInfo
from explorer.runs.store import remember
from explorer.share.uploads import UploadQuota, display_name
from explorer.tune.inputs import ADVANCED, CHOICE_FIELDS, EXAMPLES, HUB_MODELS, MODES, label
from mirror.config import BUNDLED_MODEL, MirrorConfig
from mirror.errors import MirrorError
from ui.api import api_components, wire_api
from ui.evaluate import evaluate_tab, wire_evaluate
from ui.explore import explore_outputs, explore_panels, explore_tab, wire_explore
from ui.handlers import ENCODE_QUEUE, PRIVATE
from ui.numbers import Number
from ui.search import search_tab, wire_search
from ui.uploads import NamedFile, given_name

__all__ = ["MirrorApp", "Settings", "Session", "build_demo", "main"]

CSS = """
#mx-header h1 {margin-bottom: 0}
.mx-step {font-weight: 600}
.mx-results table td, .mx-results table th {border: none; border-bottom: 1px solid var(--border-color-primary)}
"""

INTRO = """# Mirror Explorer
Mirror-fine-tune a sentence encoder on **your own strings** — no labels needed (MirrorBERT) — then see what changed:
**① Tune** → **② Search** your strings with the tuned and the base encoder side by side → **③ Evaluate** on word and
sentence similarity benchmarks → **④ Explore** what changed: linked maps, the strings that moved, general checks. Runs on the bundled offline model by default."""


def setting_component(name: str, value: Any) -> gr.components.Component:
    """The input for one MirrorConfig field, by its kind."""
    kind, elem_id = ADVANCED[name], f"mx-set-{name}"
    if kind == "choice":
        return gr.Dropdown(list(CHOICE_FIELDS[name]), value=value, label=label(name), elem_id=elem_id)
    if kind == "bool":
        return gr.Checkbox(value=bool(value), label=label(name), elem_id=elem_id)
    if kind == "str":
        return gr.Textbox(value=value, label=label(name), elem_id=elem_id)
    # max length: no BERT-family model offered here takes more than 512 positions; the engine caps it further
    # at the chosen model's own limit (with a note), for API callers too.
    limit = {"maximum": 512, "minimum": 4} if name == "max_length" else {}
    precision = 0 if kind == "int" else None
    return Number(value=value, label=label(name), precision=precision, elem_id=elem_id, **limit)


# ----------------------------------------------------------------------------------------------- layout


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
            with gr.Tabs():
                with gr.Tab("Upload a file"):
                    ui.upload = NamedFile(  # any file: the loader says why it refuses one (ui/uploads.py)
                        label="A .txt (one string per line), .csv / .tsv or .jsonl file",
                        type="filepath",
                        elem_id="mx-upload",
                    )
                    ui.column = gr.Dropdown(label="Text column", choices=[], visible=False, elem_id="mx-column")
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
                        ui.hub_dataset = gr.Textbox(label="Dataset id", placeholder="user/dataset", scale=3)
                        ui.hub_column = gr.Textbox(label="Text column", placeholder="text", scale=2)
                        ui.hub_split = gr.Textbox(label="Split (optional)", placeholder="train", scale=1)
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
            ui.mode = gr.Radio(MODES, value="auto", label="Preset")
            ui.fields = advanced_settings()
    gr.Markdown("### 3. Tune", elem_classes="mx-step")
    ui.estimate_md = gr.Markdown("Load some strings to see the plan and a time estimate.", elem_id="mx-estimate")
    with gr.Row():
        # enabled only when they can act: Launch once strings are loaded, Cancel while a run goes on
        ui.launch = gr.Button(
            "Launch mirror tuning", variant="primary", scale=4, interactive=False, elem_id="mx-launch"
        )
        ui.cancel = gr.Button("Cancel", variant="secondary", scale=1, interactive=False, elem_id="mx-cancel")
    ui.status_md = gr.HTML("", elem_id="mx-status")
    ui.loss_plot = gr.LinePlot(
        None,  # no empty frame: Vega-Lite warns of an "Infinite extent" on a chart without rows
        x="step",
        y="loss",
        color="series",
        x_axis_format="d",  # steps are whole numbers, also on a 6-step run
        y_title="loss ÷ log(2B−1)",
        title=render.LOSS_TITLE,
        height=260,
        visible=False,
        elem_id="mx-loss",
    )
    ui.result_md = gr.Markdown("", elem_id="mx-result")
    with gr.Row():
        ui.model_file = gr.File(
            label="Tuned model (.zip of a sentence-transformers folder)",
            interactive=False,
            visible=False,
            elem_id="mx-model-zip",
        )
        ui.index_file = gr.File(
            label="Search index of your strings (.zip)", interactive=False, visible=False, elem_id="mx-index-zip"
        )
    with gr.Accordion("Reuse a model you tuned here before", open=False):
        gr.Markdown("Load your strings in step 1, then upload the model .zip you downloaded: both encoders index them.")
        ui.saved_zip = gr.File(
            label="Tuned model .zip", file_types=[".zip"], type="filepath", height=150, elem_id="mx-saved-zip"
        )
        ui.saved_md = gr.Markdown("")
    return ui


def advanced_settings() -> dict[str, gr.components.Component]:
    """Every MirrorConfig field but mode and model, two to a row, showing the words preset's values."""
    with gr.Accordion("Advanced settings", open=False):
        gr.Markdown(
            "Every setting of the engine. *Pooling* auto keeps the model's own ([CLS] for plain BERT checkpoints); "
            "each string is contrasted with the other 2B−2 views of its batch; the second view of a string at least "
            "*Mask strings from* characters long has a span of *Mask span k* characters masked. Loading strings "
            "(preset *Auto*) or changing the preset resets these to the preset's values."
        )
        fields: dict[str, gr.components.Component] = {}
        preset, names = MirrorConfig.preset("words"), list(ADVANCED)
        for i in range(0, len(names), 2):
            with gr.Row():
                for name in names[i : i + 2]:
                    fields[name] = setting_component(name, getattr(preset, name))
    return fields


def build_demo(app: MirrorApp | None = None) -> gr.Blocks:
    """The four-tab UI plus the /train, /search and /cancel API endpoints; `app` defaults to one from the env."""
    app = app or MirrorApp()
    # the Hub parts (a dataset as input, the push) only where they can work: allowed, and this server is online
    hub = app.settings.allow_hub and os.environ.get("HF_HUB_OFFLINE", "").strip().lower() not in ("1", "true", "yes")
    with gr.Blocks(title="Mirror Explorer", delete_cache=(3600, int(app.settings.session_ttl))) as demo:
        # A plain function, not the bound method: Gradio deep-copies the config (on every /config request), and a
        # bound method's copy walks into the app and its loaded models (0.7 s and +100 MB per request).
        state = gr.State(None, time_to_live=app.settings.session_ttl, delete_callback=lambda s: app.close_session(s))
        # this browser's runs (ids) and the run it has going, kept across reloads and tabs (localStorage)
        browser = gr.BrowserState({"runs": [], "active": None}, storage_key="mirror-explorer", secret=app.secret)
        gr.Markdown(INTRO, elem_id="mx-header")
        with gr.Tabs():
            with gr.Tab("① Tune", id="tune"):
                tune = tune_tab(hub)
            with gr.Tab("② Search", id="search"):
                search = search_tab()
            with gr.Tab("③ Evaluate", id="evaluate"):
                evaluate = evaluate_tab()
            with gr.Tab("④ Explore", id="explore"):
                explore = explore_tab(app.settings.max_map_points, hub)
        api = api_components()
        wire_inputs(app, state, tune)
        view = RunView(app, state, browser, tune, search, evaluate, explore)
        wire_training(app, view)
        wire_saved_zip(app, view)
        wire_search(app, state, search, tune.model)
        wire_evaluate(app, state, evaluate)
        wire_explore(app, state, explore, search)
        wire_blend(app, view, explore)
        wire_api(app, state, api)
        wire_runs(app, view, demo)
    demo.queue(default_concurrency_limit=2)
    return demo


# ----------------------------------------------------------------------------------------------- wiring


def wire_inputs(app: MirrorApp, state: gr.State, ui: SimpleNamespace) -> None:
    """Loading strings (upload, column, paste, example) and the plan they give with the chosen settings."""
    fields, field_list = ui.fields, list(ui.fields.values())
    keep_fields = [gr.update() for _ in fields]

    def preset_values(resolved: str) -> dict[str, Any]:
        p = MirrorConfig.preset(resolved)
        return {name: getattr(p, name) for name in fields}

    def after_load(session: Session, load: Callable[[], dict], mode_value: str, model_value: str, vals) -> list:
        """Outputs after a load: its summary, the preset's values (mode Auto), the plan; or the error."""
        try:
            info = load()
        except Exception as exc:  # MirrorError, or a bug: a render.message, never a traceback
            error = render.user_error(exc)
            gr.Warning(render.toast_text(error))
            if not session.texts:
                failed = [render.message(error), *keep_fields, "Load some strings to see the plan and a time estimate."]
                return [*failed, gr.update(interactive=False), session], getattr(exc, "columns", [])
            # the strings loaded before stay loaded (and armed), and the page says so plainly
            kept = f"Still loaded: **{len(session.texts):,} strings** from `{session.source}`; Launch tunes those."
            can_launch = gr.update(interactive=session.active is None or session.active.finished)
            shown = render.message(error) + "\n\n" + render.message(kept, "info")
            return [shown, *keep_fields, gr.update(), can_launch, session], getattr(exc, "columns", [])
        overrides, updates = dict(zip(fields, vals, strict=True)), keep_fields
        if mode_value == "auto":
            overrides = preset_values(info["mode"])
            updates = [gr.update(value=v) for v in overrides.values()]
        # the plan and its time come in a second step (`then_estimate`): the first estimate of a model times it on
        # this machine (seconds), and the strings' summary must not wait for that
        estimate = render.message("Planning the run and timing it on this machine…", "info")
        can_launch = gr.update(interactive=session.active is None or session.active.finished)
        return [render.load_md(info), *updates, estimate, can_launch, session], info.get("columns", [])

    def on_upload(path, col, mode_value, model_value, s, *vals):
        session = app.session(s)
        if not path:
            hidden = gr.update(choices=[], value=None, visible=False)
            return [gr.update(), hidden, *keep_fields, gr.update(), gr.update(), session]
        out, cols = after_load(
            session, lambda: app.loader.load_file(session, path, None, given_name(path)), mode_value, model_value, vals
        )
        column = gr.update(choices=[("(detect)", "")] + [(c, c) for c in cols], value="", visible=bool(cols))
        return [out[0], column, *out[1:]]

    def on_column(path, col, mode_value, model_value, s, *vals):
        session = app.session(s)
        if not path:
            return [gr.update(), *keep_fields, gr.update(), gr.update(), session]
        load = lambda: app.loader.load_file(session, path, col or None, given_name(path))  # noqa: E731
        return after_load(session, load, mode_value, model_value, vals)[0]

    def on_paste(text, mode_value, model_value, s, *vals):
        session = app.session(s)
        return after_load(session, lambda: app.loader.load_pasted(session, text), mode_value, model_value, vals)[0]

    def on_example(key, mode_value, model_value, s, *vals):
        session = app.session(s)
        return after_load(session, lambda: app.loader.load_example(session, key), mode_value, model_value, vals)[0]

    def on_hub(dataset, column, split, mode_value, model_value, s, *vals):
        session = app.session(s)
        load = lambda: app.loader.load_hub_dataset(session, dataset, column, split)  # noqa: E731
        return after_load(session, load, mode_value, model_value, vals)[0]

    def on_mode(mode_value, model_value, s, *vals):
        session = app.session(s)
        resolved = mode_value if mode_value != "auto" else (session.detected_mode if session.texts else "words")
        values = preset_values(resolved)
        updates = [gr.update(value=v) for v in values.values()]
        return [*updates, app.planner.estimate(session, model_value, mode_value, values), session]

    def on_settings(mode_value, model_value, s, *vals):
        session = app.session(s)
        return app.planner.estimate(session, model_value, mode_value, dict(zip(fields, vals, strict=True))), session

    inputs = [ui.mode, ui.model, state, *field_list]
    loaded = [ui.input_md, *field_list, ui.estimate_md, ui.launch, state]
    # (estimate_only leaves the text as it is when the session has no strings: a file input fires `change` as the
    # file is cleared and again as it lands, and the first one's plan must not land after the second's)
    plan = lambda *a: estimate_only(app, ui, *a)  # noqa: E731
    estimated = {"fn": plan, "inputs": inputs, "outputs": [ui.estimate_md, state], **PRIVATE}
    upload_out = [ui.input_md, ui.column, *loaded[1:]]
    ui.upload.change(on_upload, [ui.upload, ui.column, *inputs], upload_out, **PRIVATE).then(**estimated)
    ui.column.input(on_column, [ui.upload, ui.column, *inputs], loaded, **PRIVATE).then(**estimated)
    ui.paste_btn.click(on_paste, [ui.pasted, *inputs], loaded, **PRIVATE).then(**estimated)
    ui.example_btn.click(on_example, [ui.example, *inputs], loaded, **PRIVATE).then(**estimated)
    hub_in = [ui.hub_dataset, ui.hub_column, ui.hub_split, *inputs]
    ui.hub_btn.click(on_hub, hub_in, loaded, **PRIVATE).then(**estimated)
    ui.mode.input(on_mode, inputs, [*field_list, ui.estimate_md, state], **PRIVATE)
    changes = [ui.model.change, *[f.input for f in field_list]]
    gr.on(changes, on_settings, inputs, [ui.estimate_md, state], show_progress="hidden", **PRIVATE)


class TrainView:
    """Draws one run's events on the Tune tab: status line or progress bar, live loss curve."""

    def __init__(self, progress: gr.Progress):
        self.progress = progress
        self.losses: list[float] = []
        self.batches: list[int] = []  # each step's strings: the curve divides its loss by log(2B-1)
        self.status = render.status_box("Starting…")
        self.last_drawn = 0.0

    def take(self, ev: Event) -> None:
        if isinstance(ev, Phase):
            if ev.total:
                self.progress((ev.done, ev.total), desc=ev.text, unit="strings")
                right = f"{ev.done:,} / {ev.total:,} strings"
                self.status = render.progress_bar(f"<b>{html.escape(ev.text)}…</b>", ev.done, ev.total, right)
            else:
                self.progress(None, desc=ev.text)
                self.status = render.status_box(f"**{ev.text}…**")
        elif isinstance(ev, Note):
            gr.Warning(render.toast_text(ev.text))
        elif isinstance(ev, Step):
            self.losses.append(ev.loss)
            self.batches.append(ev.batch)
            eta = f"ETA {render.fmt_seconds(ev.eta)}" if ev.eta is not None else "estimating time left…"
            text = f"<b>Training</b> · step {ev.step:,} / {ev.total:,} · loss {ev.loss:.4f}"
            self.status = render.progress_bar(text, ev.step, ev.total, eta)
            self.progress((ev.step, ev.total), desc=f"Training · loss {ev.loss:.3f} · {eta}", unit="steps")

    def due(self) -> bool:
        """At most two redraws a second."""
        now = time.monotonic()
        if now - self.last_drawn < 0.5:
            return False
        self.last_drawn = now
        return True

    @staticmethod
    def plot(values: Sequence[float], batches: Sequence[int] | None = None) -> Any:
        """The loss curve (render.loss_frame); hidden until it has two points, and its value left alone until then:
        Gradio's plot hands a new value, rows or none (None), to the chart already drawn, and a chart without rows
        (a blend's redraws, a new run's first step) made Vega-Lite warn "Infinite extent for field" in the console."""
        if len(values) < 2:
            return gr.update(visible=False)
        return gr.update(value=render.loss_frame(values, batches), visible=True)


class RunView:
    """What the Tune tab shows of a run, shared by Launch, a reloaded page and the run list: its events drawn as
    they come, then every panel switched to it."""

    def __init__(self, app: MirrorApp, state, browser, ui: SimpleNamespace, search, evaluate, explore):
        self.app, self.state, self.browser, self.ui = app, state, browser, ui
        self.search, self.evaluate, self.explore = search, evaluate, explore
        self.outputs = [ui.status_md, ui.loss_plot, ui.result_md, ui.model_file, ui.index_file, search.served_md]
        self.outputs += [search.results]
        self.outputs += [evaluate.gold, ui.launch, ui.cancel, ui.runs, browser, state]
        self.outputs += [explore.caption, explore.forget_md, explore.alpha, explore.map, explore.map_md]
        self.outputs += [ui.input_md, ui.estimate_md]
        self.outputs += [c for c in explore_outputs(explore) if c not in self.outputs]

    def run_list(self, memory: dict, value: str | None = None) -> Any:
        choices = [(r["label"], r["id"]) for r in self.app.saved.list_runs(memory["runs"])]
        return gr.update(choices=choices, value=value if any(v == value for _, v in choices) else None)

    def served(self, run: RunInfo, session: Session, memory: dict | None) -> dict:
        """Every panel switched to `run`: summary, downloads, loss curve, search header, run list."""
        ui, words, memory = self.ui, run.stats.get("mode") != "sentences", remember(memory, run.folder.name)
        return {
            ui.result_md: render.run_md(run),
            ui.model_file: gr.update(value=str(run.model_zip), visible=True),
            ui.index_file: gr.update(value=str(run.index_zip), visible=True),
            ui.loss_plot: TrainView.plot(run.losses, run.stats.get("batch_sizes")),
            self.search.served_md: render.served_md(session),
            # the last search's hits were the previous run's: gone, with what to do for this run's
            self.search.results: render.status_box("A new run is served: press **Search** to see its neighbours."),
            self.evaluate.gold: ["SimLex-999", "WordSim-353"] if words else ["STS-B dev"],
            **explore_panels(self.explore, run),
            ui.runs: self.run_list(memory, run.folder.name),
            self.browser: memory,
            self.state: session,
        }

    def draw(self, events: Iterator[Event], session: Session, memory: dict, progress) -> Iterator[dict]:
        """A run's events drawn as they come (at most twice a second), then its end."""
        ui, view = self.ui, TrainView(progress)
        idle = {ui.launch: gr.update(interactive=bool(session.texts)), ui.cancel: gr.update(interactive=False)}
        for ev in events:
            if isinstance(ev, Failed | Cancelled):
                gr.Warning(render.toast_text(ev.text))
                kept = " Your previous model and index are still served." if session.run else ""
                failed = isinstance(ev, Failed)
                box = render.status_box(ev.text, "error") if failed else render.status_box(ev.text + kept, "warning")
                curve = view.plot(view.losses, view.batches) if view.losses else view.plot(getattr(ev, "losses", []))
                yield {
                    ui.status_md: box,
                    ui.loss_plot: curve,
                    **idle,
                    self.browser: remember(memory),
                    self.state: session,
                }
                return
            if isinstance(ev, Done):
                box = render.status_box(render.done_status(ev.run), "ok")
                shown = {ui.status_md: box, **idle, **self.served(ev.run, session, memory)}
                restored = self.app.loader.restore_texts(session)  # a page reloaded during the run had no strings
                if restored is not None:
                    planning = render.message("Planning the run and timing it on this machine…", "info")
                    shown.update({ui.input_md: render.load_md(restored), ui.estimate_md: planning})
                    shown[ui.launch] = gr.update(interactive=True)
                yield shown
                return
            view.take(ev)
            if view.due():
                yield {ui.status_md: view.status, ui.loss_plot: view.plot(view.losses, view.batches)}


def wire_training(app: MirrorApp, view: RunView) -> None:
    """Launch (queued, one training slot) and Cancel."""
    ui, state, browser = view.ui, view.state, view.browser
    train_queue = {"concurrency_id": "train", "concurrency_limit": app.settings.train_concurrency}

    def on_request(memory, s):
        session = app.session(s)
        handle = app.trainer.request_run(session)
        busy = {ui.launch: gr.update(interactive=False), ui.cancel: gr.update(interactive=True)}
        shown = render.status_box("Waiting for a free training slot…")
        return {ui.status_md: shown, **busy, browser: remember(memory, active=handle.id), state: session}

    def on_train(data: dict, progress=gr.Progress()):  # noqa: B008 - gradio's progress idiom
        """Stream the run to the page: progress bar, live loss curve; then summary and downloads."""
        session = app.session(data[state])
        overrides = {name: data[comp] for name, comp in ui.fields.items()}
        events = app.trainer.train(session, data[ui.model], data[ui.mode], overrides)
        yield from view.draw(events, session, data[browser], progress)

    def on_cancel(s):
        session = app.session(s)
        return render.status_box(app.trainer.cancel(session)), session

    train_inputs = {ui.mode, ui.model, state, browser, *ui.fields.values()}
    request_outputs = [ui.status_md, ui.launch, ui.cancel, browser, state]
    ui.launch.click(on_request, [browser, state], request_outputs, queue=False, **PRIVATE).then(
        on_train, train_inputs, view.outputs, show_progress="hidden", **train_queue, **PRIVATE
    )
    ui.cancel.click(on_cancel, [state], [ui.status_md, state], queue=False, **PRIVATE)


def wire_runs(app: MirrorApp, view: RunView, demo: gr.Blocks) -> None:
    """The browser's runs: listed on page load, opened from the list or a link (?run=<id>); a page reloaded
    during its run reattaches to it."""
    ui, state, browser = view.ui, view.state, view.browser

    def on_load(memory, s, request: gr.Request, progress=gr.Progress()):  # noqa: B008
        session, memory = app.session(s), remember(memory, active=(memory or {}).get("active"))
        asked = (request.query_params.get("run") if request else None) or None
        active = memory["active"]
        if active and active in app.in_progress:
            running = {ui.launch: gr.update(interactive=False), ui.cancel: gr.update(interactive=True)}
            shown = {ui.status_md: render.status_box("Reattached to your run…"), ui.runs: view.run_list(memory)}
            yield {**shown, **running, browser: memory, state: session}  # the state: Cancel reaches the run
            yield from view.draw(app.trainer.follow(active, session=session), session, memory, progress)
            return
        # the run asked for by a link, else the one that was going, else the one this page served before a reload
        run_id = asked or active or memory.get("served")
        shown = try_open(session, run_id, memory) if run_id else None
        if shown is not None:
            yield shown
            return
        # a page with no state yet gets none from here: an upload made during this load has its own session by
        # now, and a fresh empty one sent back would replace it (the strings shown, Launch finding none)
        idle = {ui.runs: view.run_list(memory), **({state: session} if s is not None else {})}
        if run_id:  # it could not be opened (expired, removed): say so, and serve nothing
            memory = {**memory, "active": None, "served": None}
            why = f"Nothing is served: your last run ({run_id[:8]}…) is no longer on this server (runs unused for a "
            why += "while are removed). Tune a new one, or open another of your runs above."
            idle[ui.status_md] = render.status_box(why, "warning")
        yield {**idle, browser: memory}

    def try_open(session: Session, run_id: str | None, memory: dict) -> dict | None:
        try:
            if not run_id:
                return None
            shown = view.served(app.saved.open_run(session, run_id), session, memory)
            restored = app.loader.restore_texts(session)  # a reloaded page has no strings: the run's own come back
            if restored is not None:  # (the plan and its time follow: `estimated` below)
                planning = render.message("Planning the run and timing it on this machine…", "info")
                shown.update({ui.input_md: render.load_md(restored), ui.estimate_md: planning})
                shown[ui.launch] = gr.update(interactive=True)
            return shown
        except MirrorError as exc:
            gr.Warning(render.toast_text(str(exc)))
            return None

    def on_open(run_id, memory, s):
        session = app.session(s)
        if not run_id:
            gr.Warning("Pick one of your runs in the list first, then press Open this run.")
            return {state: session}
        return try_open(session, run_id, remember(memory)) or {state: session}

    # after a run is opened, the plan for its strings (loaded again when the page had none)
    plan_in = [ui.mode, ui.model, state, *ui.fields.values()]
    estimated = {"fn": lambda *a: estimate_only(app, ui, *a), "inputs": plan_in, "outputs": [ui.estimate_md, state]}
    opened = {"show_progress_on": [ui.result_md], **PRIVATE}
    ui.open_run.click(on_open, [ui.runs, browser, state], view.outputs, **opened).then(**estimated, **PRIVATE)
    # the browser's stored value reaches the page a moment after it loads: read it once it is there
    wait = "async () => { await new Promise((done) => setTimeout(done, 400)); }"
    load = {"show_progress": "hidden", **PRIVATE}
    demo.load(None, js=wait, **PRIVATE).then(on_load, [browser, state], view.outputs, **load).then(
        **estimated, show_progress="hidden", **PRIVATE
    )


def estimate_only(app: MirrorApp, ui: SimpleNamespace, mode_value, model_value, s, *vals) -> tuple:
    """The Tune tab's plan and time estimate for the session's strings and the settings shown (unchanged when the
    session has no strings: the page's own text stays)."""
    session = app.session(s)
    if not session.texts:  # nothing to plan; a fresh session is not sent back over one an upload just made
        return gr.update(), session if s is not None else gr.update()
    return app.planner.estimate(session, model_value, mode_value, dict(zip(ui.fields, vals, strict=True))), session


def wire_saved_zip(app: MirrorApp, view: RunView) -> None:
    """Serving a model zip saved from this app (tuned here before): it becomes a run like any other."""
    ui, state, browser = view.ui, view.state, view.browser

    def on_saved_zip(path, memory, s, progress=gr.Progress()):  # noqa: B008
        session = app.session(s)
        for ev in app.saved.use_saved_model(session, path) if path else ():
            if isinstance(ev, Phase):
                progress(None, desc=ev.text)
            elif isinstance(ev, Failed):
                gr.Warning(render.toast_text(ev.text))
                return {ui.saved_md: render.message(ev.text), state: session}
            elif isinstance(ev, Done):
                shown = render.message(f"Serving `{display_name(path)}`.", "ok")
                took = render.status_box(render.done_status(ev.run), "ok")  # not the last run's "Tuned and indexed"
                return {ui.saved_md: shown, ui.status_md: took, **view.served(ev.run, session, memory)}
        return {state: session}

    queue = {"concurrency_id": "train", "concurrency_limit": app.settings.train_concurrency}
    ui.saved_zip.upload(on_saved_zip, [ui.saved_zip, browser, state], [ui.saved_md, *view.outputs], **queue, **PRIVATE)


def wire_blend(app: MirrorApp, view: RunView, ui: SimpleNamespace) -> None:
    """Explore's Blend: a blend of the served run with its base, served as a new run like a finished training."""

    def on_blend(alpha, memory, s, progress=gr.Progress()):  # noqa: B008
        session, ended = app.session(s), []
        started = iter(app.saved.blend_run(session, alpha))
        first = next(started, None)
        if isinstance(first, Failed):  # refused before it began (nothing served, a bad α): said here, not in tab ①
            gr.Warning(render.toast_text(first.text))
            yield {ui.blend_md: render.message(first.text, "error")}
            return
        events = (ended.append(ev) or ev for ev in itertools.chain([first] if first else [], started))
        yield from view.draw(events, session, memory, progress)
        if ended and isinstance(ended[-1], Done):
            yield {
                ui.blend_md: render.message(render.blend_text(ended[-1].run), "ok"),
                ui.forget_md: render.forgetting_md(ended[-1].run),
            }
        elif ended and isinstance(ended[-1], Failed | Cancelled):
            yield {ui.blend_md: render.message(ended[-1].text, "error")}

    outputs = [*view.outputs, ui.blend_md, ui.forget_md]
    # the progress on the blend's own line: the Explore tab is not greyed out while it works
    kw = {"show_progress_on": [ui.blend_md], **ENCODE_QUEUE, **PRIVATE}
    ui.blend_btn.click(on_blend, [ui.alpha, view.browser, view.state], outputs, **kw)

    def on_remedy(memory, s, progress=gr.Progress()):  # noqa: B008
        yield from on_blend(render.SUGGESTED_ALPHA, memory, s, progress)  # the real blend, at the suggested α

    ui.remedy_btn.click(on_remedy, [view.browser, view.state], outputs, **kw)


# ----------------------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Serve the Mirror Explorer web app.")
    host, port = os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"), os.environ.get("GRADIO_SERVER_PORT", "7860")
    parser.add_argument("--host", default=host, help="default: $GRADIO_SERVER_NAME or 127.0.0.1")
    parser.add_argument("--port", type=int, default=int(port), help="default: $GRADIO_SERVER_PORT or 7860")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    import os

    from starlette.middleware import Middleware

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        app = MirrorApp(Settings.from_env())
    except MirrorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    app.sweep(force=True)
    demo = build_demo(app)
    # Warm the bundled model in the background: the page is served at once, the first run starts sooner.
    threading.Thread(target=app.warm_up, name="mirror-warm-up", daemon=True).start()
    # Gradio has one upload size limit for every input; it must admit a model zip, so what one client may send
    # in an hour is bounded separately (UploadQuota). Gradio serves the files handlers return, nothing else of
    # the work folder (no allowed_paths).
    limit = max(app.settings.max_upload_bytes, app.settings.max_model_bytes)
    quota = Middleware(
        UploadQuota,
        quota=app.settings.upload_quota_bytes,
        address_quota=app.settings.upload_address_bytes,
        total_quota=app.settings.upload_disk_bytes,
        trusted=app.settings.trusted_proxies,
        max_body=limit + 2**20,  # the file and its multipart framing
    )
    # uvicorn believes X-Forwarded-For from FORWARDED_ALLOW_IPS (127.0.0.1 unless set): only from our proxies
    os.environ["FORWARDED_ALLOW_IPS"] = ",".join(app.settings.trusted_proxies)
    demo.launch(
        server_name=args.host,
        server_port=args.port,
        max_file_size=limit,
        css=CSS,
        show_error=False,
        app_kwargs={"middleware": [quota]},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
