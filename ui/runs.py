"""The run served on every tab: Launch and Cancel, the run list and links, a saved zip, the blend; RunView draws it."""

from __future__ import annotations

import html
import itertools
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import gradio as gr

from explorer import MirrorApp, Session
from explorer.events import Cancelled, Done, Event, Failed, Phase, Step
from explorer.resources.sessions import RunInfo
from explorer.resources.store import remember
from explorer.runs.follow import Progress
from explorer.runs.follow import progress as follow_progress
from explorer.share.uploads import display_name
from explorer.words import fmt_seconds
from mirror.errors import MirrorError
from ui import render
from ui.explore import choice_update, explore_outputs, explore_panels
from ui.handlers import JOB_QUEUE, PRIVATE, download
from ui.plan_md import estimate_md
from ui.tune import estimate_only


class TrainView:
    """Draws one run's events on the Tune tab: status line or progress bar, live loss curve; and on `progress`, Gradio's
    own progress, for an event that shows it (a blend's line); None where the event hides it (Launch, a reattached
    page): every progress message still costs the page the work of an update."""

    def __init__(self, progress: gr.Progress | None, chance: Any = None, outputs: tuple = ("status", "curve")) -> None:
        """`chance`: a pairs run's "knows nothing" line, measured when its curve is first drawn (a callable giving an
        explorer.compare.chance.PairsChance, or None: explorer.compare.chance.live); None for a mirror run.
        `outputs`: the status line's and the curve's components (what `show` fills)."""
        self.progress, self.outputs = progress, outputs
        self.losses: list[float] = []
        self.batches: list[int] = []  # each step's strings: the curve divides its loss by log(2B-1)
        self.steps = 0  # the run's planned steps (its last Step's total): the axis spans them
        self.status = render.status_box("Starting…")
        self._chance, self._line = chance, None
        # this view's curves (`view.plot(view.losses, view.batches)`) draw its run's own line: the instance's `plot`
        # shadows the static one, which draws a kept run's (`TrainView.plot(losses, batches, kept_chance(...))`)
        self.plot = self.curve

    def curve(self, values: Sequence[float], batches: Sequence[int] | None = None, steps: int = 0) -> Any:
        """The live curve (`plot`) with the run's own "knows nothing" line once it has two steps; `steps`: the run's
        planned steps, which its axis spans from the start."""
        if self._chance is not None and len(values) >= 2:
            measure, self._chance = self._chance, None  # measured once
            self._line = TrainView.measured(measure)
        return TrainView.plot(values, batches, self._line, steps)

    @staticmethod
    def measured(measure: Any) -> Any:
        """`measure()`, or None (no line: the mirror one) when it cannot say (a bug is logged, never shown)."""
        try:
            return measure()
        except Exception:  # the curve without its line rather than no curve
            import logging

            logging.getLogger("mirror.app").exception("the pairs run's chance line could not be measured")
            return None

    @staticmethod
    def kept_chance(run: RunInfo, app: MirrorApp) -> Any:
        """A kept run's "knows nothing" line (explorer.compare.chance.of_run, on its partners as kept), or None."""
        from explorer.compare import chance

        return TrainView.measured(lambda: chance.of_run(run, app.models, app.searcher.partners(run)))

    @staticmethod
    def live_chance(session: Session, models: Any) -> Any:
        """The line of the run `session` launches, measured at its curve's second step (explorer.compare.chance.live)."""
        from explorer.compare import chance

        return chance.live(session, models)

    def show(self, view: Progress, stopping: str = "", first: str = "") -> dict:
        """The status line (its phase's bar, or its training step's with the time left), the live curve, and on a
        shown Gradio progress the same: one redraw of the run's view (explorer.runs.follow, at most once a second:
        each message the page gets costs Gradio's frontend ~0.1 s of a small machine's core, whatever it changes;
        redrawn twice a second with Gradio's hidden progress on every step, a training run took ~55% of a core in
        Chromium, ~27% once a second: bench/bench_page_cpu.py). Its new notes are said as toasts. `stopping`: what
        a stop asked (Cancel) does, said (RunView.stopping) in place of a step's time left, a phase's line marked
        "stopping…", until the run ends (Cancelled) or is served (too late to stop); `first`: what *Serve the first
        training* does, said in place of a second training's time left."""
        for text in view.take_notes():
            gr.Warning(render.toast_text(text))
        self.losses, self.batches, ev = view.losses, view.batches, view.now
        self.steps = ev.total if isinstance(ev, Step) else self.steps
        halt = "stopping…" if stopping else ""
        if isinstance(ev, Phase) and ev.total:
            self.tell((ev.done, ev.total), desc=f"{ev.text} · {halt}" if halt else ev.text, unit="strings")
            right = f"{ev.done:,} / {ev.total:,} strings" + (f" · {halt}" if halt else "")
            self.status = render.progress_bar(f"<b>{html.escape(ev.text)}…</b>", ev.done, ev.total, right)
        elif isinstance(ev, Phase):
            self.tell(None, desc=f"{ev.text} · {halt}" if halt else ev.text)
            self.status = render.status_box(f"**{ev.text}…**" + (f" {halt}" if halt else ""))
        elif isinstance(ev, Step):
            eta = f"ETA {fmt_seconds(ev.eta)}" if ev.eta is not None else "estimating time left…"
            if ev.eta is not None and getattr(ev, "after", None):  # the ETA covers the phases after training too
                eta += f" (of which ~{fmt_seconds(ev.after)} after the training: the tuned index and checks)"
            elif ev.eta is not None and getattr(ev, "after", None) is None:  # no calibrated plan: the steps alone
                eta += " of the training; what follows it (the tuned index, the checks) is not timed yet"
            if halt:  # Cancel pressed: the run ends after this step, and nothing of it is served
                eta = stopping
            elif first and ev.training > 1:
                eta = first
            training = "Training again (general text held near the base)" if ev.training > 1 else "Training"
            text = f"<b>{training}</b> · step {ev.step:,} / {ev.total:,} · loss {ev.loss:.4f}"
            self.status = render.progress_bar(text, ev.step, ev.total, eta)
            self.tell((ev.step, ev.total), desc=f"Training · loss {ev.loss:.3f} · {eta}", unit="steps")
        return {self.outputs[0]: self.status, self.outputs[1]: self.plot(self.losses, self.batches, self.steps)}

    def tell(self, *args: Any, **kwargs: Any) -> None:
        if self.progress is not None:
            if args and args[0] is None:  # Gradio draws a progress's text only with a number: None showed a bare timer
                args = (0.0, *args[1:])
            self.progress(*args, **kwargs)

    @staticmethod
    def plot(values: Sequence[float], batches: Sequence[int] | None = None, chance: Any = None, steps: int = 0) -> Any:
        """The loss curve (render.loss_frame, with a pairs run's `chance` line); hidden until it has two points, and its
        value left alone until then:
        Gradio's plot hands a new value, rows or none (None), to the chart already drawn, and a chart without rows
        (a blend's redraws, a new run's first step) made Vega-Lite warn "Infinite extent for field" in the console."""
        if len(values) < 2:
            return gr.update(visible=False)
        # under 10 steps the axis spans 1-10: whole-number ticks (Vega put ticks at halves, printed "1, 2, 2, 3, 3");
        # past them, every step: always given (an update without x_lim kept the 1-10 of the run's first steps); a live
        # run's axis spans its planned `steps` from the start (a newcomer's 60-step run drew 1-10 at first, then grew)
        frame = render.loss_frame(values, batches, chance)
        return gr.update(value=frame, visible=True, x_lim=[1, max(10, len(values), steps)])


