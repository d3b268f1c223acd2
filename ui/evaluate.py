"""Tab ③ Evaluate: Spearman before and after tuning on gold sets or the user's pairs, and the pairs that moved."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from explorer import MirrorApp
from explorer.compare.evaluation import EtaClock, EvalReport
from explorer.events import Phase
from explorer.tune.inputs import GOLD_SETS
from ui import render, render_eval
from ui.handlers import ENCODE_QUEUE, PRIVATE, call_service


def evaluate_tab() -> SimpleNamespace:
    """Tab ③: Spearman before and after tuning on gold sets or the user's pairs."""
    ui = SimpleNamespace()
    gr.Markdown(
        "Spearman correlation between cosine similarity and human scores, **before and after** tuning. SimLex-999 "
        "and WordSim-353 suit word models, STS-B dev suits sentence models. A pairs file is `w1 w2 score`, "
        "`s1<TAB>s2<TAB>score` or the STS-B layout, one pair per line."
    )
    with gr.Row():
        ui.gold = gr.CheckboxGroup(list(GOLD_SETS), value=["SimLex-999", "WordSim-353"], label="Gold sets")
        ui.pairs = gr.File(
            label="…or your own pairs file", file_types=[".txt", ".tsv", ".csv"], type="filepath", height=150
        )
    with gr.Row():
        ui.eval_btn = gr.Button("Evaluate", variant="primary", elem_id="mx-eval-btn", scale=4)
        ui.eval_cancel = gr.Button("Cancel", elem_id="mx-eval-cancel", scale=1)
    ui.eval_md = gr.Markdown("", elem_id="mx-eval-md")
    ui.eval_table = gr.Dataframe(interactive=False, visible=False, elem_id="mx-eval-table")  # none before a result
    # HTML rather than gr.BarPlot: the bars carry their 95% intervals, and the plot kept the colours of its first
    # drawing (base only, before tuning) and dropped the tuned bars afterwards
    ui.eval_plot = gr.HTML("", elem_id="mx-eval-plot")
    with gr.Accordion("Pairs whose rank moved most", open=False):
        # follows the served run (RunView.served, and each evaluation): a blend's moved "with the blend"
        ui.moved_head = gr.Markdown(render.moved_header(None), elem_id="mx-eval-moved-head")
        ui.moved = gr.Dataframe(interactive=False, elem_id="mx-eval-moved")
    return ui


def wire_evaluate(app: MirrorApp, state: gr.State, ui: SimpleNamespace) -> None:
    """Evaluate: a progress bar with the time left while the pairs are encoded, then scores, bars and moved pairs."""

    def on_eval(gold_value, pairs_path, s, progress=gr.Progress()):  # noqa: B008
        progress(None, desc="Loading the encoders")
        clock = EtaClock()

        def step(ev: Phase) -> None:
            left = clock.left(ev.done, ev.total)
            progress((ev.done, ev.total), desc=ev.text + (f" · {left}" if left else ""), unit="strings")

        return call_service(
            app, s, 5, lambda session: eval_outputs(app.searcher.evaluate_report(session, gold_value, pairs_path, step))
        )

    def eval_outputs(report: EvalReport) -> tuple:
        import pandas as pd

        empty = "no pair changed rank" if "tuned" in report.encoders else "tune a model first: then moved pairs show"
        moved = pd.DataFrame([render_eval.served_columns(m, report.served) for m in report.moved] or [{"": empty}])
        table, chart = (
            pd.DataFrame(render_eval.eval_table_rows(report.rows, report.served)),
            render_eval.eval_chart(report.rows, report.encoders, report.served),
        )
        shown = gr.update(value=table, visible=True)
        header, caption = render.moved_header(report.run), render.run_caption(report.run)  # the run evaluated
        return render_eval.eval_md(report.rows, report.notes, caption), shown, chart, header, moved

    outputs = [ui.eval_md, ui.eval_table, ui.eval_plot, ui.moved_head, ui.moved, state]
    # one progress bar (with the time left), over the scores' line: not a copy over every output
    kw = {"show_progress_on": [ui.eval_md], **ENCODE_QUEUE, **PRIVATE}
    ui.eval_btn.click(on_eval, [ui.gold, ui.pairs, state], outputs, **kw)

    def on_cancel(s):
        session = app.session(s)
        return render.message(app.searcher.cancel_evaluation(session), "info"), session

    # outside the queue: it reaches an evaluation that runs, which stops between two batches with a message
    ui.eval_cancel.click(on_cancel, [state], [ui.eval_md, state], queue=False, **PRIVATE)
