"""A pairs run's blend chosen by the run (issue 60, mirror/choose.py): the rule, the weights it leaves, and the whole
path (mirror.job.tune_and_index): the unblended weights kept, the served model the chosen blend, its index what
that model computes, the gain reported on the rows that did not choose."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from index.store import FolderIndexes, VectorIndex
from mirror.checks import CHECKS
from mirror.choose import ALPHAS, Candidate, Choice, better_of, choose_blend, noise, pool_of, within_rule
from mirror.config import MirrorConfig
from tests.conftest import VOCAB_WORDS

TINY_PAIRS = {"batch_size": 8, "lr": 1e-3, "device": "cpu", "pair_max_length": 32}
WORD_CHECKS = [c for c in CHECKS if c.name in ("SimLex-999", "WordSim-353")]  # cheap for a tiny model


def rows_of_pairs(n: int) -> tuple[list[str], list[str]]:
    """`n` distinct strings of the tiny vocabulary, each with a partner of its own."""
    combos = itertools.product(VOCAB_WORDS, VOCAB_WORDS, VOCAB_WORDS)
    texts = [" ".join(c) for c, _ in zip(combos, range(n), strict=False)]
    return texts, [" ".join(reversed(t.split())) + " here" for t in texts]


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if v.is_floating_point()}


def assert_served_blend(base: object, run, alpha: float) -> None:
    """The served model (run/model) is the blend at `alpha` of the base and the weights as trained (run/tuned_model)."""
    from mirror.encoder import load_encoder

    b = weights(load_encoder(str(base), device="cpu").model)
    t = weights(load_encoder(str(run / "tuned_model"), device="cpu", allowed_roots=[run]).model)
    s = weights(load_encoder(str(run / "model"), device="cpu", allowed_roots=[run]).model)
    for key in s:
        torch.testing.assert_close(s[key], (1 - alpha) * b[key] + alpha * t[key], rtol=1e-5, atol=1e-5)


def test_the_rule_keeps_every_check_within_half_its_margin():
    margins = {c.name: c.margin for c in CHECKS}
    name = next(iter(margins))
    assert within_rule({name: -0.5 * margins[name]}, CHECKS)
    assert not within_rule({name: -0.5 * margins[name] - 0.01}, CHECKS)
    assert within_rule({n: 3.0 for n in margins}, CHECKS)


def test_a_change_at_the_rules_edge_holds_only_with_room_for_its_noise():
    """Issue 60, the Gene Ontology: α 0.5 held WordSim-353's dev half at -0.46 (the rule: -0.5) and its check half
    fell to -1.4. A change now holds only when it stays within the rule one standard error lower."""
    name = "WordSim-353"
    assert within_rule({name: -0.46}, CHECKS)  # as measured: inside by 0.04
    assert not within_rule({name: -0.46}, CHECKS, {name: 0.4})  # but not by its noise
    assert within_rule({name: -0.1}, CHECKS, {name: 0.4}) and within_rule({name: 2.0}, CHECKS, {name: 1.5})
    assert within_rule({name: -0.46}, CHECKS, {"SimLex-999": 3.0})  # another check's noise is not this one's
    # the room is at most the half margin: a check too noisy to resolve the rule holds when it measured no loss
    # (FOLDOC's α 0.75: WordSim-353 +0.81 ± 2.18 on its dev half was refused by a full standard error)
    assert within_rule({name: 0.81}, CHECKS, {name: 2.18}) and within_rule({name: 0.0}, CHECKS, {name: 2.18})
    assert not within_rule({name: -0.05}, CHECKS, {name: 2.18})


def test_the_noise_of_a_change_is_its_paired_bootstrap_spread_and_shrinks_with_more_items():
    from mirror.checks import Docs

    rng = np.random.default_rng(0)
    gold = rng.normal(size=400)

    def pairs_noise(n: int, jitter: float) -> float:
        items = tuple(("a", "b", float(g)) for g in gold[:n])
        base = gold[:n] + rng.normal(scale=1.0, size=n)
        return noise(items, base, base + rng.normal(scale=jitter, size=n))

    assert pairs_noise(400, 0.0) == 0.0  # the same side twice: no change, no spread
    small, large = pairs_noise(50, 0.5), pairs_noise(400, 0.5)
    assert small > large > 0  # fewer items, a wider spread
    docs = Docs(ids=("a", "b", "c", "d"), groups=("g",) * 4, sources=("s",) * 4, texts=("t",) * 4, lines=(1, 2, 3, 4))
    d = np.array([0.1, -0.2, 0.05, 0.0])
    base = np.array([0.5, 0.6, 0.7, 0.8])
    assert noise(docs, base, base + d) == pytest.approx(100 * d.std(ddof=1) / 2)  # the mean's standard error


def test_the_pool_holds_every_target_and_a_seeded_sample():
    pool = pool_of(5000, [3, 10, 4999], size=100, seed=1)
    assert len(pool) == 100 and {3, 10, 4999} <= set(pool) and pool == pool_of(5000, [3, 10, 4999], 100, 1)
    assert pool_of(50, [1, 2], size=100) == list(range(50))


def test_the_choice_is_the_best_held_out_alpha_within_the_rule_and_the_weights_are_its_blend(tiny_bert):
    from mirror.encoder import load_encoder

    base = load_encoder(str(tiny_bert), device="cpu")
    tuned = copy.deepcopy(base)
    torch.manual_seed(0)
    with torch.no_grad():
        for w in tuned.model.parameters():
            w.add_(0.05 * torch.randn_like(w))  # "trained": another model of the same shape
    trained, original = weights(tuned.model), weights(base.model)
    texts, partners = rows_of_pairs(300)
    choice = choose_blend(base, tuned, texts, partners, list(range(0, 300, 7)), checks=WORD_CHECKS, pool_size=120)
    assert [c.alpha for c in choice.candidates] == list(ALPHAS) and choice.rows == 43 and choice.pool == 120
    kept = [c for c in choice.candidates if c.within]
    if kept:  # the most held-out MRR@10 among the ones within the rule, and none measured better was within it
        best = max(kept, key=lambda c: (c.mrr10, -c.alpha))  # a tie: the blend nearer the base
        assert choice.alpha == best.alpha
        assert all(c.within is False for c in choice.candidates if (c.mrr10, -c.alpha) > (best.mrr10, -best.alpha))
        # its reason's gain is the table's: the figures as kept (a tester read +2.0 there and +2.1 in the table)
        kept_as = choice.to_dict()
        gain = next(c["mrr10"] for c in kept_as["candidates"] if c["alpha"] == choice.alpha) - kept_as["base_mrr10"]
        assert f"({gain:+.1f} MRR@10 on " in choice.reason
    else:
        assert choice.alpha == min(ALPHAS) and "no blend kept" in choice.reason
    a = choice.alpha
    for key, w in weights(tuned.model).items():  # the encoder is left at the chosen blend of the weights as trained
        torch.testing.assert_close(w, (1 - a) * original[key] + a * trained[key], rtol=1e-5, atol=1e-6)
    assert weights(base.model).keys() == original.keys()
    assert all(torch.equal(weights(base.model)[k], original[k]) for k in original)  # the base untouched


def test_a_tie_on_the_held_out_rows_goes_to_the_blend_nearer_the_base(tiny_bert, monkeypatch):
    """Issue 60, WordNet's short pairs: every α scored the base's MRR@10 on the choice rows, α 1 was checked first (a
    tie kept more tuning) and three rounds of checks paid for no gain. A tie now goes to the α nearer the base,
    checked first: one round."""
    import mirror.choose as choose
    from mirror.encoder import load_encoder

    base = load_encoder(str(tiny_bert), device="cpu")
    tuned = copy.deepcopy(base)
    checked = []
    monkeypatch.setattr(choose, "held_mrr", lambda *a, **k: 73.75)  # no in-domain signal at any α
    monkeypatch.setattr(choose, "check_changes", lambda *a, **k: checked.append(1) or ({}, {}))
    texts, partners = rows_of_pairs(60)
    choice = choose_blend(base, tuned, texts, partners, list(range(0, 60, 3)), checks=WORD_CHECKS, pool_size=40)
    assert choice.alpha == min(ALPHAS) and len(checked) == 1


def test_a_pairs_run_serves_its_chosen_blend_keeps_the_weights_as_trained_and_reports_the_other_rows(
    tiny_bert, tmp_path
):
    from index.store import FolderIndexes, VectorIndex
    from mirror.encoder import load_encoder
    from mirror.job import Finished, tune_and_index

    texts, partners = rows_of_pairs(440)  # 44 held out: 22 choose, 22 report
    config = MirrorConfig.preset("sentences", model=str(tiny_bert), pairs=True, max_steps=2, **TINY_PAIRS)
    assert config.blend_choose  # the pairs preset chooses
    events: list = []
    run = tmp_path / "run"
    tune_and_index(
        texts, config, run, indexes=FolderIndexes(), emit=events.append, pairs=partners, columns=("name", "text")
    )
    stats = next(e for e in events if isinstance(e, Finished)).stats
    choice = stats["blend_choice"]
    assert stats["run_alpha"] == choice["alpha"] and choice["rows"] == 22
    assert [c["alpha"] for c in choice["candidates"]] == list(ALPHAS)
    assert stats["pairs"]["held_out"] == 44 and stats["pairs"]["gain"]["rows"] == 22  # reported on the others
    # the served model is the chosen blend of the base and the weights as trained (kept in tuned_model/)
    served = load_encoder(str(run / "model"), device="cpu", allowed_roots=[run])
    trained = load_encoder(str(run / "tuned_model"), device="cpu", allowed_roots=[run])
    base = load_encoder(str(tiny_bert), device="cpu")
    a = choice["alpha"]
    b, t, s = weights(base.model), weights(trained.model), weights(served.model)
    for key in s:
        torch.testing.assert_close(s[key], (1 - a) * b[key] + a * t[key], rtol=1e-5, atol=1e-5)
    saved = json.loads((run / "model" / "mirror_config.json").read_text())
    assert saved["config"]["blend_alpha"] == a and saved["config"]["blend_choose"] is True
    # what a search finds is what the served model computes
    index = VectorIndex.load(run / "tuned_index")
    some = [0, 17, 300]
    np.testing.assert_allclose(index.stored(some), served.encode([texts[i] for i in some], normalize=True), atol=1e-5)
    from mirror.job import Phase

    assert any(isinstance(e, Phase) and e.text.startswith("Choosing the blend") for e in events)


def test_the_page_shows_the_choice_and_one_click_serves_another_blend_of_the_weights_as_trained(
    app, tiny_bert, tmp_path
):
    """Issue 60: the verdict table shows the α the run chose and the others it measured; picking another serves a
    blend of the weights as trained (tuned_model/) at that α, whatever the served run's own α."""
    import dataclasses

    from mirror.encoder import load_encoder
    from tests.conftest import TINY
    from ui import render
    from ui.explore import choice_update

    texts, partners = rows_of_pairs(440)
    path = tmp_path / "pairs.csv"
    path.write_text("name,summary\n" + "\n".join(f"{t},{p}" for t, p in zip(texts, partners, strict=True)) + "\n")
    app.settings = dataclasses.replace(app.settings, general_checks=True)
    s = app.session()
    app.loader.load_file(s, str(path), "name", "pairs.csv", "summary")
    assert list(app.trainer.train(s, str(tiny_bert), "auto", {**TINY, "blend_choose": True}))[-1].kind == "done"
    run = s.run
    choice = run.record.training.blend_choice
    assert choice and run.record.training.run_alpha == choice["alpha"]
    table = render.forgetting_md(run)
    assert "**The blend this run chose:**" in table
    assert all(f"| α {a:g}" in table for a in ALPHAS) and "← chosen" in table and "(served)" in table
    checked = [c for c in choice["candidates"] if c["checks"]]  # each checked α says its changes' noise, shown as ±
    assert checked and all(c["noise"].keys() == c["checks"].keys() for c in checked) and " ± " in table
    picker = choice_update(run)
    assert (
        picker["visible"] and [v for _, v in picker["choices"]] == list(ALPHAS) and picker["value"] == choice["alpha"]
    )
    other = next(a for a in ALPHAS if a != choice["alpha"])
    events = list(app.saved.blend_run(s, other))  # what the picker's click runs
    assert events[-1].kind == "done", events[-1]
    blended = s.run
    b = weights(load_encoder(str(tiny_bert), device="cpu").model)
    t = weights(load_encoder(str(run.folder / "tuned_model"), device="cpu", allowed_roots=[run.folder]).model)
    served = weights(load_encoder(str(blended.folder / "model"), device="cpu", allowed_roots=[blended.folder]).model)
    for key in served:
        torch.testing.assert_close(served[key], (1 - other) * b[key] + other * t[key], rtol=1e-5, atol=1e-5)
    assert choice_update(blended)["value"] == other  # the picker says which one is served now