class RunView:
    """What the Tune tab shows of a run, shared by Launch, a reloaded page and the run list: its events drawn as
    they come, then every panel switched to it."""

    def __init__(
        self,
        app: MirrorApp,
        state: gr.State,
        browser: gr.BrowserState,
        ui: SimpleNamespace,
        search: SimpleNamespace,
        evaluate: SimpleNamespace,
        explore: SimpleNamespace,
    ) -> None:
        self.app, self.state, self.browser, self.ui = app, state, browser, ui
        self.search, self.evaluate, self.explore = search, evaluate, explore
        self.outputs = [ui.status_md, ui.loss_plot, ui.result_md, ui.model_file, ui.index_file, search.served_md]
        self.outputs += [search.results]
        self.outputs += [evaluate.gold, evaluate.moved_head, ui.launch, ui.cancel, ui.first, ui.runs, browser, state]
        self.outputs += [explore.caption, explore.forget_md, explore.alpha, explore.map, explore.map_md]
        self.outputs += [ui.input_md, ui.estimate_md]
        self.outputs += [c for c in explore_outputs(explore) if c not in self.outputs]
        # what a (re)loaded page or an opened run sets besides: the settings the session holds (`tuning`)
        self.settings = [ui.mode, ui.model, *ui.fields.values(), ui.touched]

    def run_list(self, memory: dict, value: str | None = None) -> Any:
        choices = [(r["label"], r["id"]) for r in self.app.saved.list_runs(memory["runs"])]
        return gr.update(choices=choices, value=value if any(v == value for _, v in choices) else None)

    def served(self, run: RunInfo, session: Session, memory: dict | None, active: str | None = None) -> dict:
        """Every panel switched to `run`: summary, downloads, loss curve, search header, run list. `active`: the run
        the browser still follows (a run served before its checks: a reload reattaches to it until it is Done)."""
        ui, words = self.ui, run.record.training.mode != "sentences"
        memory = remember(memory, run.folder.name, active)
        return {
            ui.result_md: render.run_md(run),
            **self.downloads(run),
            ui.loss_plot: self.served_loss(run),
            self.search.served_md: render.served_md(session, self.app.searcher.example(run)),
            # the last search's hits were the previous run's: gone, with what to do for this run's
            self.search.results: render.status_box("A new run is served: press **Search** to see its neighbours."),
            self.evaluate.gold: ["SimLex-999", "WordSim-353"] if words else ["STS-B dev"],
            self.evaluate.moved_head: render.moved_header(run),  # "…with the blend…" when it is one
            **explore_panels(self.explore, run),
            ui.runs: self.run_list(memory, run.folder.name),
            self.browser: memory,
            self.state: session,
        }

    def served_loss(self, run: RunInfo) -> Any:
        """`run`'s loss curve as it trained (its own batch sizes and "knows nothing" line)."""
        return TrainView.plot(run.losses, run.record.training.batch_sizes, TrainView.kept_chance(run, self.app))

    def with_strings(self, shown: dict, session: Session) -> dict:
        """`shown` plus the served run's own strings when the session has none (a page reloaded during or after the
        run): loaded again, Launch enabled, the plan said to follow."""
        restored = self.app.loader.restore_texts(session)
        if restored is not None:
            planning = render.message("Planning the run and timing it on this machine…", "info")
            ui = self.ui
            shown = {**shown, ui.input_md: render.load_md(restored), ui.estimate_md: planning}
            shown[ui.launch] = gr.update(interactive=True)
        return shown

    def tuning(self, session: Session, launched_by: Session | None = None) -> dict:
        """The settings a Launch runs, as the session holds them from now on (Planner.restored: its own, the
        launching session's, its served run's): preset, model, every Advanced setting and which are the user's own;
        {} when there are none (the page keeps what it shows)."""
        restored = self.app.planner.restored(session, launched_by)
        if restored is None:
            return {}
        tuning, own = restored
        ui = self.ui
        shown = {ui.mode: gr.update(value=tuning.mode), ui.model: gr.update(value=tuning.model), ui.touched: own}
        shown.update({c: gr.update(value=tuning.overrides[n]) for n, c in ui.fields.items() if n in tuning.overrides})
        return shown

    def downloads(self, run: RunInfo) -> dict:
        """The run's two downloads, hidden while they are not made yet (a run served before its checks)."""
        ui = self.ui
        return {
            ui.model_file: download(self.app, run.model_zip, "Tuned model (.zip of a sentence-transformers folder)"),
            ui.index_file: download(self.app, run.index_zip, "Search index of your strings (.zip)"),
        }

    def checked(self, run: RunInfo, memory: dict) -> dict:
        """What changes when a run served before its checks (Served) is Done: its summary, downloads, checks and
        blend, nothing the user may be looking at since (search results, Explore's maps, what moved)."""
        ui, explore = self.ui, self.explore
        return {
            ui.result_md: render.run_md(run),
            **self.downloads(run),
            explore.forget_md: render.forgetting_md(run),
            explore.remedy_btn: gr.update(visible=render.remedy_offered(run)),
            explore.alpha: gr.update(value=render.default_alpha(run)),
            ui.runs: self.run_list(memory, run.folder.name),
        }

    def stopping(self, session: Session) -> str:
        """What the session's run does now that a stop was asked for it (Cancel, from this page or another of its
        pages), "" when none was: its status line says so until it ends, not the time left (the next view drawn
        after Cancel's "Stopping…" line replaced it with the step and its ETA, as if Cancel had not been heard)."""
        run = self.app.registry.of(session)
        if run is None or not run.stopping:
            return ""
        kept = " the previous model and index stay served." if session.run else " nothing is served yet."
        return "Stopping after this step…" + kept

    def draw(
        self,
        events: Iterator[Event],
        session: Session,
        memory: dict,
        progress: gr.Progress | None = None,
        launched: Any = None,
    ) -> Iterator[dict]:
        """A run's events drawn as its view (explorer.runs.follow.progress: at most once a second, at once when it is
        served, then its end). A run served before its general checks is drawn served at once, and its checks and
        downloads when it is Done. `launched`: what the run's "knows nothing" line is measured on (its strings,
        partners and settings: a page reattached after a reload holds none of its own); `session` when None."""
        ui, chance = self.ui, TrainView.live_chance(launched or session, self.app.models)
        view = TrainView(progress, chance, (ui.status_md, ui.loss_plot))

        def idle() -> dict:  # at the run's end: Launch when strings are loaded then (an upload cleared meanwhile)
            return {ui.launch: gr.update(interactive=bool(session.texts)), ui.cancel: gr.update(interactive=False),
                    ui.first: gr.update(visible=False)}  # fmt: skip

        # Launch greyed while the run goes, a blend from Explore too (its Launch stayed enabled through its checks, a
        # click refused with a message: issue 60's last newcomer's pass); a model zip's upload greys it itself
        held, offered = {ui.launch: gr.update(interactive=False)}, False  # offered: Serve the first training shown
        for now in follow_progress(events):
            ev = now.end
            if now.served is not None and ev is None:
                if not now.newly_served:  # the status keeps saying it is served
                    continue
                active = (memory or {}).get("active")  # still followed: a reload reattaches, until Done
                memory = remember(memory, now.served.folder.name, active)  # Done's memory serves it too
                box = render.status_box(render.served_status(now.served), "ok")
                # Cancel cannot undo a served run; Launch waits for the checks (the run holds its training slot)
                yield {
                    ui.status_md: box,
                    ui.cancel: gr.update(interactive=False),
                    ui.first: gr.update(visible=False),
                    **self.served(now.served, session, memory, active),
                    **held,
                }
                held = {}
                continue
            if now.served is not None and isinstance(ev, Done):
                box, memory = render.status_box(render.done_status(ev.run), "ok"), remember(memory)
                shown = {ui.status_md: box, **idle(), **self.checked(ev.run, memory), self.browser: memory}
                yield {**self.with_strings(shown, session), self.state: session}
                return
            if isinstance(ev, Failed | Cancelled):
                gr.Warning(render.toast_text(ev.text))
                kept = " Your previous model and index are still served." if session.run else ""
                failed = isinstance(ev, Failed)
                box = render.status_box(ev.text, "error") if failed else render.status_box(ev.text + kept, "warning")
                losses = now.losses or list(getattr(ev, "losses", []))
                # the chart is the served run's, as the summary under it is (a newcomer's page drew the cancelled
                # run's 4 steps above "Done: your tuned model is served … Steps 54 / 54"); no run served: the
                # stopped run's steps, the only ones there are
                plot = (
                    self.served_loss(session.run)
                    if session.run
                    else view.plot(losses, now.batches if now.losses else None)
                )
                yield {
                    ui.status_md: box,
                    ui.result_md: render.run_md(session.run) if session.run else "",  # the run still served
                    ui.loss_plot: plot,
                    **idle(),
                    self.browser: remember(memory),
                    self.state: session,
                }
                return
            if isinstance(ev, Done):
                box = render.status_box(render.done_status(ev.run), "ok")
                yield self.with_strings({ui.status_md: box, **idle(), **self.served(ev.run, session, memory)}, session)
                return
            stopping, first = self.stopping(session), FIRST_ASKED if self.app.trainer.first_asked(session) else ""
            shown = view.show(now, stopping, first)
            second = isinstance(now.now, Step) and now.now.training > 1 and not (stopping or first)
            if second != offered:  # while a second training goes on, until a stop or the first is asked
                shown[ui.first], offered = gr.update(visible=second), second
            yield {**shown, **held}
            held = {}  # said once: the page keeps it until the run's end sets it again (`idle`)


