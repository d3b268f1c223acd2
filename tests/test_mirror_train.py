"""Training, saving and loading on tiny random models built in conftest.py."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch

from mirror import MirrorConfig
from mirror.encoder import MIRROR_CONFIG_FILE, load_encoder, load_sentence_transformer, save_encoder
from mirror.errors import MirrorError
from mirror.train import mirror_tune, save_result
from tests.conftest import SENTENCES as SHARED_SENTENCES
from tests.conftest import WORDS

SENTENCES = SHARED_SENTENCES[:6]


def cfg(model, **kw) -> MirrorConfig:
    kw.setdefault("device", "cpu")
    kw.setdefault("min_steps", 0)  # the epochs as set: these tests count steps (the schedule: test_mirror_remedies)
    return MirrorConfig.preset(kw.pop("mode", "words"), model=str(model), **kw)


def test_a_few_steps_lower_the_loss_and_change_the_weights(tiny_bert):
    enc = load_encoder(tiny_bert)
    before = {k: v.clone() for k, v in enc.model.state_dict().items()}
    result = mirror_tune(WORDS, cfg(tiny_bert, lr=3e-3, epochs=30, batch_size=8), encoder=enc)
    assert result.steps == 60 and not result.cancelled
    first, last = np.mean(result.losses[:6]), np.mean(result.losses[-6:])
    assert last < first - 0.2, (first, last)
    changed = [k for k, v in result.encoder.model.state_dict().items() if not torch.equal(v, before[k])]
    assert any("encoder.layer.0" in k for k in changed) and any("encoder.layer.1" in k for k in changed)
    assert not result.encoder.model.training  # handed back in eval mode


def test_an_upload_smaller_than_the_batch_still_trains(tiny_bert):
    steps = []
    result = mirror_tune(WORDS[:10], cfg(tiny_bert), on_step=lambda s, t, loss: steps.append((s, t, loss)))
    assert result.steps == 2 == result.total_steps  # 2 epochs x 1 batch of 10 (drop_last would give 0)
    assert [s for s, _, _ in steps] == [1, 2] and all(t == 2 for _, t, _ in steps)
    assert all(np.isfinite(loss) and loss > 0 for _, _, loss in steps)


def test_each_steps_batch_size_is_reported_and_makes_losses_comparable(tiny_bert):
    """Issue 28: 11 strings in batches of 4 end with a batch of 3, whose raw loss starts near log(5), not log(7);
    divided by mirror.loss.chance_loss(B) = log(2B-1) the steps of an untrained model all read about 1."""
    from mirror.loss import chance_loss

    steps = []
    config = cfg(tiny_bert, batch_size=4, epochs=1, lr=1e-9, bucket_by_length=False)
    result = mirror_tune(WORDS[:11], config, on_step=lambda s, t, loss, batch: steps.append((s, loss, batch)))
    assert [b for _, _, b in steps] == result.batch_sizes == [4, 4, 3]
    normalised = [loss / chance_loss(b) for _, loss, b in steps]
    assert all(0.8 < x < 1.2 for x in normalised), normalised  # a random model knows nothing: about chance
    assert abs(steps[-1][1] - math.log(5)) < abs(steps[-1][1] - math.log(7))  # raw: the last batch reads lower


def test_a_trailing_single_string_is_merged_not_nan(tiny_bert):
    result = mirror_tune(WORDS[:9], cfg(tiny_bert, batch_size=4, epochs=1))
    assert result.steps == 2 and all(np.isfinite(result.losses))


def test_duplicates_are_removed_before_batching(tiny_bert):
    result = mirror_tune(["cat", "cat", " dog ", "dog", "", "car"], cfg(tiny_bert, epochs=1))
    assert result.n_texts == 3


def test_too_few_strings_is_a_clear_error(tiny_bert):
    with pytest.raises(MirrorError, match="at least 2 distinct"):
        mirror_tune(["same", "same", "  "], cfg(tiny_bert))


def test_cancel_stops_cleanly_between_steps(tiny_bert):
    seen = []
    result = mirror_tune(
        WORDS,
        cfg(tiny_bert, batch_size=2, epochs=3),
        on_step=lambda s, t, loss: seen.append(s),
        should_stop=lambda: len(seen) >= 3,
    )
    assert result.cancelled and result.steps == 3 == len(result.losses) and result.total_steps == 21
    assert "cancelled" in result.summary()


def test_max_steps_caps_the_run(tiny_bert):
    assert mirror_tune(WORDS, cfg(tiny_bert, batch_size=2, max_steps=4)).steps == 4


def test_training_is_reproducible_with_a_seed(tiny_bert):
    a = mirror_tune(SENTENCES, cfg(tiny_bert, mode="sentences", batch_size=3, epochs=2))
    b = mirror_tune(SENTENCES, cfg(tiny_bert, mode="sentences", batch_size=3, epochs=2))
    assert a.losses == b.losses


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_save_then_load_gives_identical_embeddings_and_keeps_pooling(tiny_bert, tmp_path, pooling):
    result = mirror_tune(WORDS, cfg(tiny_bert, pooling=pooling, batch_size=4, epochs=1))
    out = save_result(result, tmp_path / "tuned")
    again = load_encoder(out)  # pooling "auto" must read it back from 1_Pooling/config.json
    assert again.pooling == pooling
    probe = ["cat", "a big red bus", "moon"]
    np.testing.assert_allclose(result.encoder.encode(probe), again.encode(probe), atol=1e-6)
    st = load_sentence_transformer(out)  # plain sentence-transformers loads the same model
    st_emb = st.encode(probe, normalize_embeddings=True, convert_to_numpy=True)
    np.testing.assert_allclose(st_emb, again.encode(probe, precision="fp32"), atol=1e-5)  # ST's fp32
    meta = json.loads((out / MIRROR_CONFIG_FILE).read_text())
    assert meta["config"]["pooling"] == pooling and meta["stats"]["steps"] == result.steps
    assert meta["stats"]["strings"] == len(WORDS) and "torch" in meta["versions"]


def test_training_max_length_does_not_shrink_the_saved_model(tiny_bert, tmp_path):
    base = load_encoder(tiny_bert)
    result = mirror_tune(SENTENCES, cfg(tiny_bert, mode="sentences", max_length=8, max_steps=1))
    out = save_result(result, tmp_path / "m")
    assert load_encoder(out).max_seq_length == base.max_seq_length == 128
    assert json.loads((out / "sentence_bert_config.json").read_text())["max_seq_length"] == 128


def test_a_crash_during_save_leaves_the_previous_model(tiny_bert, tmp_path, monkeypatch):
    good = save_encoder(load_encoder(tiny_bert), tmp_path / "model", extra={"run": "good"})
    import mirror.encoder as enc_mod

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(enc_mod, "write_st_files", boom)
    with pytest.raises(OSError):
        save_encoder(load_encoder(tiny_bert, pooling="mean"), good)
    assert json.loads((good / MIRROR_CONFIG_FILE).read_text()) == {"run": "good"}
    assert load_encoder(good).pooling == "cls"
    assert sorted(os.listdir(tmp_path)) == ["model"]  # no half-written temp folder left behind


def test_roberta_uses_its_own_mask_token(tiny_roberta, monkeypatch):
    enc = load_encoder(tiny_roberta)
    assert enc.mask_token == "<mask>"
    seen = []
    original = enc.tokenize
    monkeypatch.setattr(
        enc, "tokenize", lambda texts, max_length=None: seen.extend(texts) or original(texts, max_length)
    )
    result = mirror_tune(SENTENCES, cfg(tiny_roberta, mode="sentences", epochs=1), encoder=enc)
    assert result.steps == 1 and np.isfinite(result.losses[0])
    second_views = seen[len(SENTENCES) :]
    assert all(v.count("<mask>") == 1 for v in second_views) and not any("[MASK]" in v for v in seen)
    ids = enc.tokenizer(second_views[0])["input_ids"]
    assert ids.count(enc.tokenizer.mask_token_id) == 1  # the mask string maps to the real mask token


def test_dropout_is_on_in_training_and_configurable(tiny_bert):
    enc = load_encoder(tiny_bert, dropout=0.3)
    assert enc.model.config.hidden_dropout_prob == 0.3 == enc.model.config.attention_probs_dropout_prob
    batch = enc.tokenize(["cat", "cat"])
    enc.model.train()
    torch.manual_seed(0)
    twin = enc.embed(batch)
    assert not torch.allclose(twin[0], twin[1])  # same input, two dropout masks: the positive pair
    enc.model.eval()
    still = enc.embed(batch)
    assert torch.allclose(still[0], still[1])


def test_remote_code_is_never_trusted(tiny_bert, monkeypatch):
    import transformers

    calls = []
    for cls in (transformers.AutoConfig, transformers.AutoModel, transformers.AutoTokenizer):
        original = cls.from_pretrained.__func__

        def spy(klass, *a, _orig=original, **k):
            calls.append(k.get("trust_remote_code"))
            return _orig(klass, *a, **k)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    load_encoder(tiny_bert)
    assert len(calls) >= 3 and all(c is False for c in calls)


def test_unreachable_hub_id_says_offline_and_what_to_do(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(MirrorError, match="offline.*local-dir"):
        load_encoder("some-org/definitely-not-cached-model")


@pytest.mark.parametrize("bad", ["", "   ", "../../etc", "a b c", "./no/such/folder"])
def test_bad_model_names_are_clear_errors(bad):
    with pytest.raises(MirrorError):
        load_encoder(bad)


def test_local_paths_can_be_restricted(tiny_bert, tmp_path):
    with pytest.raises(MirrorError, match="allowed"):
        load_encoder(tiny_bert, allowed_roots=[tmp_path])
    assert load_encoder(tiny_bert, allowed_roots=[tiny_bert.parent]).dim == 32


def test_encode_keeps_input_order_and_normalises(tiny_bert):
    enc = load_encoder(tiny_bert)
    texts = ["a much longer string about a dog", "cat", "red bus"]
    together = enc.encode(texts, batch_size=2)
    apart = np.vstack([enc.encode([t]) for t in texts])
    np.testing.assert_allclose(together, apart, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    assert enc.encode([]).shape == (0, 32)
    assert (
        enc.fingerprint()
        == load_encoder(tiny_bert).fingerprint()
        != load_encoder(tiny_bert, pooling="mean").fingerprint()
    )


def test_tiny_tokenizers_really_tokenize(tiny_bert, tiny_roberta):
    bert, roberta = load_encoder(tiny_bert), load_encoder(tiny_roberta)
    ids = bert.tokenizer("cat zebra")["input_ids"]
    assert bert.tokenizer.unk_token_id not in ids and len(ids) > 4
    assert roberta.tokenizer.unk_token_id not in roberta.tokenizer("a red bus")["input_ids"]


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_every_precision_trains_with_a_finite_loss(tiny_bert, precision):
    result = mirror_tune(SENTENCES, cfg(tiny_bert, mode="sentences", precision=precision, batch_size=3, epochs=2))
    assert result.steps == 4 and all(np.isfinite(result.losses))
    assert result.device.endswith(precision)


def test_length_buckets_train_every_string_with_less_padding(tiny_bert, monkeypatch):
    texts = [("a " * n).strip() + f" {w}" for n, w in zip([1, 9, 2, 8, 1, 9, 2, 8], WORDS, strict=False)]
    enc = load_encoder(tiny_bert)
    widths = []
    original = enc.tokenize
    monkeypatch.setattr(
        enc,
        "tokenize",
        lambda t, max_length=None: (lambda b: widths.append(b["input_ids"].shape) or b)(original(t, max_length)),
    )
    plain = mirror_tune(texts, cfg(tiny_bert, batch_size=4, epochs=1, bucket_by_length=False), encoder=enc)
    plain_widths, widths[:] = list(widths), []
    bucketed = mirror_tune(texts, cfg(tiny_bert, batch_size=4, epochs=1, bucket_by_length=True), encoder=enc)
    assert plain.steps == bucketed.steps == 2
    assert sum(n * w for n, w in widths) < sum(n * w for n, w in plain_widths)


def test_out_of_memory_halves_the_batch_and_says_so(tiny_bert, monkeypatch):
    enc = load_encoder(tiny_bert)
    original = enc.embed
    sizes = []

    def embed(batch, padded=None):  # a GPU that fits at most 8 sequences (4 strings x 2 views)
        sizes.append(batch["input_ids"].shape[0])
        if batch["input_ids"].shape[0] > 8:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        return original(batch, padded)

    monkeypatch.setattr(enc, "embed", embed)
    steps = []
    result = mirror_tune(
        WORDS, cfg(tiny_bert, batch_size=14, epochs=2), encoder=enc, on_step=lambda s, t, loss: steps.append((s, t))
    )
    assert not result.cancelled and all(np.isfinite(result.losses))
    assert sizes[:3] == [28, 14, 6]  # 14 strings (x2 views), then 7, then 3
    assert result.steps == result.total_steps == len(steps) == steps[-1][0] == 10  # 3,3,3,3,2 in each epoch
    assert [n for n in result.notes if "out of memory" in n] and "batch size 3" in result.notes[-1]
    assert result.stats()["notes"] == result.notes


def test_out_of_memory_at_the_smallest_batch_is_a_clear_error(tiny_bert, monkeypatch):
    enc = load_encoder(tiny_bert)

    def embed(batch, padded=None):
        raise torch.OutOfMemoryError("CUDA out of memory (injected)")

    monkeypatch.setattr(enc, "embed", embed)
    with pytest.raises(MirrorError, match="out of memory even at batch size"):
        mirror_tune(WORDS, cfg(tiny_bert, batch_size=8), encoder=enc)


class _NanGrad(torch.autograd.Function):
    """Identity forward, nan gradient backward: a finite loss whose update would break every weight."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return torch.full_like(grad, float("nan"))


def test_a_nan_gradient_stops_the_run_even_when_the_loss_is_finite(tiny_bert, monkeypatch):
    import mirror.train

    real = mirror.train.nt_xent
    monkeypatch.setattr(mirror.train, "nt_xent", lambda z1, z2, t, *masked: real(_NanGrad.apply(z1), z2, t, *masked))
    steps = []
    with pytest.raises(MirrorError, match=r"^the loss became nan: the gradient norm was nan at step 1; lower"):
        mirror_tune(WORDS, cfg(tiny_bert, precision="fp32"), on_step=lambda *a: steps.append(a))
    assert steps == []  # the broken step is not reported as progress


def test_weights_broken_by_the_last_step_are_refused(tiny_bert, monkeypatch):
    """With clipping off no norm is computed: the check after the last step catches the broken weights."""
    import mirror.train

    real = mirror.train.nt_xent
    monkeypatch.setattr(mirror.train, "nt_xent", lambda z1, z2, t, *masked: real(_NanGrad.apply(z1), z2, t, *masked))
    with pytest.raises(MirrorError, match=r"^the loss became nan: the weights are no longer finite after step 1;"):
        mirror_tune(WORDS, cfg(tiny_bert, precision="fp32", grad_clip=0.0, max_steps=1))