def test_a_row_sharing_its_partner_is_found_by_any_of_its_siblings(tiny_bert):
    """Short pairs (an acronym with several expansions): the choice's held-out measure counts a sibling found as the
    row found, as the run's own measure does."""
    from mirror.choose import held_mrr
    from mirror.encoder import load_encoder

    encoder = load_encoder(str(tiny_bert), device="cpu")
    strings = ["cat dog", "dog cat", "red bus", "blue car"]
    partners = ["pets", "pets", "bus", "car"]  # rows 0 and 1 share theirs
    # the pool holds row 1 but not row 0: finding row 0's partner finds its sibling, at a rank within the top 10
    assert held_mrr(encoder, strings, partners, [0], [1, 2, 3]) > 0
    assert held_mrr(encoder, strings, partners, [2], [0, 1, 3]) == 0  # no row of its partner in the pool: not found


def test_a_stop_asked_while_it_chooses_ends_the_run_there_with_nothing_served(tiny_bert, tmp_path):
    from index.store import FolderIndexes
    from mirror.job import Finished, Phase, Stopped, tune_and_index

    texts, partners = rows_of_pairs(440)
    config = MirrorConfig.preset("sentences", model=str(tiny_bert), pairs=True, max_steps=2, **TINY_PAIRS)
    events: list = []
    asked = {"stop": False}

    def emit(ev) -> None:
        events.append(ev)
        if isinstance(ev, Phase) and ev.text.startswith("Choosing the blend"):
            asked["stop"] = True  # the user presses Cancel as the choice begins

    run = tmp_path / "run"
    tune_and_index(
        texts, config, run, indexes=FolderIndexes(), emit=emit, should_stop=lambda: asked["stop"], pairs=partners
    )
    assert isinstance(events[-1], Stopped) and not any(isinstance(e, Finished) for e in events)
    assert not (run / "model").exists() and not (run / "tuned_index").exists()