FIRST_ASKED = "Stopping the second training after this step: the first training's blend is served"


def wire_training(app: MirrorApp, view: RunView) -> None:
    """Launch (queued, one training slot), Cancel, and Serve the first training (while a second one goes on)."""
    ui, state, browser = view.ui, view.state, view.browser
    train_queue = JOB_QUEUE

    def on_request(memory, s):
        session = app.session(s)
        asked = app.trainer.request_run(session)  # the run exists now: its id for the browser, Cancel reaches it
        busy = {ui.launch: gr.update(interactive=False), ui.cancel: gr.update(interactive=True)}
        shown = render.status_box("Waiting for a free training slot…")
        # the last run's summary is not this run's: a line saying what stays served until this one is done
        kept = render.kept_md(session.run)
        return {
            ui.status_md: shown,
            ui.result_md: kept,
            **busy,
            browser: remember(memory, active=asked.id),
            state: session,
        }

    def on_train(data: dict):
        """Stream the run to the page: progress bar, live loss curve; then summary and downloads (Gradio's own
        progress hidden: the status line is the progress bar)."""
        session = app.session(data[state])
        overrides = {name: data[comp] for name, comp in ui.fields.items()}
        # the settings shown, held by the session and its run (a reloaded page shows them again): what it runs
        plan = app.planner.launch(session, data[ui.model], data[ui.mode], overrides)
        events = app.trainer.train(session, plan.model, plan.mode, dict(plan.overrides))
        yield from view.draw(events, session, data[browser])

    def on_cancel(s):
        session = app.session(s)
        return render.status_box(app.trainer.cancel(session)), session

    train_inputs = {ui.mode, ui.model, state, browser, *ui.fields.values()}
    request_outputs = [ui.status_md, ui.result_md, ui.launch, ui.cancel, browser, state]
    ui.launch.click(on_request, [browser, state], request_outputs, queue=False, **PRIVATE).then(
        on_train, train_inputs, view.outputs, show_progress="hidden", **train_queue, **PRIVATE
    )
    ui.cancel.click(on_cancel, [state], [ui.status_md, state], queue=False, **PRIVATE)

    def on_first(s):
        session = app.session(s)
        return render.status_box(app.trainer.serve_first(session)), gr.update(visible=False), session

    ui.first.click(on_first, [state], [ui.status_md, ui.first, state], queue=False, **PRIVATE)


