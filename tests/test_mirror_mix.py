"""Mixing general text into the batches (MirrorConfig.mix_general, mirror/general.py) on the tiny random BERT of
conftest.py: off, the batches are the user's own; on, every batch keeps the user's strings and step count and takes
about the fraction asked for from the bundled corpus, never a copy of a user's string."""

from __future__ import annotations

import pytest

import mirror.train as train
from mirror import MirrorConfig
from mirror.__main__ import build_parser
from mirror.encoder import load_encoder
from mirror.errors import MirrorError
from mirror.evaluate import read_pairs
from mirror.general import FILES, GENERAL, LICENSE_FILE, Mixer, general_text, mixed_count
from mirror.train import mirror_tune, plan_steps
from tests.conftest import SENTENCES, WORDS

GOLD = GENERAL.parent / "gold"
PREPARE_STEP = train._prepare_step
RUN = {"device": "cpu", "precision": "fp32", "lr": 1e-3, "epochs": 2, "batch_size": 3, "min_steps": 0}


def batches_of(tiny_bert, texts, monkeypatch, mode="sentences", **kw) -> tuple[list[list[str]], object]:
    """The strings of every step of a run (what _prepare_step was given), and the run's result."""
    seen: list[list[str]] = []

    def spy(encoder, strings, *args, **kwargs):
        seen.append(list(strings))
        return PREPARE_STEP(encoder, strings, *args, **kwargs)

    monkeypatch.setattr(train, "_prepare_step", spy)
    config = MirrorConfig.preset(mode, model=str(tiny_bert), **{**RUN, **kw})
    result = mirror_tune(texts, config, encoder=load_encoder(tiny_bert))
    return seen, result


def test_mixed_count_makes_the_general_strings_that_fraction_of_the_batch():
    assert mixed_count(200, 0.0) == 0
    assert mixed_count(150, 0.25) == 50  # 50 of 200
    assert mixed_count(180, 0.1) == 20  # 20 of 200
    assert mixed_count(6, 0.5) == 6


def test_off_every_batch_is_the_users_strings_alone(tiny_bert, monkeypatch):
    seen, result = batches_of(tiny_bert, SENTENCES, monkeypatch)
    assert len(seen) == result.steps == plan_steps(SENTENCES, result.config, load_encoder(tiny_bert))
    for epoch in (seen[: len(seen) // 2], seen[len(seen) // 2 :]):
        assert sorted(s for batch in epoch for s in batch) == sorted(SENTENCES)  # each once per epoch, nothing else
    assert not any("general text" in n for n in result.notes)


@pytest.mark.parametrize("fraction", [0.25, 0.5])
def test_a_fraction_adds_general_strings_to_the_same_batches_and_steps(tiny_bert, monkeypatch, fraction):
    plain, plain_result = batches_of(tiny_bert, SENTENCES, monkeypatch)
    # max length 8 cuts every batch: any general sentence pads the same (the tiny vocab spells them letter by letter)
    mixed, result = batches_of(tiny_bert, SENTENCES, monkeypatch, mix_general=fraction, max_length=8)
    corpus = set(general_text("sentences"))
    assert result.steps == plain_result.steps == len(mixed) == len(plain)
    for own, batch in zip(plain, mixed, strict=True):
        assert batch[: len(own)] == own  # the user's batch, in its order, as without mixing
        extra = batch[len(own) :]
        assert len(extra) == mixed_count(len(own), fraction) and len(set(extra)) == len(extra)
        assert set(extra) <= corpus
        assert len(extra) / len(batch) == pytest.approx(fraction, abs=0.1)
    assert result.batch_sizes == [len(b) for b in mixed]  # the loss's batch is the mixed one
    assert any("Wikipedia sentences as" in n for n in result.notes)


def test_mixed_strings_are_never_a_users_string_and_no_longer_than_the_batch(tiny_bert, monkeypatch):
    corpus = general_text("sentences")
    enc = load_encoder(tiny_bert)
    lengths = dict(zip(corpus, enc.token_lengths(corpus), strict=True))
    short = sorted(corpus, key=lambda s: lengths[s])[:40]
    users = SENTENCES + [s.upper() for s in short[:20]]  # the shortest general sentences, in another case
    seen, _ = batches_of(tiny_bert, users, monkeypatch, mix_general=0.5, max_length=512, epochs=1)
    taken = {s.casefold() for s in users}
    own_lengths = dict(zip(users, enc.token_lengths(users), strict=True))
    mixed = 0
    for batch in seen:
        own = [s for s in batch if s in own_lengths]
        extra = batch[len(own) :]
        mixed += len(extra)
        assert not {s.casefold() for s in extra} & taken
        assert all(lengths[s] <= max(own_lengths[s] for s in own) for s in extra)  # a batch of short ones: none fits
    assert mixed  # the batches of the long (upper-cased) strings took general ones


def test_a_words_run_mixes_in_words(tiny_bert, monkeypatch):
    seen, _ = batches_of(tiny_bert, WORDS, monkeypatch, mode="words", mix_general=0.25, batch_size=6, epochs=1)
    words = set(general_text("words"))
    extra = [s for batch in seen for s in batch if s not in WORDS]
    assert extra and set(extra) <= words and all(" " not in s for s in extra)


def test_the_mixer_draws_only_what_fits():
    mixer = Mixer(("a", "bb", "cc dd"), (1, 2, 3), 0.5)
    import random

    rng = random.Random(0)
    assert mixer.draw(4, 1, rng) == ["a"]  # one fits: one, not four
    assert set(mixer.draw(2, 2, rng)) == {"a", "bb"}
    assert len(mixer.draw(2, None, rng)) == 2


def test_the_bundled_general_text_and_its_licence_exist():
    sentences, words = general_text("sentences"), general_text("words")
    assert len(sentences) >= 3000 and len(words) >= 3000
    assert all(8 <= len(s.split()) <= 40 for s in sentences) and all(w.isalpha() and w.islower() for w in words)
    licence = (GENERAL / LICENSE_FILE).read_text()
    assert "CC BY-SA" in licence and "Wikipedia" in licence and "make_general_text.py" in licence
    assert set(FILES.values()) | {LICENSE_FILE} <= {p.name for p in GENERAL.iterdir()}
    with pytest.raises(MirrorError, match="no general text"):
        general_text("paragraphs")


def test_no_general_string_comes_from_a_general_checks_data():
    gold = "\n".join(p.read_text(encoding="utf-8").casefold() for p in sorted(GOLD.glob("*.t*")))
    assert not [s for s in general_text("sentences") if s.casefold() in gold]
    pair_words = {w.casefold() for name in ("simlex999.txt", "wordsim353.tsv") for p in read_pairs(GOLD / name)
                  for w in p[:2]}  # fmt: skip
    assert not set(general_text("words")) & pair_words


def test_mix_general_is_a_setting_with_a_range():
    assert MirrorConfig.preset("sentences").mix_general == 0.0
    assert build_parser().parse_args(["train", "in.txt", "--out", "o", "--mix-general", "0.1"]).mix_general == 0.1
    for bad, message in ((0.95, "general text fraction must be <= 0.9"), (-0.1, "must be >= 0")):
        with pytest.raises(MirrorError, match=message):
            MirrorConfig.preset("words", mix_general=bad)