def choice_of(alpha: float, gains: dict[float, float], within: dict[float, bool | None]) -> Choice:
    """A Choice as choose_blend makes one: the base at 50, each α's gain and whether its checks kept the rule."""
    candidates = tuple(Candidate(a, 50 + gains[a], within=within.get(a)) for a in ALPHAS)
    return Choice(alpha, 50.0, candidates, 40, 400, "")


def test_a_blend_is_bound_when_the_checks_refused_the_alpha_the_rows_gain_most_at():
    gains = {1.0: 6.0, 0.75: 5.5, 0.5: 4.0, 0.25: 2.0}
    assert not choice_of(1.0, gains, {1.0: True}).bound  # the best α kept: nothing to gain from a second training
    held_down = choice_of(0.5, gains, {1.0: False, 0.75: False, 0.5: True})
    assert held_down.bound and held_down.kept and held_down.gain == pytest.approx(4.0)
    none_kept = choice_of(0.25, gains, dict.fromkeys(ALPHAS, False))
    assert none_kept.bound and not none_kept.kept
    tie = {1.0: 3.0, 0.75: 3.0, 0.5: 1.0, 0.25: 1.0}  # a tie goes to the α nearer the base, as choose_blend orders them
    assert not choice_of(0.75, tie, {0.75: True}).bound