def wire_runs(app: MirrorApp, view: RunView, demo: gr.Blocks) -> None:
    """The browser's runs: listed on page load, opened from the list or a link (?run=<id>); a page reloaded
    during its run reattaches to it."""
    ui, state, browser = view.ui, view.state, view.browser

    def on_load(memory, s, request: gr.Request):
        session, memory = app.session(s), remember(memory, active=(memory or {}).get("active"))
        asked = (request.query_params.get("run") if request else None) or None
        active = memory["active"]
        # the browser keeps the id of the run it follows; whether it is live, and how, only the registry says (read
        # once: the run may end, and leave the registry, meanwhile)
        live = app.registry.get(active)
        if live is not None:
            running = {ui.launch: gr.update(interactive=False), ui.cancel: gr.update(interactive=True)}
            shown = {ui.status_md: render.status_box("Reattached to your run…"), ui.runs: view.run_list(memory)}
            # the run this page served before the reload stays served while the new one trains (and after, when it is
            # cancelled or fails), as it was before the reload: its panels first, the reattached lines over them
            previous = memory.get("served")
            if previous and previous != live.id and session.run is None:
                try:
                    shown = {**view.served(app.saved.open_run(session, previous), session, memory, active), **shown}
                    shown[ui.runs], shown[ui.result_md] = view.run_list(memory, previous), render.kept_md(session.run)
                except MirrorError:  # removed meanwhile: nothing to serve
                    pass
            shown[ui.input_md] = render.reattached_md(live.strings)
            # the settings the run was launched with, not the page's defaults: what Launch runs after it (issue 59)
            adopted = view.tuning(session, live.session)
            shown.update(adopted)
            # not "Load some strings to see the plan…": the run's own strings are training (issue 52, a reload); its
            # plan as it runs, when it has one (a newcomer's reload lost the plan the page had shown)
            planned = live.planned
            shown[ui.estimate_md] = render.message(
                "A run of these strings is going on"
                + (
                    # timed again at Launch: its times may differ from the plan the page showed before it (a
                    # newcomer's "~6 min" then "~5 min" after a reload), its steps not
                    ", with the plan it runs below (made and timed at its Launch, at the machine's speed then)"
                    if planned
                    else ": its plan and time estimate were made when it was launched"
                )
                + "; the status line below follows it (steps, the time left).",
                "info",
            ) + (f"\n\n{estimate_md(*planned, going=True)}" if planned else "")
            yield {**shown, **running, browser: memory, state: session}  # the state: Cancel reaches the run
            # the run's own strings, partners and settings for its "knows nothing" line: this page's session has no
            # strings until the run ends (a reloaded pairs run's curve lost its line)
            launched = SimpleNamespace(texts=live.texts, partners=live.partners, tuning=session.tuning)
            yield from view.draw(app.trainer.follow(live, session=session), session, memory, launched=launched)
            recorded = {} if adopted or session.run is None else view.tuning(session)
            if recorded:  # no settings held for it (a run of the API): the ones its folder records
                yield recorded
            if not session.texts and live.texts:  # cancelled or failed: no run of them served to load them from
                again = ["the strings of the run this page followed, loaded again: Launch tunes them"]
                info = app.loader.set_texts(
                    session, list(live.texts), live.strings[1], again, live.partners, live.pair_columns
                )
                info["restored"] = True  # cleaned when first loaded: no "0 duplicates removed" (ui.render_load)
                yield {ui.input_md: render.load_md(info), ui.launch: gr.update(interactive=True), state: session}
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
        if run_id:  # it could not be opened (expired, removed, or no run id): say so, and serve nothing
            memory = {**memory, "active": None, "served": None}
            # (a link's id cut short read "your last run … is no longer on this server": untrue twice over)
            whose = "the run this page's link names" if run_id == asked else "your last run"
            try:
                app.runs.folder(run_id)
                why = f"Nothing is served: {whose} ({run_id[:8]}…) is no longer on this server (runs unused for a "
                why += "while are removed). Tune a new one, or open another of your runs above."
            except MirrorError:
                shown = "".join(c if c.isalnum() or c in "-_." else "?" for c in run_id[:40])
                why = f"Nothing is served: {whose} is not a run id (`{shown}`; a run's id is 32 letters a-f "
                why += "and digits): copy the run's whole link, or open one of your runs above."
            idle[ui.status_md] = render.status_box(why, "warning")
        yield {**idle, browser: memory}

    def try_open(session: Session, run_id: str | None, memory: dict) -> dict | None:
        try:
            if not run_id:
                return None
            # (the plan and its time follow: `estimated` below)
            run = app.saved.open_run(session, run_id)
            opened = {view.ui.status_md: render.status_box(render.opened_status(run), "ok")}  # not the last run's line
            had = bool(session.texts)
            shown = view.with_strings({**opened, **view.served(run, session, memory)}, session)
            # its strings loaded again: with the settings held for them (the run's own), never a preset's defaults
            return shown if had or not session.texts else {**shown, **view.tuning(session)}
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
    outputs = [*view.outputs, *view.settings]
    ui.open_run.click(on_open, [ui.runs, browser, state], outputs, **opened).then(**estimated, **PRIVATE)
    # the browser's stored value reaches the page a moment after it loads: read it once it is there
    wait = "async () => { await new Promise((done) => setTimeout(done, 400)); }"
    load = {"show_progress": "hidden", **PRIVATE}
    # once the load served a run (or none: an expired link), the address names it (app.py's HEAD)
    sync = "() => { window.mirrorSyncRunUrl && window.mirrorSyncRunUrl(true); }"
    loaded = demo.load(None, js=wait, **PRIVATE).then(on_load, [browser, state], outputs, **load)
    loaded.then(None, js=sync, **PRIVATE)
    loaded.then(**estimated, show_progress="hidden", **PRIVATE)


