"""Both columns on the page (issue 60): a pairs run's search hits show their partner (the page, the API's answer, a
reopened run, a blend, strings loaded before any tuning), the page says which column is searched and what the
partner column is for; its loss curve draws its own "knows nothing" line, where its first step is; and the Lows a
user read on a pairs run's page (an article before a column's name, an example the base finds too, What moved's
500, two STS-B devs, the strings the page and the card count)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from explorer.resources.record import Pairs
from mirror.data import AUTO
from mirror.loss import chance_loss
from mirror.pairs import PairStats
from tests.conftest import TINY, VOCAB_WORDS, WORDS
from ui import render

ROWS = [f"{a} {b} {c}" for a in VOCAB_WORDS[:8] for b in VOCAB_WORDS[4:10] for c in ("cat", "dog")]


def glossary(tmp_path: Path) -> Path:
    """96 rows of `name,summary`: the summary (the longer column) is the strings, the name its partner."""
    path = tmp_path / "glossary.csv"
    body = "\n".join(f"{' '.join(r.split()[:2])}-{i},{r} here and {VOCAB_WORDS[i % 14]}" for i, r in enumerate(ROWS))
    path.write_text("name,summary\n" + body + "\n", encoding="utf-8")
    return path


def pairs_session(app, tmp_path):
    s = app.session()
    app.loader.load_file(s, str(glossary(tmp_path)), None, "glossary.csv", AUTO)
    assert s.pairing.columns() == ("summary", "name") and len(s.partners) == len(s.texts) == len(ROWS)
    return s


def assert_partners_shown(found: list[dict], texts: list[str], partners: list[str | None]) -> None:
    """Every hit of a pairs search carries its own row's partner, and the result names the two columns."""
    of = dict(zip(texts, partners, strict=True))
    for result in found:
        assert result["columns"] == {"strings": "summary", "partner": "name"}
        for hit in result["tuned"] + result["base"]:
            assert hit["partner"] == of[hit["text"]], hit


def test_search_hits_of_a_pairs_run_show_their_partner_wherever_the_run_is_searched(app, tiny_bert, tmp_path):
    s = pairs_session(app, tmp_path)
    texts, partners = list(s.texts), list(s.partners)
    # before any tuning: the base model's hits of the loaded strings, each with its partner
    before = app.searcher.search(s, "big cat", 5, base_model=str(tiny_bert))
    assert before[0]["base_only"] and all(h["partner"] == partners[texts.index(h["text"])] for h in before[0]["base"])
    assert "Searching the `summary` column; each hit's `name` is shown under it" in render.served_md(s)
    assert list(app.trainer.train(s, str(tiny_bert), "auto", dict(TINY)))[-1].kind == "done"
    run = s.run
    found = app.searcher.search(s, "big cat\nred dog", 5)
    assert_partners_shown(found, texts, partners)
    for key in ("rank", "text", "score", "only_here", "base_rank"):  # the API's fields as they were, and the partner
        assert key in found[0]["tuned"][0]
    # the page: which column is searched, what the partner column is for, each hit's partner under it
    page = render.render_results(found, "tiny")
    assert "Searching the <b>summary</b> column (your strings)" in page
    assert "its <b>name</b>: the column that trained the pairs" in page
    first = found[0]["tuned"][0]
    assert re.search(r'class="mx-partner"[^>]*><i>name:</i> ' + re.escape(first["partner"]), page)
    # a query that is one of the strings, hidden (the default): its own partner is said, not lost (a newcomer typed
    # "German" on a languages file and never saw German's code)
    own = texts[7]
    result = app.searcher.search(s, own, 5, hide_query=True)[0]
    assert own not in [h["text"] for h in result["tuned"] + result["base"]]
    assert result["hidden"] == {"text": own, "partner": partners[7]}
    assert f"its name: <b>{partners[7]}</b>), left out of the hits" in render.render_results([result], "tiny")
    shown = app.searcher.search(s, own, 5, hide_query=False)[0]
    assert "hidden" not in shown and shown["tuned"][0]["text"] == own
    header = render.served_md(s)
    assert "Searching the `summary` column (your strings); the `name` column trained the pairs" in header
    assert "is shown under each hit" in header
    # opened elsewhere by its link, and after a restart (a new service on the same folders): read from the run
    other = app.session()
    app.saved.open_run(other, run.folder.name)
    assert_partners_shown(app.searcher.search(other, "small dog", 3), texts, partners)
    from explorer import MirrorApp

    restarted = MirrorApp(app.settings)
    assert_partners_shown(
        restarted.searcher.search(restarted.session(), "blue bus", 3, run_id=run.folder.name), texts, partners
    )
    # a blend of it searches the same strings: the same partners
    assert list(app.saved.blend_run(other, 0.5))[-1].kind == "done" and other.run.record.origin.alpha == 0.5
    assert_partners_shown(app.searcher.search(other, "red car", 3), texts, partners)
    # another corpus, and a run without pairs: no partner field, no columns line
    plain = app.session()
    app.loader.load_pasted(plain, "\n".join(WORDS))
    assert list(app.trainer.train(plain, str(tiny_bert), "auto", dict(TINY)))[-1].kind == "done"
    result = app.searcher.search(plain, "cat", 3)[0]
    assert "columns" not in result and all("partner" not in h for h in result["tuned"] + result["base"])
    assert "mx-columns" not in render.render_results([result], "tiny")


