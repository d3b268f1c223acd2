"""A newcomer's pass (a Gene Ontology pairs file, an acronym CSV): the Detected line said "the sentences preset for
pairs (…, distilled from the base (λ 10), blended with it at α 0.5)" although a pairs run chooses its own α after
training (mirror/choose.py), and "the sentences preset (…, max length 50 tokens, blended with it at α 0.25)", where
"it" stood for nothing. It names the base, and a pairs preset's α as the one the run picks."""

from __future__ import annotations

from mirror.config import MirrorConfig
from ui import render, render_load


def test_a_plain_preset_is_blended_with_the_base_not_with_it():
    said = render.preset_blend(MirrorConfig.preset("sentences", pairs=False))
    assert said == ", blended with the base at α 0.25"
    assert "with it" not in said


def test_a_pairs_preset_says_the_run_picks_its_alpha():
    said = render.preset_blend(MirrorConfig.preset("sentences", pairs=True))
    assert "the α the run picks after training (1, 0.75, 0.5, 0.25; 0.5 when few rows are held out)" in said


def test_a_pairs_preset_on_a_sentence_encoder_says_each_column_is_distilled_toward_its_own():
    """The pairs preset on the bundled sentence encoder distils each partner toward the base's embedding of itself
    (mirror.config.PAIRS_ENCODER_ADJUSTMENTS); the Detected line says so, and a run that turns it off does not."""
    paired = MirrorConfig.preset("sentences", pairs=True)
    assert paired.distill == 10.0 and paired.pair_distill_own
    assert render_load.distilled(paired) == ", distilled from the base (λ 10, each column toward its own embedding)"
    assert render_load.distilled(MirrorConfig.preset("sentences", pairs=True, pair_distill_own=False)) == (
        ", distilled from the base (λ 10)"
    )
    assert render_load.distilled(MirrorConfig.preset("sentences", pairs=False)) == ""


def test_a_pairs_preset_on_a_sentence_encoder_says_it_may_train_again_and_a_words_one_does_not():
    """retry_anchor (mirror.job._train_again): the pairs preset of a sentence encoder trains again with the general
    anchor where the checks hold its α down; the Detected line says so where the preset does, as the plan prices it."""
    again = "trained again with general text held near the base (λ 30) if the general checks hold that α down"
    assert again in render.preset_blend(MirrorConfig.preset("sentences", pairs=True))
    assert "trained again" not in render.preset_blend(MirrorConfig.preset("words", pairs=True))  # short pairs: never
    assert "trained again" not in render.preset_blend(MirrorConfig.preset("sentences", pairs=True, retry_anchor=0))