def wire_saved_zip(app: MirrorApp, view: RunView) -> None:
    """Serving a model zip saved from this app (tuned here before): it becomes a run like any other."""
    ui, state, browser = view.ui, view.state, view.browser

    def on_saved_zip(path, memory, s, progress=gr.Progress()):  # noqa: B008
        session = app.session(s)
        if not path:
            yield {state: session}
            return
        # Launch held while the zip loads and its checks run, as for a blend (a click was refused with a message: a
        # review); armed again at its end when strings are loaded and no other run of the session goes on
        yield {ui.launch: gr.update(interactive=False)}

        def armed() -> dict:
            return {ui.launch: gr.update(interactive=bool(session.texts) and app.registry.of(session) is None)}

        for now in follow_progress(app.saved.use_saved_model(session, path)):
            ev = now.end
            if ev is None and isinstance(now.now, Phase):  # its phases on Gradio's progress: it shows no curve
                # with a number: Gradio shows a progress's text only with one (None: a bare timer, for minutes when
                # it waits for a training slot behind another visitor's run)
                phase = now.now
                if phase.total:
                    progress((phase.done, phase.total), desc=phase.text, unit="strings")
                else:
                    progress(0.0, desc=phase.text)
            elif isinstance(ev, Failed | Cancelled):  # cancelled (Cancel, the time cap): said, as a blend says it
                gr.Warning(render.toast_text(ev.text))
                kind = "error" if isinstance(ev, Failed) else "warning"
                yield {ui.saved_md: render.message(ev.text, kind), state: session, **armed()}
                return
            elif isinstance(ev, Done):
                shown = render.message(f"Serving `{display_name(path)}`{render.blend_part(ev.run)}.", "ok")
                took = render.status_box(render.done_status(ev.run), "ok")  # not the last run's "Tuned and indexed"
                yield {ui.saved_md: shown, ui.status_md: took, **view.served(ev.run, session, memory), **armed()}
                return
        yield {state: session, **armed()}

    # its progress on its own line, as a blend's: the whole Tune tab greyed out under timers while it waited for a
    # training slot (a user's pass: minutes behind another visitor's run, no word of why)
    ui.saved_zip.upload(
        on_saved_zip,
        [ui.saved_zip, browser, state],
        [ui.saved_md, *view.outputs],
        show_progress_on=[ui.saved_md],
        **JOB_QUEUE,
        **PRIVATE,
    )