def first_and_line(run, app) -> tuple[float, float]:
    """The run's first step's loss as the curve draws it (÷ log(2B-1)) and its "knows nothing" line at that step."""
    from explorer.compare import chance

    batches = run.record.training.batch_sizes
    frame = render.loss_frame(run.losses, batches, chance.of_run(run, app.models, app.searcher.partners(run)))
    line = frame[frame.series == render.CHANCE_SERIES]["loss"].tolist()
    assert len(line) == len(run.losses)
    return run.losses[0] / chance_loss(batches[0]), line[0]


def test_the_loss_curve_of_a_pairs_run_starts_near_its_own_chance_line(app, tiny_bert, tmp_path):
    """The pairs preset distils from the base on a sentence encoder (λ 10): its loss adds λ/2·(1 - cos) of each
    partner against its string's base embedding, and starts above the mirror line, 1. Its own line (a model that
    knows nothing of the pairs: explorer.compare.chance) is drawn, and the run's first step is near it (a random
    model knows nothing of them); the live curve draws the line the kept run draws. Mean pooling: the tiny random
    BERT's [CLS] puts every text at one point (cos 1.0000), where no line can say anything."""
    from explorer.compare import chance

    s = pairs_session(app, tmp_path)
    overrides = {**TINY, "distill": 10.0, "pooling": "mean"}
    app.planner.hold(s, str(tiny_bert), "auto", overrides)  # what the page holds at Launch
    live = chance.live(s, app.models)
    assert list(app.trainer.train(s, str(tiny_bert), "auto", overrides))[-1].kind == "done"
    run = s.run
    # the run table names what its raw loss holds (it read "raw InfoNCE" with the distillation inside)
    assert run.record.training.loss_terms == ["distillation to the base λ 10"]
    assert "| Loss (raw InfoNCE + distillation to the base λ 10) |" in render.run_md(run)
    first, line = first_and_line(run, app)
    assert line > 1.05  # not the mirror line: the distillation of the partners counts
    assert abs(first - line) <= 0.15 * line, (first, line)
    # the live curve (the page's TrainView) draws the same line
    measured = live()
    assert measured is not None and abs(measured.at(8) - line) < 0.02
    from ui.runs import TrainView

    view = TrainView(None, lambda: measured)
    for loss, batch in zip(run.losses, run.record.training.batch_sizes, strict=True):
        view.losses.append(loss)
        view.batches.append(batch)
    drawn = view.plot(view.losses, view.batches)["value"]
    assert render.CHANCE_SERIES in set(drawn["series"])
    kept = TrainView.plot(run.losses, run.record.training.batch_sizes, TrainView.kept_chance(run, app))
    assert render.CHANCE_SERIES in set(kept["value"]["series"])
    # a mirror run keeps its line: 1, in the caption; no pairs line drawn
    plain = app.session()
    app.loader.load_pasted(plain, "\n".join(WORDS))
    assert list(app.trainer.train(plain, str(tiny_bert), "auto", dict(TINY)))[-1].kind == "done"
    assert chance.of_run(plain.run, app.models, app.searcher.partners(plain.run)) is None
    assert plain.run.record.training.loss_terms == [] and "| Loss (raw InfoNCE) |" in render.run_md(plain.run)
    frame = render.loss_frame(plain.run.losses, plain.run.record.training.batch_sizes, None)
    assert set(frame.series) == {"each step", "smoothed"} and render.LOSS_CAPTION.startswith("1 = a model that knows")


