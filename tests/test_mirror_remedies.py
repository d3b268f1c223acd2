"""The remedies against forgetting (mirror.config: distill, l2_base, freeze_layers, freeze_embeddings, blend_alpha)
on the tiny random BERT of conftest.py: each term is zero where it should be, and each keeps the model nearer its
base than a run without it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from mirror import MirrorConfig
from mirror.__main__ import build_parser
from mirror.encoder import load_encoder, pooled
from mirror.errors import MirrorError
from mirror.general import general_text
from mirror.loss import distill_cosine, guided_mask, l2_to_anchor, nt_xent
from mirror.terms import (
    GENERAL_JOINS,
    GENERAL_PER_STEP,
    Distill,
    FrozenBase,
    GeneralAnchor,
    LongAnchor,
    general_texts,
    joined,
    long_texts,
    needs_base,
    terms_for,
)
from mirror.train import mirror_tune, plan_steps, save_result
from tests.conftest import SENTENCES

# a run that moves the tiny model a lot: what the remedies must hold back
FAST = {
    "device": "cpu",
    "precision": "fp32",
    "lr": 1e-2,
    "epochs": 6,
    "batch_size": 4,
    "mode": "sentences",
    "min_steps": 0,
}


def cfg(model, **kw) -> MirrorConfig:
    kw = {**FAST, **kw}
    return MirrorConfig.preset(kw.pop("mode"), model=str(model), **kw)


def weights(encoder) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in encoder.model.state_dict().items()}


def distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return float(sum((a[k].float() - b[k].float()).pow(2).sum() for k in a if a[k].is_floating_point()))


def mean_cosine_to(base, tuned, texts) -> float:
    return float(np.mean(np.sum(base.encode(texts) * tuned.encode(texts), axis=1)))


def test_distill_term_is_zero_for_the_same_embeddings_and_grows_with_the_angle():
    z = torch.randn(5, 16)
    assert float(distill_cosine(z, z)) == pytest.approx(0.0, abs=1e-6)
    assert float(distill_cosine(z, 3 * z)) == pytest.approx(0.0, abs=1e-6)  # cosine: the length does not count
    assert float(distill_cosine(z, -z)) == pytest.approx(2.0, abs=1e-6)
    near = z + 0.1 * torch.randn(5, 16)
    assert 0 < float(distill_cosine(z, near)) < float(distill_cosine(z, torch.randn(5, 16)))
    with pytest.raises(ValueError):
        distill_cosine(z, z[:3])


def test_l2_to_anchor_is_zero_at_the_anchor_and_the_squared_distance_away_from_it():
    w = [torch.randn(3, 4), torch.randn(4)]
    assert float(l2_to_anchor(w, [t.clone() for t in w])) == 0.0
    moved = [w[0] + 0.5, w[1].clone()]
    assert float(l2_to_anchor(moved, w)) == pytest.approx(12 * 0.25)
    with pytest.raises(ValueError):
        l2_to_anchor(w, w[:1])


def test_the_anchor_terms_are_zero_at_the_start_of_a_run(tiny_bert):
    """Tuned = base: the distillation term (no dropout, unmasked views) and L2 to the base are both zero."""
    enc = load_encoder(tiny_bert, dropout=0.0)
    config = cfg(tiny_bert, distill=1.0, l2_base=1.0, dropout=0.0)
    base = FrozenBase.of(enc.model, enc.pooling)
    terms = terms_for(config, enc.model, base, SENTENCES, enc.token_lengths(SENTENCES), enc.tokenize, 128)
    assert [type(t).__name__ for t in terms] == ["Distill", "L2ToBase"]
    batch = enc.tokenize(SENTENCES[:4] + SENTENCES[:4], 32)
    enc.model.train()  # as in a training step; dropout 0

    def penalties() -> list[float]:
        emb = enc.embed(batch)
        return [float(t.penalty(enc.model, batch, emb[:4], emb[4:], None).detach()) for t in terms]

    assert penalties() == pytest.approx([0.0, 0.0], abs=1e-5)
    with torch.no_grad():  # moved: a random nudge of one layer's output weights
        weight = dict(enc.model.named_parameters())["encoder.layer.0.output.dense.weight"]
        weight.add_(0.05 * torch.randn(weight.shape, generator=torch.Generator().manual_seed(0)))
    distill, l2 = penalties()
    assert distill > 0 and l2 > 0  # both see it


def test_no_remedy_keeps_no_copy_of_the_base(tiny_bert):
    assert not needs_base(cfg(tiny_bert))
    for remedy in (
        {"distill": 1.0},
        {"l2_base": 1.0},
        {"blend_alpha": 0.5},
        {"guide_margin": 0.1},
        {"long_anchor": 1.0},
        {"general_anchor": 1.0},
    ):
        assert needs_base(cfg(tiny_bert, **remedy)), remedy
    enc = load_encoder(tiny_bert)
    assert terms_for(cfg(tiny_bert), enc.model, None, SENTENCES, [8] * len(SENTENCES), enc.tokenize, 128) == []


def test_frozen_layers_and_embeddings_do_not_change(tiny_bert):
    enc = load_encoder(tiny_bert)
    before = weights(enc)
    result = mirror_tune(SENTENCES, cfg(tiny_bert, freeze_layers=1, freeze_embeddings=True), encoder=enc)
    after = weights(result.encoder)
    assert result.steps > 0
    frozen = [k for k in before if k.startswith(("embeddings.", "encoder.layer.0."))]
    trained = [k for k in before if k.startswith("encoder.layer.1.")]
    assert frozen and all(torch.equal(before[k], after[k]) for k in frozen)
    assert any(not torch.equal(before[k], after[k]) for k in trained)
    # and a later run on the same encoder, without freezing, trains them again
    again = mirror_tune(SENTENCES, cfg(tiny_bert, epochs=1), encoder=result.encoder)
    assert any(not torch.equal(after[k], weights(again.encoder)[k]) for k in frozen)


def test_freezing_more_layers_than_the_model_has_is_a_clear_error(tiny_bert):
    with pytest.raises(MirrorError, match="at most the model's 2 layers"):
        mirror_tune(SENTENCES, cfg(tiny_bert, freeze_layers=3))


def test_freezing_layers_of_a_model_whose_layers_have_no_numbers_is_a_clear_error(tiny_bert, tmp_path):
    """ALBERT shares one layer across its depth (albert_layer_groups.0.albert_layers.0): no lowest N to freeze."""
    from transformers import AlbertConfig, AlbertModel, AutoTokenizer

    folder = tmp_path / "albert"
    shape = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    AlbertModel(AlbertConfig(vocab_size=len(tokenizer), embedding_size=16, **shape)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with pytest.raises(MirrorError, match="AlbertModel.* layers could not be told apart"):
        mirror_tune(SENTENCES, cfg(str(folder), freeze_layers=1))
    assert mirror_tune(SENTENCES, cfg(str(folder))).steps > 0  # unfrozen, it trains


def test_blend_alpha_zero_reproduces_the_base_and_a_half_is_the_midpoint(tiny_bert):
    base = weights(load_encoder(tiny_bert))
    full = mirror_tune(SENTENCES, cfg(tiny_bert))
    assert distance(base, weights(full.encoder)) > 0
    zero = mirror_tune(SENTENCES, cfg(tiny_bert, blend_alpha=0.0))
    assert zero.steps == full.steps and all(torch.equal(base[k], v) for k, v in weights(zero.encoder).items())
    half = weights(mirror_tune(SENTENCES, cfg(tiny_bert, blend_alpha=0.5)).encoder)
    tuned = weights(full.encoder)
    for key, value in half.items():
        if value.is_floating_point():
            torch.testing.assert_close(value, (base[key] + tuned[key]) / 2)


def test_distillation_keeps_the_embeddings_nearer_the_base(tiny_bert):
    base = load_encoder(tiny_bert)
    plain = mirror_tune(SENTENCES, cfg(tiny_bert))
    held = mirror_tune(SENTENCES, cfg(tiny_bert, distill=20.0))
    assert np.isfinite(held.losses).all()
    assert mean_cosine_to(base, held.encoder, SENTENCES) > mean_cosine_to(base, plain.encoder, SENTENCES) + 0.01


def test_l2_to_the_base_keeps_the_weights_nearer_the_base(tiny_bert):
    base = weights(load_encoder(tiny_bert))
    plain = mirror_tune(SENTENCES, cfg(tiny_bert))
    held = mirror_tune(SENTENCES, cfg(tiny_bert, l2_base=10.0))
    assert distance(base, weights(held.encoder)) < 0.5 * distance(base, weights(plain.encoder))


def test_a_remedy_run_saves_and_reloads_with_its_settings(tiny_bert, tmp_path):
    result = mirror_tune(SENTENCES, cfg(tiny_bert, distill=1.0, blend_alpha=0.7, max_steps=2))
    folder = save_result(result, tmp_path / "m")
    again = load_encoder(folder)
    assert again.info["config"]["distill"] == 1.0 and again.info["config"]["blend_alpha"] == 0.7
    np.testing.assert_allclose(again.encode(SENTENCES), result.encoder.encode(SENTENCES), atol=1e-5)


def test_joined_views_use_every_string_once_in_a_seeded_order():
    texts = [f"s{i}" for i in range(10)]
    assert joined(texts, 1, 0) is texts
    views = joined(texts, 3, 0)
    assert [len(v.split()) for v in views] == [3, 3, 3, 1]
    assert sorted(w for v in views for w in v.split()) == sorted(texts)
    assert joined(texts, 3, 0) == views != joined(texts, 3, 1)


def test_a_run_on_joined_views_trains_fewer_longer_strings_and_says_so(tiny_bert):
    enc = load_encoder(tiny_bert)
    config = cfg(tiny_bert, join_views=3, batch_size=2, epochs=1, max_length=64)
    planned = plan_steps(SENTENCES, config, enc)
    result = mirror_tune(SENTENCES, config, encoder=enc)
    assert result.steps == planned == 1  # 8 sentences -> 3 views of up to 3 sentences -> one batch (2 + a merged 1)
    assert result.n_texts == len(SENTENCES) and any("joined 3 at a time: 3 training strings" in n for n in result.notes)
    with pytest.raises(MirrorError, match="make 1 training string"):
        mirror_tune(SENTENCES[:3], cfg(tiny_bert, join_views=3))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("distill", -1.0, "distillation weight must be >= 0"),
        ("l2_base", -0.5, "L2-to-base weight must be >= 0"),
        ("freeze_layers", -1, "frozen layers must be >= 0"),
        ("freeze_layers", 1.5, "frozen layers must be a whole number"),
        ("blend_alpha", 1.5, "blend α must be <= 1"),
        ("blend_alpha", float("nan"), "blend α must be a finite number"),
        ("join_views", 0, "strings joined per view must be >= 1"),
    ],
)
def test_bad_remedy_settings_are_clear_errors(field, value, message):
    with pytest.raises(MirrorError, match=message):
        MirrorConfig.preset("sentences", **{field: value})


def test_every_remedy_is_a_cli_flag():
    args = build_parser().parse_args(
        ["train", "in.txt", "--out", "o", "--distill", "0.5", "--l2-base", "2", "--freeze-layers", "2"]
        + ["--freeze-embeddings", "--blend-alpha", "0.6"]
    )
    assert (args.distill, args.l2_base, args.freeze_layers, args.freeze_embeddings, args.blend_alpha) == (
        0.5,
        2.0,
        2,
        True,
        0.6,
    )


def test_guided_mask_masks_only_what_the_base_puts_within_the_margin():
    e = torch.tensor([[1.0, 0.0], [0.995, 0.1], [0.0, 1.0], [0.6, 0.8]])
    mask = guided_mask(e, 0.01)
    assert mask.tolist() == [[True, True, False, False], [True, True, False, False]] + [
        [False, False, True, False],
        [False, False, False, True],
    ]
    assert not guided_mask(e, 0.0)[~torch.eye(4, dtype=torch.bool)].any()  # no margin: only the strings themselves


def test_a_masked_negative_no_longer_counts_in_the_loss():
    """Masking negative j of string i is the loss without it: a masked near-copy of the positive lowers the loss."""
    torch.manual_seed(0)
    z1 = torch.nn.functional.normalize(torch.randn(3, 8), dim=-1)
    z2 = z1 + 0.05 * torch.randn(3, 8)
    z1[1] = z1[0] + 0.01 * torch.randn(8)  # string 1 is nearly string 0: a hard negative for it
    masked = torch.zeros(3, 3, dtype=torch.bool)
    masked[0, 1] = masked[1, 0] = True
    assert float(nt_xent(z1, z2, 0.05, masked)) < float(nt_xent(z1, z2, 0.05))
    assert float(nt_xent(z1, z2, 0.05, torch.eye(3, dtype=torch.bool))) == pytest.approx(float(nt_xent(z1, z2, 0.05)))


def test_the_long_text_anchor_is_zero_at_the_start_and_keeps_long_texts_nearer_the_base(tiny_bert):
    enc = load_encoder(tiny_bert, dropout=0.0)
    config = cfg(tiny_bert, long_anchor=1.0, dropout=0.0)
    base = FrozenBase.of(enc.model, enc.pooling)
    (anchor,) = terms_for(config, enc.model, base, SENTENCES, enc.token_lengths(SENTENCES), enc.tokenize, 128)
    assert isinstance(anchor, LongAnchor)
    longs = long_texts(SENTENCES, enc.token_lengths(SENTENCES), config.seed)
    assert anchor.texts == longs
    assert sorted(" ".join(longs).split()) == sorted(" ".join(SENTENCES).split())  # every string, once
    anchor_holds(tiny_bert, enc, anchor, anchor.prepare([0, 1]), {"long_anchor": 20.0}, longs)


def anchor_holds(tiny_bert, enc, anchor, step, setting: dict, probe: list[str]) -> None:
    """An anchor owes nothing at the start of a run (the student is the base), and a run with it keeps `probe` nearer
    the base than a run without."""
    enc.model.train()
    z = torch.zeros(1, 4)
    assert float(anchor.penalty(enc.model, {}, z, z, step).detach()) == pytest.approx(0.0, abs=1e-5)
    base = load_encoder(tiny_bert)
    plain = mirror_tune(SENTENCES, cfg(tiny_bert))
    held = mirror_tune(SENTENCES, cfg(tiny_bert, **setting))
    assert np.isfinite(held.losses).all()
    assert mean_cosine_to(base, held.encoder, probe) > mean_cosine_to(base, plain.encoder, probe)


def test_the_general_anchor_draws_wikipedia_paragraphs_is_zero_at_the_start_and_keeps_them_nearer_the_base(tiny_bert):
    sentences = [t for t in general_text("sentences") if t.strip()]
    texts = general_texts("sentences", 42)
    assert texts == general_texts("sentences", 42) and texts != general_texts("sentences", 1)  # seeded
    assert set(sentences) <= set(texts)  # every sentence alone, and runs of consecutive ones joined
    kept = set(texts)
    assert (
        sum(" ".join(sentences[i : i + 4]) in kept for i in range(0, 400, 4)) >= 95
    )  # a chunk's remainder is left out
    chunks = [texts[i : i + GENERAL_PER_STEP] for i in range(0, len(texts), GENERAL_PER_STEP)]
    groups = [{" ".join(sentences[i : i + n]) for i in range(0, len(sentences) - n + 1, n)} for n in GENERAL_JOINS]
    assert all(any(set(c) <= g for g in groups) for c in chunks)  # a step's texts: one join, about one length
    assert len(chunks[-1]) == GENERAL_PER_STEP
    assert general_texts("words", 42)[0] in general_text("words")  # a words run anchors words
    enc = load_encoder(tiny_bert, dropout=0.0)
    config = cfg(tiny_bert, general_anchor=1.0, dropout=0.0)
    base = FrozenBase.of(enc.model, enc.pooling)
    (anchor,) = terms_for(config, enc.model, base, SENTENCES, enc.token_lengths(SENTENCES), enc.tokenize, 128)
    assert isinstance(anchor, GeneralAnchor) and anchor.texts == texts
    step = anchor.prepare([0, 1])
    assert step["input_ids"].shape[0] == GENERAL_PER_STEP and step["input_ids"].shape[1] <= 128
    assert anchor.prepare([1, 0])["input_ids"].shape != step["input_ids"].shape or not torch.equal(
        anchor.prepare([1, 0])["input_ids"], step["input_ids"]
    )  # another step, other texts
    anchor_holds(tiny_bert, enc, anchor, step, {"general_anchor": 20.0}, texts[:64])


def test_pair_distillation_pulls_each_partner_toward_itself_or_toward_its_string(tiny_bert):
    """A pairs run's distillation (issue 60): as chosen, both views toward the base's embedding of the string, so a
    partner (a term, a few words) is pulled toward the base's embedding of its definition; with pair_distill_own the
    partner toward the base's embedding of itself. A student still at the base owes nothing then, and does before."""
    enc = load_encoder(tiny_bert, dropout=0.0, pooling="mean")  # the tiny BERT's [CLS] is one point for every input
    base = FrozenBase.of(enc.model, enc.pooling)
    strings, partners = SENTENCES[:3], ["alpha", "beta gamma", "delta epsilon zeta"]
    batch, second = enc.tokenize(strings), enc.tokenize(partners)
    enc.model.eval()
    z1, z2 = pooled(enc.model, batch, enc.pooling), pooled(enc.model, second, enc.pooling)
    own = Distill(base, 1.0, own=True).penalty(enc.model, batch, z1, z2, None, second).detach()
    toward_string = Distill(base, 1.0).penalty(enc.model, batch, z1, z2, None, second).detach()
    assert float(own) == pytest.approx(0.0, abs=1e-5) and float(toward_string) > 1e-2, float(toward_string)
    lengths = enc.token_lengths(strings)
    for pairs, flag, expected in ((True, True, True), (True, False, False), (False, True, False)):
        config = cfg(tiny_bert, distill=1.0, pairs=pairs, pair_distill_own=flag)
        (term,) = terms_for(config, enc.model, base, strings, lengths, enc.tokenize, 128)
        assert isinstance(term, Distill) and term.own is expected  # a mirror run has no partner to distil
    config = MirrorConfig.preset("sentences", model=str(tiny_bert), pairs=True, distill=1.0, max_steps=3, lr=1e-3)
    texts, partners = SENTENCES, [s.split()[0] for s in SENTENCES]
    as_chosen = mirror_tune(texts, config, pairs=partners)
    to_itself = mirror_tune(texts, dataclasses.replace(config, pair_distill_own=True), pairs=partners)
    assert np.isfinite(to_itself.losses).all() and to_itself.losses != as_chosen.losses
    # the run's page names which distillation its loss holds
    assert to_itself.stats()["loss_terms"] == ["distillation of both columns to the base λ 1"]
    assert as_chosen.stats()["loss_terms"] == ["distillation to the base λ 1"]