def test_the_second_training_is_served_only_when_it_gains_more_or_alone_keeps_the_checks():
    gains = {1.0: 6.0, 0.75: 5.5, 0.5: 4.0, 0.25: 2.0}
    first = choice_of(0.5, gains, {1.0: False, 0.75: False, 0.5: True})
    assert better_of(first, choice_of(0.75, gains, {1.0: False, 0.75: True}))  # +5.5 against +4.0
    assert not better_of(first, choice_of(0.5, gains, {1.0: False, 0.75: False, 0.5: True}))  # a tie: the first
    assert not better_of(first, choice_of(0.25, gains, dict.fromkeys(ALPHAS, False)))  # it kept none
    nothing_kept = choice_of(0.25, gains, dict.fromkeys(ALPHAS, False))
    assert better_of(nothing_kept, choice_of(0.25, gains, {0.25: True}))  # the same gain, but within the rule


def held_down(monkeypatch, tiny_bert, checks: bool = False) -> MirrorConfig:
    """A pairs config that trains again where held down, and the choice's rule refusing the first α it checks (the
    one the choice rows gain most at) and keeping every later one: each run's first blend is held down. `checks`:
    score the real checks (else none: the rule's own tests are above)."""
    from mirror import choose

    verdicts = iter([False])
    if not checks:
        monkeypatch.setattr(choose, "check_changes", lambda *a, **k: ({}, {}))
    monkeypatch.setattr(choose, "within_rule", lambda *a, **k: next(verdicts, True))
    return MirrorConfig.preset(
        "sentences", model=str(tiny_bert), pairs=True, max_steps=2, retry_anchor=30.0, **TINY_PAIRS
    )


@pytest.mark.parametrize("second_served", [True, False])
def test_a_run_whose_checks_hold_its_blend_down_trains_again_and_serves_the_better_training(
    tiny_bert, tmp_path, monkeypatch, second_served
):
    """retry_anchor (issue 60): the first training's best α refused by the checks, the run trains once more with the
    general anchor and serves whichever blend gains more; what is served, kept as trained, recorded and drawn is that
    training's, whichever it is."""
    from mirror import choose
    from mirror.encoder import load_encoder
    from mirror.job import Finished, Phase, Step, tune_and_index

    config = held_down(monkeypatch, tiny_bert)
    monkeypatch.setattr(choose, "better_of", lambda first, second: second_served)
    texts, partners = rows_of_pairs(440)
    events: list = []
    run = tmp_path / "run"
    tune_and_index(texts, config, run, indexes=FolderIndexes(), emit=events.append, pairs=partners)
    stats = next(e for e in events if isinstance(e, Finished)).stats
    again = next(i for i, e in enumerate(events) if isinstance(e, Phase) and e.text.startswith("Training again"))
    first_losses = [e.loss for e in events[:again] if isinstance(e, Step)]
    second_losses = [e.loss for e in events[again:] if isinstance(e, Step)]
    steps = [(e.training, e.step) for e in events if isinstance(e, Step)]
    assert steps == [(1, 1), (1, 2), (2, 1), (2, 2)]  # two trainings, each counted from 1
    retry = stats["blend_choice"]["retry"]
    assert retry["served"] == ("second" if second_served else "first") and retry["anchor"] == 30.0
    assert retry["first"]["kept"] and retry["second"]["kept"]
    assert len(retry["seconds"]) == 2 and stats["seconds"] == pytest.approx(
        retry["seconds"][1 if second_served else 0], abs=0.06
    )
    if not second_served:  # the table is the first training's: its best α refused, the next best served
        candidates = stats["blend_choice"]["candidates"]
        best = min(candidates, key=lambda c: (-c["mrr10"], c["alpha"]))
        assert [c["alpha"] for c in candidates if c["within"] is False] == [best["alpha"]]
        assert retry["first"]["alpha"] != best["alpha"]
    assert stats["losses"] == pytest.approx(second_losses if second_served else first_losses)
    assert (
        stats["run_alpha"] == stats["blend_choice"]["alpha"] == retry["second" if second_served else "first"]["alpha"]
    )
    assert any(n.startswith("trained twice") for n in stats["notes"])
    saved = json.loads((run / "model" / "mirror_config.json").read_text())["config"]
    assert saved["general_anchor"] == (30.0 if second_served else 0.0) and saved["blend_alpha"] == stats["run_alpha"]
    assert not (run / "tuned_model.anchored").exists()
    # the served model is the chosen blend of the base and the served training's weights as trained (tuned_model/)
    assert_served_blend(tiny_bert, run, stats["run_alpha"])
    trained = json.loads((run / "tuned_model" / "mirror_config.json").read_text())["config"]
    assert trained["general_anchor"] == saved["general_anchor"]
    # and what a search finds is what it computes
    index = VectorIndex.load(run / "tuned_index")
    served = load_encoder(str(run / "model"), device="cpu", allowed_roots=[run])
    np.testing.assert_allclose(index.stored([0, 99]), served.encode([texts[0], texts[99]], normalize=True), atol=1e-5)