def test_a_pairs_run_distilling_each_partner_toward_itself_starts_near_its_own_line(app, tiny_bert, tmp_path):
    """With pair_distill_own each partner is distilled toward the base's embedding of itself, so the base (which
    knows nothing of the pairs) owes the distillation term nothing: the run's line is the contrastive one alone, and
    its first step is near it (the line read λ/2·(1 - c0) above it, as if partners were pulled toward strings)."""
    from explorer.compare import chance

    s = pairs_session(app, tmp_path)
    overrides = {**TINY, "distill": 10.0, "pooling": "mean", "pair_distill_own": True}
    app.planner.hold(s, str(tiny_bert), "auto", overrides)
    live = chance.live(s, app.models)
    assert list(app.trainer.train(s, str(tiny_bert), "auto", overrides))[-1].kind == "done"
    run = s.run
    first, line = first_and_line(run, app)
    measured = live()
    assert measured is not None and measured.distill == 0.0 and abs(measured.at(8) - line) < 0.02
    owed = chance.PairsChance(10.0, measured.paired, measured.unrelated, measured.batch_size, measured.shuffled)
    assert owed.at(8) > line + 0.1  # what the line read before: the string's pull counted
    assert abs(first - line) <= 0.15 * line, (first, line)


def test_a_one_way_pairs_run_trains_with_that_loss_and_starts_near_its_own_line(app, tiny_bert, tmp_path):
    """pair_loss "one-way" (MNRL's form): a model that knows nothing scores log(B) per step, not log(2B-1); the run
    trains with that loss (its first step is near log(B), far under the views loss's chance), records it in its
    model folder and card, and its curve's line is measured with the same loss."""
    from explorer.compare import chance
    from explorer.resources.store import tuned_weights
    from mirror.card import read_mirror_config

    s = pairs_session(app, tmp_path)
    overrides = {**TINY, "distill": 0.0, "pooling": "mean", "pair_loss": "one-way"}
    app.planner.hold(s, str(tiny_bert), "auto", overrides)
    live = chance.live(s, app.models)
    assert list(app.trainer.train(s, str(tiny_bert), "auto", overrides))[-1].kind == "done"
    run = s.run
    assert read_mirror_config(tuned_weights(run.folder))["config"]["pair_loss"] == "one-way"
    assert "| Loss (raw one-way InfoNCE, as MNRL) |" in render.run_md(run)  # the run table names its loss
    b = run.record.training.batch_sizes[0]
    assert abs(run.losses[0] - np.log(b)) < 0.25 * np.log(b), (run.losses[0], b)  # views' chance: log(2B-1)
    first, line = first_and_line(run, app)
    assert line < 0.95  # log(B)-based, divided like the curve (÷ log(2B-1))
    assert abs(first - line) <= 0.15 * line, (first, line)
    measured = live()
    assert measured is not None and measured.one_way and abs(measured.at(b) - line) < 0.02
    # the same rows trained with the views loss: its line is the views one
    views = chance.PairsChance(0.0, 1.0, measured.unrelated, measured.batch_size, 1.0)
    assert views.at(b) == 1.0 and chance.PairsChance(0.0, 0.0, 0.0, 8, one_way=True).at(8) < 1.0


def test_the_chance_line_is_the_mirror_one_without_distillation_and_counts_the_paired_share():
    from explorer.compare import chance

    line = chance.PairsChance(distill=10.0, paired=1.0, unrelated=0.13, batch_size=200)
    assert abs(line.at(200) - (1 + 5 * 0.87 / chance_loss(200))) < 1e-9
    assert chance.PairsChance(0.0, 1.0, 0.13, 200).at(200) == 1.0  # no distillation, columns alike: the mirror line
    assert chance.PairsChance(0.0, 1.0, 0.13, 200, shuffled=1.3).at(200) == 1.3
    half = chance.PairsChance(10.0, 0.5, 0.13, 200).at(200)
    assert abs((half - 1) * 2 - (line.at(200) - 1)) < 1e-9
    mixed = chance.PairsChance(10.0, 1.0, 0.13, 100).at(200)  # 100 mixed-in general strings: no partner
    assert abs((mixed - 1) * 2 - (line.at(200) - 1)) < 1e-9
    assert chance.paired_share(["a", None, "b", "c"], held=1) == 2 / 3
    # c0: a string against the other rows' partners (the pairs' own cosines left out)
    strings, partners = [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]
    assert abs(chance.cross_cosine(strings, partners) - 2 / 6) < 1e-9
    # the base knowing nothing of which partner is whose: its sides alike, a flat loss (1); kept apart, more
    alike = np.ones((4, 2)) / np.sqrt(2)
    assert abs(chance.shuffled_loss(alike, alike, 0.05, 4) - 1) < 1e-6
    apart = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    assert chance.shuffled_loss(apart[:2], apart[2:], 0.05, 2) > 1.5


