"""The forgetting check in the app (explorer.compare.forgetting over mirror.checks): its rows and `worse` logic on toy encoders
with known scores, the base's side kept per base, on the tiny random BERT over the bundled sets, and run after every
training run by the service (never failing it)."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from explorer.compare import forgetting
from explorer.compare.forgetting import CHECKS, Check, forgetting_check, verdict
from explorer.resources.record import record_of
from explorer.settings import Settings
from mirror import checks as engine
from mirror.checks import check_items
from mirror.errors import MirrorError
from tests.conftest import WORDS, blend, train
from ui import render

TOY = Check("Toy pairs", "toy.tsv", "toy similarity", 200)


class AngleEncoder:
    """A duck-typed encoder: string `a{k}` at angle 0, `b{k}` at the angle `angles[k]` (cosine falls as it
    grows). Counts the strings it encoded."""

    def __init__(self, angles: np.ndarray, fingerprint: str | None = None):
        self.angles, self.encoded = angles, 0
        if fingerprint is not None:
            self.fingerprint = lambda: fingerprint

    def encode(self, texts, batch_size=128, normalize=True):
        self.encoded += len(texts)
        theta = np.array([0.0 if t[0] == "a" else self.angles[int(t[1:])] for t in texts])
        return np.stack([np.cos(theta), np.sin(theta)], 1).astype(np.float32)


@pytest.fixture
def toy_gold(tmp_path, monkeypatch):
    """A 400-pair set, gold score k for pair k: check half = the 200 odd pairs. Returns the angle that ranks each
    pair perfectly (higher gold, smaller angle)."""
    n = 400
    (tmp_path / "toy.tsv").write_text("".join(f"a{k}\tb{k}\t{k}\n" for k in range(n)))
    monkeypatch.setattr(engine, "GOLD", tmp_path)
    monkeypatch.setattr(engine, "_KEPT_SIDES", {})
    return np.linspace(3.0, 0.1, n)


def test_check_halves_are_disjoint_capped_and_in_order(toy_gold):
    check, dev = check_items(TOY), check_items(TOY, half="dev")
    assert [p[2] for p in check[:3]] == [1.0, 3.0, 5.0] and [p[2] for p in dev[:3]] == [0.0, 2.0, 4.0]
    assert len(check) == len(dev) == 200 and not {p[0] for p in check} & {p[0] for p in dev}
    assert len(check_items(Check("Toy", "toy.tsv", "", 50))) == 50


def test_a_tuned_model_that_scrambles_what_the_base_knew_is_worse(toy_gold):
    perfect = AngleEncoder(toy_gold)
    shuffled = AngleEncoder(np.random.default_rng(0).permutation(toy_gold))
    out = forgetting_check(perfect, shuffled, checks=[TOY])
    (row,) = out["checks"]
    assert set(row) == {"name", "what", "metric", "items", "unit", "base", "tuned", "delta", "ci", "verdict", "worse"}
    assert row["name"] == "Toy pairs" and row["items"] == 200 and row["unit"] == "pairs" and row["base"] == 100.0
    assert row["tuned"] < 20 and row["delta"] == pytest.approx(row["tuned"] - row["base"], abs=0.11)
    assert row["ci"][0] <= row["delta"] <= row["ci"][1] < 0 and row["worse"] is True and row["verdict"] == "worse"
    assert "worse on 1 general check: Toy pairs (toy similarity): 100.0 →" in out["verdict"]
    assert "blend" in out["verdict"]


def test_the_same_model_or_a_better_one_is_not_worse(toy_gold):
    perfect = AngleEncoder(toy_gold)
    shuffled = AngleEncoder(np.random.default_rng(0).permutation(toy_gold))
    same = forgetting_check(perfect, perfect, checks=[TOY])
    assert same["checks"][0]["delta"] == 0 and not same["checks"][0]["worse"]
    assert same["verdict"] == "General checks: the tuned model is no worse than the base on any of them."
    better = forgetting_check(shuffled, perfect, checks=[TOY])
    assert not better["checks"][0]["worse"] and better["verdict"].endswith("and better on Toy pairs.")


def test_a_drop_within_the_margin_is_not_called_worse():
    rows = [{"name": "X", "what": "x", "base": 50.0, "tuned": 49.2, "delta": -0.8, "worse": False}]
    assert "no worse" in verdict(rows)


def test_the_base_is_encoded_once_per_base(toy_gold):
    base = AngleEncoder(toy_gold, fingerprint="base-1")
    tuned = AngleEncoder(toy_gold[::-1].copy())
    first = forgetting_check(base, tuned, checks=[TOY])
    encoded = base.encoded
    assert encoded == 400  # 200 pairs of two distinct strings
    second = forgetting_check(base, tuned, checks=[TOY])
    assert base.encoded == encoded and second == first  # its scores were kept
    forgetting_check(base, tuned, checks=[TOY], half="dev")
    assert base.encoded == 2 * encoded  # another half: other pairs
    other = AngleEncoder(toy_gold, fingerprint="base-2")
    forgetting_check(other, tuned, checks=[TOY])
    assert other.encoded == encoded


def test_forgetting_check_on_the_tiny_model_over_the_bundled_sets(tiny_bert):
    from mirror.encoder import load_encoder

    base = load_encoder(tiny_bert, pooling="mean")
    out = forgetting_check(base, base)
    assert [r["name"] for r in out["checks"]] == [c.name for c in CHECKS]
    for row, check in zip(out["checks"], CHECKS, strict=True):
        assert row["items"] == len(check_items(check)) <= check.max_items and row["items"] >= 50
        assert row["delta"] == 0 and row["verdict"] == "same" and row["base"] == row["tuned"]
    assert "no worse" in out["verdict"]


# ------------------------------------------------------------------------------------------------------ the service


@pytest.mark.checks
def test_every_run_ends_with_the_forgetting_check(app, tiny_bert):
    s = app.session()
    app.loader.load_pasted(s, "cat\ndog\ncar\nbus\nred\nblue\nbig\nsmall")
    events = train(app, s, tiny_bert)
    assert events[-1].kind == "done", events[-1]
    phases = [e.text for e in events if e.kind == "phase"]
    at = phases.index("Checking general similarity (the forgetting check)")
    assert at < phases.index("Preparing downloads")
    check = s.run.stats["forgetting"]
    assert [r["name"] for r in check["checks"]] == [c.name for c in CHECKS] and check["seconds"] >= 0
    assert app.saved.open_run(app.session(), s.run.folder.name).stats["forgetting"] == check  # kept in run.json
    shown = render.forgetting_md(s.run)
    assert "| general check | score | items | base | tuned | change | 95% interval of the change | verdict |" in shown
    assert all(f"| {c.name} |" in shown for c in CHECKS) and check["verdict"] in shown


@pytest.mark.checks
def test_a_run_is_served_before_its_checks_and_its_downloads_follow(app, tiny_bert, monkeypatch):
    """The run is searchable while its general checks run (they add no wait before Search: seconds on a CPU without
    bf16, more for a larger base); its card and downloads carry them once they are in."""
    s, seen = app.session(), {}
    app.loader.load_pasted(s, "cat\ndog\ncar\nbus\nred\nblue\nbig\nsmall")
    real = forgetting.forgetting_check

    def while_checking(base, tuned, **kw):  # what a user sees while the checks run
        run = s.run
        seen.update(pending=run.checks_pending, zip=run.model_zip.exists(), shown=render.forgetting_md(run))
        seen["hits"] = app.searcher.search(s, "cat", k=3)[0]["tuned"]
        other = app.saved.open_run(app.session(), run.folder.name)  # another page opens its link meanwhile
        seen["other"] = (other, other.checks_pending, render.forgetting_md(other))
        with pytest.raises(MirrorError, match="still running"):  # its card has no checks yet
            app.explore.push(s, "me/run", "hf_x")
        seen["cancel"] = app.trainer.cancel(s)
        return real(base, tuned, **kw)

    monkeypatch.setattr(forgetting, "forgetting_check", while_checking)
    events = train(app, s, tiny_bert)
    kinds = [e.kind for e in events]
    assert kinds[-1] == "done" and kinds.count("served") == 1, kinds
    served, done = events[kinds.index("served")], events[-1]
    assert served.run is done.run is s.run
    phases = [e.text for e in events[kinds.index("served") :] if e.kind == "phase"]
    assert phases == ["Checking general similarity (the forgetting check)", "Preparing downloads"]
    assert seen["pending"] and not seen["zip"] and seen["shown"] == render.message(render.CHECKS_PENDING, "info")
    assert [h["text"] for h in seen["hits"]][0] == "cat"
    assert seen["other"][1:] == (True, seen["shown"]) and seen["other"][0] is s.run  # the one the checks complete
    assert "served already" in seen["cancel"] and not (s.run.folder / "STOP").exists()  # a cancel comes too late
    run = s.run
    assert not run.checks_pending and run.model_zip.is_file() and run.index_zip.is_file()
    assert run.stats["forgetting"]["checks"] and 0 < run.stats["served_seconds"] <= run.stats["wall_seconds"]
    card = (run.folder / "model" / "README.md").read_text(encoding="utf-8")
    assert all(f"| {c.name} |" in card for c in CHECKS)  # the card (and the zip) carry the checks
    with zipfile.ZipFile(run.model_zip) as zf:
        assert zf.read("mirror-model/README.md").decode("utf-8") == card
    kept = app.saved.open_run(app.session(), run.folder.name)
    assert not kept.checks_pending and kept.stats["forgetting"] == run.stats["forgetting"]
    assert "searchable after" in render.done_status(run)


@pytest.mark.checks
def test_a_blend_opened_during_its_checks_is_the_one_they_complete(app, tuned, monkeypatch):
    """A page reloaded during a blend's checks (or its link opened elsewhere) gets the live run: not mistaken for one
    whose server stopped (which would write its card and zips beside the blend's own)."""
    real, seen = forgetting.forgetting_check, []

    def while_checking(base, tuned_encoder, **kw):
        blend = tuned.run
        opened = app.saved.open_run(app.session(), blend.folder.name)
        seen.append((opened is blend, opened.checks_pending, blend.model_zip.exists()))
        return real(base, tuned_encoder, **kw)

    monkeypatch.setattr(forgetting, "forgetting_check", while_checking)
    events = list(app.saved.blend_run(tuned, 0.5))
    assert events[-1].kind == "done" and seen and all(s == (True, True, False) for s in seen), seen
    assert not app.registry.runs() and not tuned.run.checks_pending and tuned.run.model_zip.is_file()


def test_a_run_whose_server_stopped_during_its_checks_opens_with_its_downloads(app, tuned):
    """run.json says its checks were pending and no run of that id is in progress (the server restarted): it opens
    as a run without checks, its downloads made then."""
    run = tuned.run
    run.model_zip.unlink()
    app.runs.save(run, checks_pending=True)
    opened = app.saved.open_run(app.session(), run.folder.name)
    assert not opened.checks_pending and opened.model_zip.is_file()
    assert not app.runs.load(run.folder.name).checks_pending
    # its card (the zip's, and a push's) and its page say the checks did not run, and why (issue 37)
    card = (run.folder / "model" / "README.md").read_text()
    assert "Not checked: the server restarted while they ran." in card
    assert "not run for this run (the server restarted while they ran)" in render.forgetting_md(opened)


@pytest.mark.checks
def test_a_failing_check_never_fails_the_run(app, tiny_bert, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("no gold here")

    monkeypatch.setattr(forgetting, "forgetting_check", broken)
    s = app.session()
    app.loader.load_pasted(s, "cat\ndog\ncar\nbus")
    events = train(app, s, tiny_bert)
    assert events[-1].kind == "done" and s.run.stats["forgetting"] is None
    assert "forgetting check failed" in caplog.text
    assert render.forgetting_md(s.run) == "**General checks:** not run for this run."


def test_the_check_can_be_switched_off(tmp_path, tiny_bert):
    from explorer import MirrorApp

    assert Settings.from_env({"MIRROR_GENERAL_CHECKS": "0"}).general_checks is False
    assert Settings.from_env({}).general_checks is True
    off = Settings(work_dir=tmp_path / "w", model_roots=(tiny_bert.resolve(),), general_checks=False)
    app = MirrorApp(off)
    s = app.session()
    app.loader.load_pasted(s, "cat\ndog\ncar\nbus")
    events = train(app, s, tiny_bert)
    assert events[-1].kind == "done" and "forgetting" not in s.run.stats
    assert not any("forgetting" in e.text for e in events if e.kind == "phase")


def test_forgetting_md_marks_the_worse_checks():
    from types import SimpleNamespace

    rows = [
        {"name": "SimLex-999", "what": "w", "pairs": 499, "base": 40.0, "tuned": 45.0, "delta": 5.0, "worse": False},
        {
            "name": "Long documents",
            "what": "l",
            "metric": "graded nDCG@10 ×100",
            "items": 206,
            "base": 48.3,
            "tuned": 46.6,
            "delta": -1.7,
            "ci": [-3.4, -0.3],
            "verdict": "worse",
            "worse": True,
        },
    ]
    run = SimpleNamespace(record=record_of({"forgetting": {"checks": rows, "verdict": verdict(rows)}}))
    shown = render.forgetting_md(run)
    assert shown.startswith("> **Note:** Tuning made the model worse on 1 general check: Long documents")
    assert "| Long documents | graded nDCG@10 ×100 | 206 | 48.3 | 46.6 | **-1.7** ⚠ | -3.4 to -0.3 | worse |" in shown
    # a row kept before the words and the metric existed (an old run's stats) still shows
    assert "| SimLex-999 | Spearman ×100 | 499 | 40.0 | 45.0 | +5.0 |  | same |" in shown
    assert render.forgetting_md(None) == ""


@pytest.mark.checks
def test_a_blend_is_served_as_a_new_run_with_its_own_checks(app, tuned):
    parent, events, run = blend(app, tuned, 0.5)
    assert run.folder != parent.folder and run.stats["blend_alpha"] == 0.5
    kinds = [e.text if e.kind == "phase" else e.kind for e in events]
    assert kinds.index("served") < kinds.index("Checking general similarity (the forgetting check)")  # served first
    assert render.served_status(run).startswith("Blended and indexed")  # its own time, not its parent's
    assert "served_seconds" not in run.stats and run.stats["blend_seconds"] >= 0
    # what a blend re-encodes, timed: the parent's tuned index (mirror.job), and the blend's own for a blend of it
    for served in (parent, run):
        took = served.record.timing.tuned_index_seconds
        assert f"(this run's took {render.fmt_seconds(took)} here; no retraining)" in render.blend_info(served)
    assert not run.checks_pending and run.model_zip.is_file() and "| Short articles |" in render.forgetting_md(run)
    assert run.stats["forgetting"] is not parent.stats["forgetting"] and run.stats["forgetting"]["checks"]
    assert render.default_alpha(run) == 0.5 and "α = 0.5 of the tuned weights" in render.forgetting_md(run)
    assert [e.kind for e in app.saved.blend_run(tuned, 2)] == ["error"]


def test_the_blend_slider_starts_at_the_suggestion_only_when_a_check_is_worse():
    from types import SimpleNamespace

    def run(stats):
        return SimpleNamespace(record=record_of(stats))

    worse = {"checks": [{"worse": True}, {"worse": False}]}
    fine = {"checks": [{"worse": False}]}
    assert render.default_alpha(None) == 1.0
    assert render.default_alpha(run({})) == 1.0 and render.default_alpha(run({"forgetting": None})) == 1.0
    assert render.default_alpha(run({"forgetting": fine})) == 1.0
    assert render.default_alpha(run({"forgetting": worse})) == forgetting.SUGGESTED_ALPHA
    assert render.default_alpha(run({"forgetting": worse, "blend_alpha": 0.0})) == 0.0  # a blend: its own α
    assert f"blend at α = {forgetting.SUGGESTED_ALPHA:g}" in verdict([{**r, "worse": True} for r in [ROW]])


ROW = {"name": "Long texts", "what": "long", "pairs": 60, "base": 80.0, "tuned": 70.0, "delta": -10.0, "worse": False}


def test_warm_up_keeps_the_base_scores(toy_gold):
    base = AngleEncoder(toy_gold, fingerprint="base-w")
    seconds = forgetting.warm_up(base, [TOY])  # what scoring them took: the time estimate's price of the checks
    assert base.encoded == 400 and seconds is not None and seconds >= 0
    forgetting_check(base, AngleEncoder(toy_gold), checks=[TOY])
    assert base.encoded == 400
    assert forgetting.warm_up(base, [TOY]) is None and base.encoded == 400  # kept already: not scored again


def test_warm_up_off_loads_the_bundled_model_only(tmp_path, monkeypatch):
    from explorer import MirrorApp
    from explorer.compare import forgetting, maps

    assert Settings.from_env({"MIRROR_WARM_UP": "off"}).warm_up is False and Settings.from_env({}).warm_up is True
    called = []
    monkeypatch.setattr(forgetting, "warm_up", lambda enc: called.append("checks"))
    monkeypatch.setattr(maps, "warm_up", lambda: called.append("maps"))
    app = MirrorApp(Settings(work_dir=tmp_path / "w", warm_up=False))
    monkeypatch.setattr(app.models, "warm_up", lambda: called.append("model"))
    app.warm_up()
    assert called == ["model"]
    app = MirrorApp(Settings(work_dir=tmp_path / "w2", general_checks=False))
    monkeypatch.setattr(app.models, "warm_up", lambda: called.append("model"))
    # the estimate's calibration on the small example (test_explorer_estimate's warm-up tests time it): recorded here
    monkeypatch.setattr(app.planner, "warm_up", lambda checks_s: called.append(("estimate", checks_s)))
    called.clear()
    app.warm_up()
    assert called == ["model", ("estimate", None), "maps"]  # the checks are off: nothing of theirs to score or price


# ------------------------------------------------------------------------------------ the user's own long texts


class BagEncoder:
    """Bag of hashed words (no tokenizer: words are counted as tokens); `noise` > 0 adds per-text noise that
    scrambles every neighbourhood."""

    def __init__(self, noise: float = 0.0):
        self.noise = noise

    DIM = 4096  # few enough collisions between 30 texts' topic words that equal encoders find every half

    def encode(self, texts, batch_size=128, normalize=True):
        import zlib

        out = np.zeros((len(texts), self.DIM))
        for i, t in enumerate(texts):
            for w in t.split():  # crc32, not hash(): str hashes change with every process (PYTHONHASHSEED)
                out[i, zlib.crc32(w.encode()) % self.DIM] += 1.0
            if self.noise:
                out[i] += self.noise * np.random.default_rng(zlib.crc32(t.encode())).normal(size=self.DIM)
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def long_texts(n: int, words: int = 120) -> list[str]:
    return [" ".join(f"topic{i % 7}x{i} w{j}" for j in range(words // 2)) for i in range(n)]


def test_own_long_texts_reports_agreement_and_halves_when_there_are_enough_long_strings():
    texts = long_texts(30) + ["cat", "dog"]
    same = forgetting.own_long_texts(BagEncoder(), BagEncoder(), texts)
    assert same["strings"] == 30 and same["min_tokens"] == forgetting.LONG_TOKENS
    assert same["overlap_at_10"] == 1.0 and same["halves_mrr_base"] == same["halves_mrr_tuned"] == 100.0
    scrambled = forgetting.own_long_texts(BagEncoder(), BagEncoder(noise=3.0), texts)
    assert scrambled["overlap_at_10"] < 0.5 and scrambled["halves_mrr_tuned"] < scrambled["halves_mrr_base"]
    assert forgetting.own_long_texts(BagEncoder(), BagEncoder(), long_texts(19) + ["cat"] * 50) is None  # too few
    assert forgetting.own_long_texts(BagEncoder(), BagEncoder(), long_texts(30, words=40)) is None  # too short


def test_the_own_long_texts_figures_are_shown_as_information_not_a_score():
    from types import SimpleNamespace

    own = {"strings": 30, "min_tokens": 100, "overlap_at_10": 0.42, "halves_mrr_base": 80.0, "halves_mrr_tuned": 75.5}
    rows = [{"name": "X", "what": "x", "items": 9, "base": 1.0, "tuned": 1.0, "delta": 0.0, "worse": False}]
    shown = render.forgetting_md(
        SimpleNamespace(record=record_of({"forgetting": {"checks": rows, "own_long_texts": own}}))
    )
    assert "Your own long texts — information, not a quality score." in shown
    assert "your 30 longest strings (≥ 100 tokens)" in shown and "keeps 42%" in shown and "80.0 (base) → 75.5" in shown
    assert "Your own long texts" not in render.forgetting_md(
        SimpleNamespace(record=record_of({"forgetting": {"checks": rows}}))
    )


def test_the_remedy_is_offered_only_for_a_run_as_trained_with_a_worse_check():
    from types import SimpleNamespace

    worse = {"checks": [{"worse": True}]}
    assert render.remedy_offered(SimpleNamespace(record=record_of({"forgetting": worse}))) is True
    assert render.remedy_offered(SimpleNamespace(record=record_of({"forgetting": worse, "blend_alpha": 0.5}))) is False
    assert (
        render.remedy_offered(SimpleNamespace(record=record_of({"forgetting": {"checks": [{"worse": False}]}})))
        is False
    )
    assert (
        render.remedy_offered(SimpleNamespace(record=record_of({}))) is False and render.remedy_offered(None) is False
    )


@pytest.mark.checks
def test_a_run_on_long_strings_carries_the_own_long_texts_figures(app, tiny_bert):
    s = app.session()
    app.loader.load_pasted(s, "\n".join(long_texts(24, words=220)))
    events = train(app, s, tiny_bert)
    assert events[-1].kind == "done", events[-1]
    own = s.run.stats["forgetting"]["own_long_texts"]
    assert own["strings"] == 24 and 0 <= own["overlap_at_10"] <= 1 and 0 < own["halves_mrr_base"] <= 100
    assert "information, not a quality score" in render.forgetting_md(s.run)


def weights(folder) -> dict:
    from safetensors.torch import load_file

    return load_file(str(next(folder.rglob("model.safetensors"))))


def test_every_blend_alpha_is_of_the_tuned_weights_as_trained_also_for_a_run_that_blended_its_own(app, tiny_bert):
    """A newcomer's pass: a words run served at its preset's α 0.75; Explore's slider read 1, and Blend at 1 served
    that α 0.75 again, called "the tuned weights as trained" (a blend took α of the run's model, itself a blend).
    A blend now takes the run's own α into account: Blend at the α served serves the same weights, Blend at 1 the
    weights as trained (the same run, unblended), and the slider starts at the α served."""
    import torch

    trained, own = app.session(), app.session()
    for s in (trained, own):
        app.loader.load_pasted(s, "\n".join(WORDS))
    assert train(app, trained, tiny_bert, blend_alpha=1.0, seed=3)[-1].kind == "done"
    assert train(app, own, tiny_bert, blend_alpha=0.75, seed=3)[-1].kind == "done"
    served = own.run
    assert served.record.training.run_alpha == 0.75 and render.default_alpha(served) == 0.75
    as_trained_w, served_w = weights(trained.run.folder / "model"), weights(served.folder / "model")
    _, _, again = blend(app, own, 0.75)  # the slider unmoved: the same model
    _, _, whole = blend(app, own, 1.0)  # α 1: the run as it trained, before its own blend
    for key, w in served_w.items():
        if w.is_floating_point():
            assert torch.allclose(weights(again.folder / "model")[key], w, atol=1e-5), key
            assert torch.allclose(weights(whole.folder / "model")[key], as_trained_w[key], atol=1e-4), key
    assert any(not torch.equal(as_trained_w[k], w) for k, w in served_w.items() if w.is_floating_point())
    assert render.default_alpha(whole) == 1.0 and "nothing of the base" in render.blend_text(whole)


def test_the_remedy_is_offered_only_above_the_suggested_alpha_and_its_verdict_says_so():
    """The one-click remedy blends at α 0.5 of the tuned weights: offered for a run served above it (α 1, the words
    preset's 0.75), not for the sentences preset's 0.25 (it would take back less of the base), whose verdict named
    "blend at α = 0.5" too; now it names its own blend and says a lower α keeps more of the base."""
    from types import SimpleNamespace

    rows = [{"name": "Long texts", "what": "long", "pairs": 60, "base": 80.0, "tuned": 70.0, "delta": -10.0}]
    rows[0]["worse"] = True
    worse = {"checks": rows, "verdict": verdict(rows)}
    for alpha, offered in ((1.0, True), (0.75, True), (0.5, False), (0.25, False)):
        run = SimpleNamespace(record=record_of({"run_alpha": alpha, "forgetting": worse}), checks_pending=False)
        assert render.remedy_offered(run) is offered
        assert render.default_alpha(run) == (forgetting.SUGGESTED_ALPHA if offered else alpha)
        said = render.forgetting_md(run)
        assert (f"blend at α = {forgetting.SUGGESTED_ALPHA:g}" in said) is offered, said
        assert (f"this run's own blend, α = {alpha:g} of the tuned weights" in said) is not offered


def test_an_interval_end_near_zero_keeps_the_sign_it_has():
    """A tester read "+0.0 to +2.7" beside *better* (whose whole interval is above zero): an end that rounds to 0.0
    but is not 0 keeps two decimals."""
    assert render._interval([0.04, 2.71]) == "+0.04 to +2.7" and render._interval([-0.03, 0.0]) == "-0.03 to +0.0"
    assert render._interval([0.25, 1.0]) == "+0.2 to +1.0" and render._interval(None) == ""
