"""ui.render: what the user reads is escaped, and the search tables mark what only one encoder found."""

from __future__ import annotations

import numpy as np

from explorer.errors import user_error
from explorer.resources import runfacts
from explorer.resources.record import record_of
from ui.render import render_results


def test_render_results_escapes_and_marks_differences():
    results = [
        {
            "query": "<script>x</script>",
            "tuned": [{"rank": 1, "text": "<b>a</b>", "score": 0.9, "only_here": True}],
            "base": [{"rank": 1, "text": "b", "score": 0.8, "only_here": True}],
        }
    ]
    out = render_results(results, "bundled")
    assert "<script>" not in out and "&lt;script&gt;" in out and "&lt;b&gt;a&lt;/b&gt;" in out
    assert "mx-only-tuned" in out and "mx-only-base" in out and "1 of 1 tuned hits are new" in out


def test_search_hits_and_explore_neighbours_have_their_own_ids():
    """Both are on the page at once (tab ② and tab ④): one id each, so neither is mistaken for the other; one class
    styles both."""
    results = [{"query": "q", "tuned": [], "base": []}]
    search, point = render_results(results, "bundled"), render_results(results, "bundled", "mx-point-hits")
    assert search.startswith('<div id="mx-search-hits" class="mx-results">')
    assert point.startswith('<div id="mx-point-hits" class="mx-results">')


def test_the_loss_curve_divides_each_step_by_the_loss_of_knowing_nothing():
    """Issue 28: raw InfoNCE of a batch of 200 starts at log(399) = 6.0, a last batch of 11 at log(21) = 3.0; the
    curve divides each by log(2B-1), so both read 1 (a model that knows nothing), not a jump."""
    import math

    from ui import render

    frame = render.loss_frame([math.log(399), math.log(21), 0.3 * math.log(399)], [200, 11, 200])
    each = frame[frame.series == "each step"]["loss"].round(6).tolist()
    assert each == [1.0, 1.0, 0.3]
    smooth = render.loss_frame([5.0, 0.5, 5.0], [200, 11, 200])[lambda f: f.series == "smoothed"]["loss"].tolist()
    assert smooth[1] > 0.95 * smooth[0]  # a batch of 11 hardly moves the average (divided, it still reads lower)
    assert render.loss_frame([6.0, 3.0])[lambda f: f.series == "each step"]["loss"].tolist() == [6.0, 3.0]  # unknown B
    assert "log(2B−1)" in render.LOSS_TITLE


def blend_run(**stats):
    """A run as render reads it: a blend α=0.5 of run aaaaaaaa… (its stats copy the parent's training), or, with
    blend_alpha=None, a run as trained."""
    from pathlib import Path
    from types import SimpleNamespace

    from explorer.compare.forgetting import verdict

    better = {
        "name": "SimLex-999",
        "what": "word pairs",
        "base": 40.0,
        "tuned": 45.0,
        "delta": 5.0,
        "verdict": "better",
    }
    worse = {"name": "STS-B dev", "what": "sentence pairs", "base": 80.0, "tuned": 70.0, "delta": -10.0}
    rows = [better, {**worse, "ci": [-12.0, -8.0], "verdict": "worse", "worse": True}]
    stats = {
        "device": "cpu",
        "seconds": 31.0,
        "wall_seconds": 40.0,
        "steps": 3,
        "total_steps": 3,
        "mode": "words",
        "blend_alpha": 0.5,
        "blended_from": "a" * 32,
        "blend_seconds": 2.0,
        "forgetting": {"checks": rows, "verdict": verdict(rows)},
        **stats,
    }
    stats = {k: v for k, v in stats.items() if v is not None}
    return SimpleNamespace(
        folder=Path("/runs") / ("b" * 32),
        record=record_of(stats),  # the record a run.json with these stats reads as
        losses=[3.0, 2.0, 1.0],
        n_texts=411,
        corpus="small_words.txt",
        base_model="bundled",
        pooling="mean",
    )