def test_guided_negatives_run_and_change_the_run_only_when_on(tiny_bert):
    plain = mirror_tune(SENTENCES, cfg(tiny_bert, max_steps=3))
    off = mirror_tune(SENTENCES, cfg(tiny_bert, max_steps=3, guide_margin=0.0))
    guided = mirror_tune(SENTENCES, cfg(tiny_bert, max_steps=3, guide_margin=0.5))
    assert off.losses == plain.losses
    assert np.isfinite(guided.losses).all() and guided.losses != plain.losses


def test_a_small_upload_trains_more_epochs_up_to_min_steps(tiny_bert):
    enc = load_encoder(tiny_bert)
    config = cfg(tiny_bert, epochs=1, batch_size=4, min_steps=5)  # 8 strings: 2 steps an epoch
    assert (
        config.epochs_for(8) == 3 and config.scheduled(8).epochs == 3 and config.scheduled(8).scheduled(8).epochs == 3
    )
    assert config.epochs_for(400) == 1 and config.scheduled(400) is config  # a large upload: its epochs as set
    assert cfg(tiny_bert, epochs=4, batch_size=4, min_steps=5).epochs_for(8) == 4  # never fewer than asked for
    planned = plan_steps(SENTENCES, config, enc)
    result = mirror_tune(SENTENCES, config, encoder=enc)
    assert result.steps == planned == 6 and result.config.epochs == 3
    with pytest.raises(MirrorError, match="min steps must be >= 0"):
        MirrorConfig.preset("sentences", min_steps=-1)