@pytest.mark.parametrize("at", ["the second training's start", "its first step", "the first blend choice"])
def test_a_stop_asked_in_the_second_training_ends_the_run_with_nothing_served(tiny_bert, tmp_path, monkeypatch, at):
    """Cancel pressed in a pairs run's second training serves nothing, and says how far that training got: by hand
    (Chromium, 953 stdlib rows) it read "Cancelled after 120 of 120 steps" at the second training's step 5 (the
    first's count)."""
    from explorer.runs.training import stopped_text
    from explorer.settings import Settings
    from mirror.job import Finished, Phase, Step, Stopped, tune_and_index

    config = held_down(monkeypatch, tiny_bert)
    texts, partners = rows_of_pairs(440)
    events: list = []
    asked = {"stop": False}

    def emit(ev) -> None:
        events.append(ev)
        if at == "the second training's start" and isinstance(ev, Phase) and ev.text.startswith("Training again"):
            asked["stop"] = True  # Cancel pressed as the second training begins
        if at == "its first step" and isinstance(ev, Step) and ev.training == 2:
            asked["stop"] = True
        if at == "the first blend choice" and isinstance(ev, Phase) and ev.text.startswith("Choosing the blend"):
            asked["stop"] = True

    run = tmp_path / "run"
    tune_and_index(texts, config, run, indexes=FolderIndexes(), emit=emit, should_stop=lambda: asked["stop"],
                   pairs=partners)  # fmt: skip
    assert isinstance(events[-1], Stopped) and not any(isinstance(e, Finished) for e in events)
    assert not (run / "model").exists() and not (run / "tuned_index").exists()
    assert not (run / "tuned_model.anchored").exists()
    said = stopped_text(events[-1].stats, "cancel", Settings())
    total = next(e.total for e in events if isinstance(e, Step))
    if at == "the first blend choice":
        assert said == f"Cancelled after its training's {total:,} steps, before it was served; nothing was saved."
        return
    second = [e.step for e in events if isinstance(e, Step) and e.training == 2]
    expected = 1 if at == "its first step" else 0
    assert events[-1].stats["second_training"] and events[-1].stats["steps"] == len(second) == expected
    assert said == (
        f"Cancelled after {len(second)} of {total:,} steps of its second training (general text held near the base); "
        "nothing was saved."
    )


def test_the_page_says_a_run_trained_twice_and_another_alpha_blends_the_served_trainings_weights(
    app, tiny_bert, tmp_path, monkeypatch
):
    """The whole path of a run trained twice (the app's Launch): the verdict says so beside the choice table, the
    record keeps the settings the served training ran with, and *Serve another α* blends that training's weights."""
    import dataclasses

    from mirror import choose
    from mirror.encoder import load_encoder
    from tests.conftest import TINY
    from ui import render

    held_down(monkeypatch, tiny_bert, checks=True)
    monkeypatch.setattr(choose, "better_of", lambda first, second: True)
    texts, partners = rows_of_pairs(440)
    path = tmp_path / "pairs.csv"
    path.write_text("name,summary\n" + "\n".join(f"{t},{p}" for t, p in zip(texts, partners, strict=True)) + "\n")
    app.settings = dataclasses.replace(app.settings, general_checks=True, max_run_seconds=1800.0)
    import time

    import explorer.runs.training as training

    limits, real = {}, training.run_job
    monkeypatch.setattr(training, "run_job", lambda *a, **k: limits.update(a[5]) or real(*a, **k))
    s = app.session()
    app.loader.load_file(s, str(path), "name", "pairs.csv", "summary")
    launched = {**TINY, "blend_choose": True, "retry_anchor": 30.0}
    asked = time.time()
    assert list(app.trainer.train(s, str(tiny_bert), "auto", launched))[-1].kind == "done"
    assert asked + 1700 < limits["until"] <= time.time() + 1800  # the server's cap as a clock time (ZeroGPU's job)
    assert limits["room"] is not None  # and its runner's caps, asked in this process (Runner.room)
    run = s.run
    choice = run.record.training.blend_choice
    assert choice["retry"]["served"] == "second" and run.record.training.run_alpha == choice["alpha"]
    table = render.forgetting_md(run)
    assert "**Trained twice:**" in table and "general anchor λ 30" in table and "the second is served" in table
    assert any(n.startswith("trained twice: ") for n in run.record.notes)  # the record keeps it, the CLI prints it:
    assert "trained twice" not in render.run_md(run)  # the page's notes leave it to the verdict (it said it twice)
    saved = json.loads((run.folder / "model" / "mirror_config.json").read_text())["config"]
    assert saved["general_anchor"] == 30.0 and saved["retry_anchor"] == 30.0
    other = next(a for a in ALPHAS if a != choice["alpha"])
    assert list(app.saved.blend_run(s, other))[-1].kind == "done"
    b = weights(load_encoder(str(tiny_bert), device="cpu").model)
    t = weights(load_encoder(str(run.folder / "tuned_model"), device="cpu", allowed_roots=[run.folder]).model)
    served = weights(load_encoder(str(s.run.folder / "model"), device="cpu", allowed_roots=[s.run.folder]).model)
    for key in served:
        torch.testing.assert_close(served[key], (1 - other) * b[key] + other * t[key], rtol=1e-5, atol=1e-5)
    trained = json.loads((run.folder / "tuned_model" / "mirror_config.json").read_text())["config"]
    assert trained["general_anchor"] == 30.0  # the weights a blend blends are the served (second) training's