def test_a_blend_is_named_a_blend_in_tab_one_and_in_its_health_and_checks():
    """A newcomer pass: after a blend, tab ① read "Done: your tuned model is served" with the parent's training time
    and "Tuned and indexed in 40 s" (the parent's seconds), and the health and check tables called the blend
    "tuned", its verdict suggesting to blend what is already a blend."""
    from explorer.compare.health import compare_health
    from ui import render

    blend, trained = blend_run(), blend_run(blend_alpha=None, blended_from=None)
    shown = render.run_md(blend)
    assert shown.startswith("### Served: a blend (run `bbbbbbbb`), α = 0.5 of run `aaaaaaaa`")
    assert "No training: its weights are 0.5 × the base's + 0.5 × the tuned weights of run `aaaaaaaa`" in shown
    assert "| Blended from run `aaaaaaaa` | value |" in shown and "Done: your tuned model" not in shown
    assert "[Link to this run](?run=" + "b" * 32 + ")" in shown
    assert render.run_md(trained).startswith("### Done: your tuned model is served (run `bbbbbbbb`)")
    assert render.done_status(blend) == "Blended and indexed in 2 s."  # its own seconds, not the parent's 40
    assert render.done_status(trained) == "Tuned and indexed in 40 s."

    x = np.random.default_rng(0).normal(size=(20, 8))
    health = compare_health(x, x + 0.1, who="The blend")
    assert health["summary"].startswith("The blend ")
    assert "| space health of your strings | base | blend α=0.5 |" in render.health_md(health, blend)
    assert "| base | tuned |" in render.health_md(compare_health(x, x), trained)

    checks = render.forgetting_md(blend)
    assert "| base | blend α=0.5 | change |" in checks and "| base | tuned |" not in checks
    assert "The blend is worse than the base on 1 general check: STS-B dev (sentence pairs): 80.0 → 70.0" in checks
    assert "Tuning made the model worse" not in checks and "blend at α" not in checks  # no blend of a blend
    kept = render.forgetting_md(trained)
    assert "| base | tuned | change |" in kept and "Tuning made the model worse on 1 general check" in kept


def test_a_reused_model_zip_is_named_as_uploaded_with_its_own_seconds():
    """A model zip reused in tab ① read "Tuned and indexed in <its training's seconds>" and "Done: your tuned model
    is served": the status gives the seconds loading and indexing took now, the training as done earlier."""
    from ui import render

    uploaded = blend_run(blend_alpha=None, blended_from=None, uploaded="mine.zip", load_seconds=3.0)
    assert render.done_status(uploaded) == "Loaded and indexed in 3 s; trained earlier in 31 s."
    shown = render.run_md(uploaded)
    assert shown.startswith("### Served: the model you uploaded (`mine.zip`, run `bbbbbbbb`)")
    assert "Trained earlier, not now" in shown and "| Uploaded model | value |" in shown and "Done:" not in shown
    uploaded.losses = []  # a zip keeps the first and last step's loss, not each step's
    assert "| Loss (raw) | n/a |" in render.run_md(uploaded)  # a record that does not say what the loss holds
    uploaded.record.training.first_loss, uploaded.record.training.final_loss = 2.0, 1.5
    uploaded.record.training.loss_terms = []
    assert "| Loss (raw InfoNCE) | 1.5000 (last step; first step: 2.0000, -25%) |" in render.run_md(uploaded)
    # a pairs run's loss holds its distillation to the base: the row says so (it read "raw InfoNCE")
    uploaded.record.training.loss_terms = ["distillation to the base λ 10"]
    assert "| Loss (raw InfoNCE + distillation to the base λ 10) | 1.5000 (last step;" in render.run_md(uploaded)
    quick = blend_run(blend_alpha=None, blended_from=None, uploaded="mine.zip", load_seconds=0.4, seconds=95.0)
    assert render.done_status(quick) == "Loaded and indexed in under a second; trained earlier in 2 min."  # not "0 s"
    of_upload = blend_run(uploaded="mine.zip", load_seconds=3.0)  # a blend of a reused zip copies its parent's stats
    assert render.done_status(of_upload) == "Blended and indexed in 2 s."
    assert render.run_md(of_upload).startswith("### Served: a blend (run `bbbbbbbb`), α = 0.5 of run `aaaaaaaa`")
    no_times = blend_run(blend_alpha=None, blended_from=None, seconds=None, uploaded="mine.zip")
    assert render.done_status(no_times) == "Loaded and indexed; trained earlier."