def wire_blend(app: MirrorApp, view: RunView, ui: SimpleNamespace) -> None:
    """Explore's Blend: a blend of the served run with its base, served as a new run like a finished training (here,
    not in ui/explore.py: RunView draws it, and RunView draws Explore's panels)."""

    def refused(session: Session, text: str, toast: bool = True) -> dict:
        """A blend refused or stopped: said on its line (and as a toast), and the one-click α picker back on the α
        still served (it kept the user's pick, as if that α were served). Refused while the served run's general
        checks run, it says so: "wait for it or cancel it" named a Cancel that cannot stop them (a user's pass in
        Chromium)."""
        live = app.registry.of(session)
        if live is not None and live.checking:
            text = (
                "The served run's general checks are still running: blend it, or serve another α, once their table "
                "appears above."
            )
        if toast:  # (a run's end is said as a toast by RunView.draw already)
            gr.Warning(render.toast_text(text))
        shown = {ui.blend_md: render.message(text, "error")}
        if session.run is not None:
            shown[ui.choice] = choice_update(session.run)
        return shown

    def on_blend(alpha, memory, s, progress=gr.Progress()):  # noqa: B008
        session, ended = app.session(s), []
        started = iter(app.saved.blend_run(session, alpha))
        first = next(started, None)
        if isinstance(first, Failed):  # refused before it began (nothing served, a bad α): said here, not in tab ①
            yield refused(session, first.text)
            return
        events = (ended.append(ev) or ev for ev in itertools.chain([first] if first else [], started))
        yield from view.draw(events, session, memory, progress)
        if ended and isinstance(ended[-1], Done):
            yield {
                ui.blend_md: render.message(render.blend_text(ended[-1].run), "ok"),
                ui.forget_md: render.forgetting_md(ended[-1].run),
            }
        elif ended and isinstance(ended[-1], Failed | Cancelled):
            yield refused(session, ended[-1].text, toast=False)

    outputs = list(dict.fromkeys([*view.outputs, ui.blend_md, ui.forget_md]))
    # the progress on the blend's own line: the Explore tab is not greyed out while it works; it waits for a
    # training slot in the app's queue (JOB_QUEUE), holding none of the encode workers searches need
    kw = {"show_progress_on": [ui.blend_md], **JOB_QUEUE, **PRIVATE}
    ui.blend_btn.click(on_blend, [ui.alpha, view.browser, view.state], outputs, **kw)
    # one click on another of the α a pairs run chose among serves it (a user's pick only: `select`, not `change`)
    ui.choice.select(on_blend, [ui.choice, view.browser, view.state], outputs, **kw)

    def on_remedy(memory, s, progress=gr.Progress()):  # noqa: B008
        yield from on_blend(render.SUGGESTED_ALPHA, memory, s, progress)  # the real blend, at the suggested α

    ui.remedy_btn.click(on_remedy, [view.browser, view.state], outputs, **kw)