def test_a_second_training_that_would_outlast_the_servers_time_for_a_run_is_not_started(
    tiny_bert, tmp_path, monkeypatch
):
    """`until` (the server's MIRROR_MAX_RUN_SECONDS as a clock time): a run held down by its checks with too little
    time left serves its first training, and its record says why it trained once (not stopped over the cap, with
    nothing served)."""
    import time

    from explorer.runs.jobs import until_room
    from mirror import choose
    from mirror.job import Finished, Phase, tune_and_index

    config = held_down(monkeypatch, tiny_bert)
    texts, partners = rows_of_pairs(440)
    events: list = []
    run = tmp_path / "run"
    tune_and_index(texts, config, run, indexes=FolderIndexes(), emit=events.append, pairs=partners,
                   room=until_room(time.time() + 0.01))  # fmt: skip
    stats = next(e for e in events if isinstance(e, Finished)).stats
    assert not any(isinstance(e, Phase) and e.text.startswith("Training again") for e in events)
    retry = stats["blend_choice"]["retry"]
    assert retry["anchor"] == 30.0 and retry["skipped"] >= 0 and retry["why"].startswith("would not end within")
    assert "would not end within this server's time for a run" in choose.retry_sentence(retry)
    assert any(n.startswith("trained once:") for n in stats["notes"])  # the CLI prints it, the record keeps it
    assert json.loads((run / "model" / "mirror_config.json").read_text())["config"]["general_anchor"] == 0.0


def test_a_second_training_going_slower_than_priced_stops_itself_and_serves_the_first(tiny_bert, tmp_path, monkeypatch):
    """Room for a second training is asked before it starts, at the first's pace; where it then goes slower (another
    visitor's run on the same cores), the server's cap or CPU budget would stop the run and serve nothing. The job asks
    again between the second training's steps (mirror.job.Outlasting, from its third step: the first pays for its
    warm-up), stops that training itself where going on would outlast the room, and serves the first training's
    blend: its record and page say "Trained once" and why; its model, index and weights are the first's."""
    import dataclasses

    from explorer.resources.record import Made
    from mirror.encoder import load_encoder
    from mirror.job import Finished, Phase, Step, tune_and_index
    from ui.render_pairs import blend_choice_md

    config = dataclasses.replace(held_down(monkeypatch, tiny_bert), max_steps=6)
    texts, partners = rows_of_pairs(440)
    why = "would not end within this server's time for a run (1 s left of 30 min, MIRROR_MAX_RUN_SECONDS)"
    asked: list[float] = []

    def room(seconds: float) -> str | None:  # room to start it; none once it has taken three steps
        asked.append(seconds)
        return None if len(asked) == 1 else why

    events: list = []
    run = tmp_path / "run"
    tune_and_index(texts, config, run, indexes=FolderIndexes(), emit=events.append, pairs=partners, room=room)
    stats = next(e for e in events if isinstance(e, Finished)).stats
    second = [e for e in events if isinstance(e, Step) and e.training == 2]
    assert [e.step for e in second] == [1, 2, 3] and len(asked) == 2 and asked[1] > 0
    retry = stats["blend_choice"]["retry"]
    assert retry == {"anchor": 30.0, "stopped": [3, second[0].total], "why": why}
    said = f"was stopped after 3 of {second[0].total} steps: going on, it {why}; the first is served"
    assert any(isinstance(e, Phase) and e.text.startswith("Second training stopped after 3 of") for e in events)
    assert any(n.startswith("trained once:") and said in n for n in stats["notes"])
    page = blend_choice_md(SimpleNamespace(record=Made.of_training(stats).record))  # as the app records it
    assert "**Trained once:** the general checks held the blend down; a second training" in page and said in page
    # what is served is the first training: its settings, its blend of its weights as trained, its index
    saved = json.loads((run / "model" / "mirror_config.json").read_text())["config"]
    assert (
        saved["general_anchor"] == 0.0 and saved["blend_alpha"] == stats["run_alpha"] == stats["blend_choice"]["alpha"]
    )
    assert not (run / "tuned_model.anchored").exists()
    assert stats["losses"] == pytest.approx([e.loss for e in events if isinstance(e, Step) and e.training == 1])
    assert_served_blend(tiny_bert, run, stats["run_alpha"])
    index = VectorIndex.load(run / "tuned_index")
    served = load_encoder(str(run / "model"), device="cpu", allowed_roots=[run])
    np.testing.assert_allclose(index.stored([0, 99]), served.encode([texts[0], texts[99]], normalize=True), atol=1e-5)