def test_a_reused_zip_of_a_blend_is_named_a_blend_loaded_now():
    """A newcomer pass: the zip of a blend, reused in tab ①, read "Loaded and indexed" and "the model you uploaded"
    and was called "tuned" everywhere: it reads as the blend it is, loaded now (its own seconds), trained earlier."""
    from ui import render

    zipped = blend_run(blend_seconds=None, uploaded="blend.zip", load_seconds=3.0, blend_alpha=0.25)
    assert runfacts.uploaded_zip(zipped) == "blend.zip"
    assert render.done_status(zipped) == (
        "Loaded a blend (α = 0.25 of run `aaaaaaaa`) and indexed in 3 s; trained earlier in 31 s."
    )
    shown = render.run_md(zipped)
    assert shown.startswith(
        "### Served: a blend you uploaded (`blend.zip`, run `bbbbbbbb`), α = 0.25 of run `aaaaaaaa`"
    )
    assert "Loaded now, trained and blended earlier: its weights are 0.75 × the base's + 0.25 × the tuned" in shown
    assert "the model you uploaded" not in shown and runfacts.served_label(zipped) == "blend α=0.25"
    assert "| base | blend α=0.25 | change |" in render.forgetting_md(zipped)
    unknown = blend_run(blend_seconds=None, blended_from=None, uploaded="cli.zip", load_seconds=3.0)  # `mirror blend`
    assert render.done_status(unknown).startswith("Loaded a blend (α = 0.5 of the tuned weights) and indexed in 3 s")
    made_here = blend_run(uploaded="blend.zip", load_seconds=3.0)  # a blend made here of a reused zip
    assert runfacts.uploaded_zip(made_here) is None and render.done_status(made_here) == "Blended and indexed in 2 s."
    assert runfacts.uploaded_zip(blend_run(blend_alpha=None, blended_from=None)) is None


def test_the_evaluate_tabs_moved_heading_names_a_blend():
    """Tab ③ headed a blend's moved pairs "Pairs whose rank moved most with tuning" (a static heading), while its
    table and bars already said "blend α=0.5"."""
    from ui import render

    blend, trained = blend_run(), blend_run(blend_alpha=None, blended_from=None)
    shown = render.moved_header(blend)
    assert shown.startswith("**Pairs whose rank moved most with the blend (α = 0.5 of run `aaaaaaaa`).**")
    assert "by blend α=0.5 cosine" in shown and "the blend helped" in shown and "tuning" not in shown
    for run in (trained, None):
        plain = render.moved_header(run)
        assert plain.startswith("**Pairs whose rank moved most with tuning.**") and "blend" not in plain
        assert "by tuned cosine" in plain and "tuning helped" in plain


def test_status_lines_belong_to_the_run_served_and_counts_read_as_words():
    """Issue 36's small print: an opened run's status line is its own (not "Blended and indexed" of the run before),
    a new run says what stays served instead of keeping the last run's summary, "1 string", a one-step loss."""
    from ui import render

    blend, trained = blend_run(), blend_run(blend_alpha=None, blended_from=None)
    assert render.opened_status(trained) == (
        "Serving run `bbbbbbbb`, opened from your runs or its link. When it was made: tuned and indexed in 40 s."
    )
    assert render.opened_status(blend).endswith("When it was made: blended and indexed in 2 s.")
    assert "Run `bbbbbbbb` stays served until it is done" in render.kept_md(trained) and render.kept_md(None) == ""
    assert render.count(1, "string") == "1 string" and render.count(1204, "string") == "1,204 strings"
    assert render.loss_summary([2.0, 1.0]) == "1.0000 (last step; first step: 2.0000, -50%)"
    assert "mean of the last 2 steps; first 2" in render.loss_summary([2.0, 2.0, 1.0, 1.0])
    assert "the general checks above are its own" in render.blend_text(blend)


def test_a_page_reattached_to_its_run_says_which_strings_it_tunes():
    """Issue 36, reload mid-run: the reloaded page said "Load some strings" under a run training 10,419 of them."""
    from ui import render

    assert render.reattached_md((10419, "words12k.txt")) == (
        "Your run in progress tunes **10,419 strings** from `words12k.txt`; they are loaded here again when it ends."
    )
    assert render.reattached_md((1, "")).startswith("Your run in progress tunes **1 string**;")