def fake_run(pairs: Pairs) -> SimpleNamespace:
    return SimpleNamespace(record=SimpleNamespace(training=SimpleNamespace(pairs=pairs), origin=SimpleNamespace()))


def test_a_prompt_built_from_a_column_name_takes_its_article():
    from ui.render_pairs import a_or_an, search_by_partner

    run = fake_run(
        Pairs(PairStats(50, 0, 0, 0), ("expansion", "acronym"), 0, None, (("CPU", "central processing unit"),))
    )
    line = search_by_partner(run)
    assert "type an `acronym` to find its `expansion`" in line and "a acronym" not in line
    assert [a_or_an(w) for w in ("acronym", "definition", "item", "expansion", "unit", "`id`")] == [
        "an",
        "a",
        "an",
        "an",
        "a",
        "an",
    ]


class FakeIndex:
    """An index whose search ranks each query's strings as told: {query: [string, ...]}."""

    def __init__(self, ranked: dict[str, list[str]]):
        self.ranked = ranked

    def search(self, queries, k):
        from index.store import Hit

        return [[Hit(t, 1.0 - r / 10, r, r) for r, t in enumerate(self.ranked[q][:k], 1)] for q in queries]


def example_of(app, tuned: dict, base: dict, examples) -> dict | None:
    pairs = Pairs(PairStats(50, 0, 0, 0), ("expansion", "acronym"), 20, None, examples)
    run = SimpleNamespace(
        folder=Path("/nowhere") / str(id(tuned)), record=SimpleNamespace(training=SimpleNamespace(pairs=pairs))
    )
    main = SimpleNamespace(tuned=FakeIndex(tuned), base=FakeIndex(base))
    app.models.loaded = lambda r: SimpleNamespace(main=main)
    return app.searcher.example(run)


def test_the_search_example_is_one_tuning_improves_or_the_page_says_the_base_finds_it_too(app):
    from ui.render_pairs import search_by_partner

    examples = (("CPU", "central processing unit"), ("RAM", "random access memory"))
    # the first held-out row is found at rank 1 by the base as well; the second moved up with tuning: offered
    tuned = {"CPU": ["central processing unit"], "RAM": ["random access memory", "read only memory"]}
    base = {"CPU": ["central processing unit"], "RAM": ["read only memory", "x", "y", "random access memory"]}
    chosen = example_of(app, tuned, base, examples)
    assert chosen["partner"] == "RAM" and chosen["better"] and (chosen["tuned_rank"], chosen["base_rank"]) == (1, 4)
    run = fake_run(Pairs(PairStats(50, 0, 0, 0), ("expansion", "acronym"), 20, None, examples))
    line = search_by_partner(run, chosen)
    assert "*RAM*" in line and "the tuned model finds it at rank 1, the base at rank 4" in line
    # none moved up: the first, and the page says the base finds it too
    same = example_of(app, {"CPU": ["central processing unit"], "RAM": ["random access memory"]}, dict(tuned), examples)
    assert same["partner"] == "CPU" and not same["better"]
    assert "the base finds it at rank 1 too" in search_by_partner(run, same)


def test_what_moved_says_what_its_500_are():
    from ui.explore import moved_head

    assert moved_head(500, 12_640).startswith("The 500 most moved of your 12,640 strings")
    assert moved_head(411, 411) == "411 strings, most moved first."
    assert "The 500 most moved of your 900 strings matching “cat”" in moved_head(500, 900, "cat")


def test_the_two_sts_b_devs_say_they_are_different_subsets():
    from ui.render_eval import eval_md

    evaluated = eval_md([{"gold set": "STS-B dev", "pairs": 1500}], [])
    assert "STS-B dev here is all 1,500 of its pairs" in evaluated and "general checks' *STS-B dev* row" in evaluated
    assert "STS-B dev" not in eval_md([{"gold set": "SimLex-999", "pairs": 999}], [])
    checks = render.sts_subset([{"name": "STS-B dev", "items": 200}])
    assert "*STS-B dev* here scores 200 of its pairs" in checks and "the Evaluate tab's STS-B dev" in checks


def test_the_page_and_the_model_card_count_the_same_strings(app, tiny_bert, tmp_path):
    s = pairs_session(app, tmp_path)
    assert list(app.trainer.train(s, str(tiny_bert), "auto", dict(TINY)))[-1].kind == "done"
    run = s.run
    said = f"{len(ROWS)} (76 trained on, 20 held out to measure the gain)"
    assert f"| Strings | {said} from `glossary.csv` |" in render.run_md(run)
    card = (run.folder / "model" / "README.md").read_text()
    assert f"| strings | {said} |" in card