def test_serve_the_first_training_stops_a_second_one_and_serves_the_first_whole_path(
    app, tiny_bert, tmp_path, monkeypatch
):
    """*Serve the first training* (Trainer.serve_first, the page's button, the API's /serve_first): refused while no
    second training goes on; during one, that training stops at its next step and the first training's blend is
    served, its index what the served model computes, its record and page say it trained once as asked, and the
    request (the run folder's FIRST file) is not left in the run kept."""
    import threading

    import mirror.job as job
    from explorer.events import Step
    from mirror.encoder import load_encoder
    from tests.conftest import TINY
    from ui.render_pairs import blend_choice_md

    held_down(monkeypatch, tiny_bert)
    texts, partners = rows_of_pairs(440)
    path = tmp_path / "pairs.csv"
    path.write_text("name,summary\n" + "\n".join(f"{t},{p}" for t, p in zip(texts, partners, strict=True)) + "\n")
    s = app.session()
    app.loader.load_file(s, str(path), "name", "pairs.csv", "summary")
    assert app.trainer.serve_first(s).startswith("Nothing is running")
    # the job waits before the second training's second step until the test has asked (its steps take milliseconds)
    asked, judge = threading.Event(), job.Outlasting.__call__
    monkeypatch.setattr(job.Outlasting, "__call__", lambda self: (self.step < 1 or asked.wait(60)) and judge(self))
    run = app.trainer.start(s, str(tiny_bert), "auto", {**TINY, "max_steps": 4, "blend_choose": True,
                                                       "retry_anchor": 30.0})  # fmt: skip
    said: list[str] = []
    for ev in run.follow():
        if isinstance(ev, Step) and ev.training == 1 and not said:
            said.append(app.trainer.serve_first(s))  # the first training: nothing to stop yet
        if isinstance(ev, Step) and ev.training == 2 and not asked.is_set():
            said.append(app.trainer.serve_first(s))
            assert app.trainer.first_asked(s)
            asked.set()
        if not isinstance(ev, Step) and asked.is_set() and len(said) == 2:  # past its steps: too late
            said.append(app.trainer.serve_first(s))
    assert said[0].startswith("No second training is going on") and said[1].startswith("Stopping the second training")
    assert said[2].startswith("Asked already")
    notes = [e.text for e in run.events if e.kind == "note"]  # a toast on the page: its phase passes in a blink
    assert any(n.startswith("Second training stopped after 1 of 4 steps, as you asked") for n in notes), notes
    assert ev.kind == "done" and not (s.run.folder / "FIRST").exists() and not app.trainer.first_asked(s)
    retry = s.run.record.training.blend_choice["retry"]
    assert retry["asked"] is True and retry["stopped"][0] == 1 and "second" not in retry
    page = blend_choice_md(s.run)
    assert "**Trained once:**" in page and "was stopped after 1 of 4 steps, as you asked; the first is served" in page
    saved = json.loads((s.run.folder / "model" / "mirror_config.json").read_text())["config"]
    assert saved["general_anchor"] == 0.0 and saved["blend_alpha"] == s.run.record.training.run_alpha
    assert_served_blend(tiny_bert, s.run.folder, s.run.record.training.run_alpha)
    served = load_encoder(str(s.run.folder / "model"), device="cpu", allowed_roots=[s.run.folder])
    index = VectorIndex.load(s.run.folder / "tuned_index")
    np.testing.assert_allclose(index.stored([0, 9]), served.encode([texts[0], texts[9]], normalize=True), atol=1e-5)


def test_serve_the_first_training_asked_after_the_second_trainings_last_step_is_still_honoured(
    tiny_bert, tmp_path, monkeypatch
):
    """The page offers *Serve the first training* until the phase after the second training's steps; a click that
    lands after the job's last look between steps (its last step's report just out) is honoured after that training's
    blend choice: the first is served though the second might gain more, and the record says both and "as you asked"."""
    from mirror import choose
    from mirror.job import Finished, Phase, Step, tune_and_index

    config = held_down(monkeypatch, tiny_bert)
    monkeypatch.setattr(choose, "better_of", lambda first, second: True)  # the second would be served
    texts, partners = rows_of_pairs(440)
    events: list = []

    def first() -> bool:  # asked once the second training's blend is being chosen (too late to stop its steps)
        return any(isinstance(e, Phase) and e.text.endswith("of the second training") for e in events)

    run = tmp_path / "run"
    tune_and_index(texts, config, run, indexes=FolderIndexes(), emit=events.append, pairs=partners, first=first)
    stats = next(e for e in events if isinstance(e, Finished)).stats
    second = [e for e in events if isinstance(e, Step) and e.training == 2]
    assert second and second[-1].step == second[-1].total  # it trained to its end
    retry = stats["blend_choice"]["retry"]
    assert retry["served"] == "first" and retry["asked"] is True and "second" in retry
    assert choose.retry_sentence(retry).endswith("the first is served, as you asked")
    saved = json.loads((run / "model" / "mirror_config.json").read_text())["config"]
    assert saved["general_anchor"] == 0.0 and not (run / "tuned_model.anchored").exists()
    assert_served_blend(tiny_bert, run, stats["run_alpha"])


def test_cancel_after_serve_the_first_training_serves_nothing(tiny_bert, tmp_path, monkeypatch):
    """Cancel is Cancel: asked after *Serve the first training*, in the same step, the run serves nothing of it (not
    the first training), as any Cancel."""
    from mirror.job import Finished, Step, Stopped, tune_and_index

    config = dataclasses.replace(held_down(monkeypatch, tiny_bert), max_steps=4)
    texts, partners = rows_of_pairs(440)
    events: list = []

    def both() -> bool:  # the user asked for the first, then cancelled, during the second training's first step
        return any(isinstance(e, Step) and e.training == 2 for e in events)

    run = tmp_path / "run"
    tune_and_index(texts, config, run, indexes=FolderIndexes(), emit=events.append, pairs=partners, first=both,
                   should_stop=both)  # fmt: skip
    assert isinstance(events[-1], Stopped) and events[-1].stats.get("second_training") is True
    assert not any(isinstance(e, Finished) for e in events) and not (run / "model").exists()