def test_no_message_shows_a_server_path():
    """Issue 37: a model zip whose index named another encoder showed `/…/mirror-explorer/runs/<id>/tuned_index`."""
    from explorer.events import Cancelled, Failed
    from mirror.errors import MirrorError

    where = "/srv/tmp/gradio/mirror-explorer/runs/0a1b2c/tuned_index"
    text = f"{where}: this index was built with the encoder '/srv/x/runs/0a1b2c/model'; see https://hf.co/org/m"
    for shown in (Failed(text).text, Cancelled(text).text, user_error(MirrorError(text))):
        assert "/srv" not in shown and shown.startswith("tuned_index: ") and "'model'" in shown
        assert "https://hf.co/org/m" in shown  # a URL is not a path
    assert "/srv" not in user_error(RuntimeError(f"cannot open {where}"))


def test_the_change_sentence_says_how_much_moved_and_why():
    """Issue 40: "nothing changed" is never a mystery: the share, the run's own blend (the preset's) and how to tune
    harder; a blend made in the app names itself; a run made before the figure was kept says nothing."""
    from types import SimpleNamespace

    from ui import render

    stats = {"neighbours_changed": 0.031, "steps": 50, "epochs": 10, "run_alpha": 0.25}
    run = SimpleNamespace(record=record_of(stats))
    said = render.change_sentence(run)
    assert said.startswith("**3% of your strings' nearest neighbours changed**")
    assert "after 50 steps (10 epochs) the run blended its weights with the base's at α 0.25" in said
    assert "raise *Blend with the base after training: α* toward 1" in said
    blend = SimpleNamespace(record=record_of({**stats, "neighbours_changed": 0.004, "blend_alpha": 0.5}))
    assert "under 1%" in render.change_sentence(blend) and "a blend, α = 0.5" in render.change_sentence(blend)
    plain = SimpleNamespace(record=record_of({"neighbours_changed": 0.2, "steps": 7, "run_alpha": 1.0}))
    assert "after 7 steps, unblended" in render.change_sentence(plain)
    assert render.change_sentence(SimpleNamespace(record=record_of({"steps": 5}))) == ""


def test_the_plan_says_why_a_small_upload_trains_more_epochs():
    from explorer.tune.inputs import build_config
    from ui.plan_md import small_upload_note

    texts = [f"sentence number {i} of a small upload" for i in range(1000)]
    config, _ = build_config(texts, "bundled", "sentences", {"min_steps": 50})
    assert config.epochs == 10  # 5 steps an epoch at batch 200
    assert small_upload_note(50, config) == " of 5 steps: a small upload trains at least 50 steps"
    big, _ = build_config(texts * 1 + [f"more {i}" for i in range(20000)], "bundled", "sentences", {"min_steps": 50})
    assert big.epochs == 1 and small_upload_note(106, big) == ""
    asked, _ = build_config(texts, "bundled", "sentences", {"min_steps": 50, "epochs": 12})
    assert asked.epochs == 12 and small_upload_note(60, asked) == ""  # the epochs asked for: no note
    # 40 strings: one step an epoch, 25 epochs at most: the plan said "at least 50 steps" beside its 25 (a newcomer)
    few, _ = build_config(texts[:40], "bundled", "sentences", {"min_steps": 50})
    assert few.epochs == 25
    assert (
        small_upload_note(25, few) == " of 1 step: a small upload trains at most 25 epochs, short of its min steps (50)"
    )


def test_a_plan_cut_by_max_steps_says_so_not_the_epochs():
    """A newcomer's pass: Max steps 4 planned "4 steps (sentences preset, batch 200, 25 epochs)"."""
    from explorer.tune.estimate import PHASES, Calibration, Estimate, Fit
    from explorer.tune.inputs import build_config
    from ui.plan_md import estimate_md

    texts = [f"sentence number {i} of a small upload" for i in range(40)]
    config, _ = build_config(texts, "bundled", "sentences", {"min_steps": 50, "max_steps": 4})
    cal = Calibration(Fit(0, 0), Fit(0, 0), 0, 0, 0, 0, 1.0, "CPU (2 threads, bf16)")
    said = estimate_md(Estimate(4, tuple((n, 1.0) for n in PHASES), cal), config)
    assert "**Plan:** 4 steps (max steps 4; sentences preset, batch 200)" in said and "epochs" not in said