def test_serve_the_first_training_reaches_a_job_in_another_process_through_its_folder(tiny_bert, tmp_path, monkeypatch):
    """On ZeroGPU the job runs in a GPU worker (explorer.runs.jobs.train_job): *Serve the first training* reaches it
    as the run folder's FIRST file, as Cancel does as STOP; its second training stops there and the first is served."""
    import threading

    import mirror.job as job
    from explorer.events import Finished, Step
    from explorer.runs.jobs import train_job
    from explorer.runs.live import FIRST_FILE

    config = held_down(monkeypatch, tiny_bert)
    asked, judge = threading.Event(), job.Outlasting.__call__
    monkeypatch.setattr(job.Outlasting, "__call__", lambda self: (self.step < 1 or asked.wait(60)) and judge(self))
    texts, partners = rows_of_pairs(440)
    run = tmp_path / "run"
    run.mkdir()
    events = []
    for ev in train_job(texts, config.to_dict(), str(run), [str(tiny_bert)], True, {}, partners):
        events.append(ev)
        if isinstance(ev, Step) and ev.training == 2 and not asked.is_set():
            (run / FIRST_FILE).touch()  # what Trainer.serve_first writes
            asked.set()
    stats = next(e for e in events if isinstance(e, Finished)).stats
    assert stats["blend_choice"]["retry"]["asked"] is True and stats["blend_choice"]["retry"]["stopped"][0] == 1
    assert json.loads((run / "model" / "mirror_config.json").read_text())["config"]["general_anchor"] == 0.0


def test_a_second_training_is_judged_from_a_tenth_of_its_steps_at_its_pace_since_its_first(monkeypatch):
    """mirror.job.Outlasting: not before step 3 nor before a tenth of the steps (one step of long strings takes several
    of short ones), then the steps left at the pace of those after the first (which pays for the warm-up), plus what
    follows them."""
    import mirror.job as job

    clock = {"now": 100.0}
    monkeypatch.setattr(job.time, "perf_counter", lambda: clock["now"])
    asked: list[float] = []
    outlasting = job.Outlasting(lambda seconds: asked.append(seconds) or ("no room" if seconds > 700 else None), 60.0)
    for step in range(1, 8):
        clock["now"] += 30.0 if step == 1 else 10.0  # the first step slow, then 10 s a step
        outlasting.stepped(step, 70)
        stops = outlasting()
        assert stops is False and (asked == [] if step < 7 else asked == [pytest.approx(10.0 * 63 + 60.0)])
    clock["now"] += 20.0  # the eighth step twice as slow: (60 + 20) / 7 s a step for the 62 left
    outlasting.stepped(8, 70)
    assert outlasting() is True and outlasting.why == "no room" and asked[-1] == pytest.approx(80 / 7 * 62 + 60.0)
    assert job.Outlasting(None, 0.0)() is False  # no room to ask (the CLI): never


def test_a_plan_without_room_for_a_second_training_says_so_instead_of_pricing_it(app, tiny_bert, tmp_path):
    """Planner.room_for_retry: where the visitor's hour of CPU (or the server's time for a run) would not fit the run
    with its second training, the plan does not price one "if the checks hold its blend down": it says the run will
    not train again, and why (the runner decides again with what the run measures: Runner.room)."""
    from tests.conftest import TINY
    from ui.plan_md import plan_md

    texts, partners = rows_of_pairs(440)
    path = tmp_path / "pairs.csv"
    path.write_text("name,summary\n" + "\n".join(f"{t},{p}" for t, p in zip(texts, partners, strict=True)) + "\n")
    s = app.session()
    app.loader.load_file(s, str(path), "name", "pairs.csv", "summary")
    settings = {**TINY, "blend_choose": True, "retry_anchor": 30.0}
    app.planner.cpu.visitor_s = app.planner.cpu.address_s = 0  # no CPU budget: room for it
    roomy = app.planner.plan(s, str(tiny_bert), "auto", settings)
    assert roomy.est.retry > 0 and "more if the general checks hold its blend down" in plan_md(roomy)
    assert "*Serve the first training* stops it" in plan_md(roomy)  # the way out of it, said before Launch
    app.planner.cpu.visitor_s = 1.0  # a CPU second an hour: no room for the run and a second training
    tight = app.planner.plan(s, str(tiny_bert), "auto", settings)
    shown = plan_md(tight)
    assert tight.est.retry == 0 and "hold its blend down (a second training" not in shown
    assert "it will not train again with general text held near the base here" in shown
    assert "MIRROR_VISITOR_CPU_S" in shown
    app.planner.cpu.visitor_s = 0
    import dataclasses

    kept = app.planner.settings
    app.planner.settings = dataclasses.replace(kept, max_run_seconds=roomy.est.total + roomy.est.retry / 2)
    capped = plan_md(app.planner.plan(s, str(tiny_bert), "auto", settings))
    app.planner.settings = kept
    assert "it will not train again" in capped and "MIRROR_MAX_RUN_SECONDS" in capped  # the server's time for a run
    once = app.planner.plan(s, str(tiny_bert), "auto", {**settings, "retry_anchor": 0.0})
    assert once.est.retry == 0 and "train again" not in plan_md(once)  # a run that never trains twice says nothing