def test_an_unexpected_error_is_shown_as_a_code_and_logged_under_it(caplog):
    """Issue 58 (Low): messages named the server's exception types (and their text); now a code the user may quote,
    the traceback logged once under it."""
    import logging

    exc = KeyError("/srv/mirror/runs/secret")
    with caplog.at_level(logging.ERROR, logger="mirror.app"):
        shown, again = user_error(exc), user_error(exc)
    code = shown.split("error ")[1].split(" ")[0]
    assert "KeyError" not in shown and "/srv" not in shown and len(code) == 6 and shown == again
    logged = [r for r in caplog.records if code in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None  # once, with its traceback


def test_alpha_1_served_again_is_the_tuned_weights_not_a_blend():
    """Issue 60's newcomer: *Serve another α* → 1 served the run as trained, and the page called it "a blend" (α = 1 of
    the tuned weights, 0 of the base)."""
    from explorer.resources.runfacts import served_label
    from ui import render

    half, whole = blend_run(), blend_run(blend_alpha=1.0)
    assert "Serving a blend" in render.blend_text(half) and served_label(half) == "blend α=0.5"
    text = render.blend_text(whole)
    assert "as trained" in text and "blend" not in text and "0 of the base" not in text
    assert served_label(whole) == "tuned α=1"
    assert "with the blend" in render.moved_header(half)
    assert "with the blend" not in render.moved_header(whole) and "as trained" in render.moved_header(whole)
    # tab ①'s status lines and the run's table, as a real page showed them after *Serve another α* → 1 ("Blended and
    # indexed in 5 s", "Served: a blend …, α = 1 of run …", "0 × the base's + 1 × the tuned weights")
    for line in (render.served_status(whole), render.done_status(whole), render.run_md(whole)):
        assert "as trained" in line and "Blended" not in line and "a blend" not in line, line
    assert "0 × the base" not in render.run_md(whole) and "| Trained as run `aaaaaaaa` | value |" in render.run_md(
        whole
    )
    assert render.served_status(half).startswith("Blended and indexed") and "Served: a blend" in render.run_md(half)
    worse = [{"name": "STS-B dev", "what": "sentence pairs", "base": 80.0, "tuned": 70.0, "worse": True}]
    assert render.blend_verdict(worse, 0.5).startswith("The served model is a blend: α = 0.5")
    said = render.blend_verdict(worse, 1.0)  # the checks of α 1 served again (a real page: "is a blend: α = 1")
    assert "as trained" in said and "blend" not in said.replace("A lower α", "") and "worse than the base" in said
    assert "blend" not in render.blend_verdict([], 0.99999999)  # float noise of 1 is 1


def test_a_blend_of_a_run_that_blended_its_own_reads_alpha_of_the_tuned_weights():
    """The words preset serves α 0.75 of its tuned weights; a blend of it is α of the tuned weights too (a blend takes
    the run's own α into account: tests/test_explorer_forgetting.py checks the weights), and the blend's cost says
    "under a second", not "about under a second"."""
    from ui import render

    whole, half = blend_run(blend_alpha=1.0, run_alpha=0.75), blend_run(run_alpha=0.75)
    assert "Serving the tuned weights as trained" in render.blend_text(whole) and "preset" not in render.blend_text(
        whole
    )
    assert "α = 0.5 of the tuned weights of run `aaaaaaaa`, 0.5 of the base" in render.blend_text(half)
    served = blend_run(blend_alpha=None, run_alpha=0.75, tuned_index_seconds=0.4, forgetting=None)  # the run itself
    assert render.default_alpha(served) == 0.75  # the slider starts at the α served
    # Search names the run's own blend as it names a blend of the same α (a tester: "Tuned (mirror)" for one, "blend
    # α=0.75" for the other, same weights); a run as trained: nothing added
    assert render.tuned_side(served) == "α=0.75" and render.tuned_side(blend_run(blend_alpha=None)) == ""
    info = render.blend_info(served)
    assert "(this run's took under a second here; no retraining)" in info and "about under" not in info
