"""Encoder.encode: token-budgeted batches in input order, precision by training's rule, the bf16 twin of the
Linear weights for CPU inference; faithfulness of bf16 to fp32 on the bundled model (slow)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mirror import encoder as encoder_module
from mirror.encoder import cpu_has_native_bf16, load_encoder

TEXTS = ["a much longer string about a red dog on the bus", "cat", "red bus", "", "the big man is on a small car",
         "dog", "a woman", "blue sun and a blue moon on the big red tree", "rock", "is"]  # fmt: skip
needs_bf16 = pytest.mark.skipif(not cpu_has_native_bf16(), reason="this CPU has no native bf16: auto is fp32")


@pytest.fixture(scope="module")
def enc(tiny_bert):
    return load_encoder(tiny_bert)


def one_by_one(enc, texts, precision):
    return np.vstack([enc.encode([t], precision=precision) for t in texts])


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("precision", ["fp32", "auto"])
def test_batches_restore_the_input_order_and_match_strings_encoded_alone(enc, precision):
    together = enc.encode(TEXTS, batch_size=3, precision=precision)
    alone = one_by_one(enc, TEXTS, precision)
    if precision == "fp32":
        np.testing.assert_allclose(together, alone, atol=1e-5)
    else:  # bf16 rounding depends on the padded length a little
        assert cosines(together, alone).min() > 0.999
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)


def test_batches_hold_at_most_the_token_budget_and_progress_counts_up(enc, monkeypatch):
    monkeypatch.setattr(encoder_module, "CPU_BATCH_TOKENS", 24)
    shapes, done = [], []
    original = enc.embed
    monkeypatch.setattr(enc, "embed", lambda b, p=None: shapes.append(tuple(b["input_ids"].shape)) or original(b, p))
    budgeted = enc.encode(TEXTS * 3, batch_size=8, on_progress=lambda d, t: done.append(d), precision="fp32")

    assert all(n * width <= 24 or n == 1 for n, width in shapes) and max(n for n, _ in shapes) == 8
    assert [w for _, w in shapes] == sorted((w for _, w in shapes), reverse=True)  # longest first: little padding
    assert done == sorted(done) and done[-1] == len(TEXTS) * 3 and len(done) == len(shapes)
    monkeypatch.undo()
    np.testing.assert_allclose(budgeted, enc.encode(TEXTS * 3, precision="fp32"), atol=1e-5)


@pytest.mark.parametrize(("tokens", "chunk"), [(24, 16384), (24, 4), (4096, 16384)])
def test_encode_batches_is_the_batching_encode_runs(enc, monkeypatch, tokens, chunk):
    """mirror.encoder.encode_batches (what the time estimate prices) lists the batches encode() runs."""
    monkeypatch.setattr(encoder_module, "CPU_BATCH_TOKENS", tokens)
    monkeypatch.setattr(encoder_module, "TOKENIZE_CHUNK", chunk)
    shapes = []
    original = enc.embed
    monkeypatch.setattr(enc, "embed", lambda b, p=None: shapes.append(tuple(b["input_ids"].shape)) or original(b, p))
    texts = TEXTS * 3
    enc.encode(texts, batch_size=8, precision="fp32")
    lengths = [len(ids) for ids in enc._token_ids(texts, enc.max_seq_length)]
    assert encoder_module.encode_batches(lengths, 8, tokens) == shapes and len(shapes) > 3


def test_chunks_of_strings_tokenized_apart_keep_their_rows(enc, monkeypatch):
    whole = enc.encode(TEXTS, precision="fp32")
    monkeypatch.setattr(encoder_module, "TOKENIZE_CHUNK", 3)
    np.testing.assert_allclose(enc.encode(TEXTS, precision="fp32"), whole, atol=1e-5)


def test_fp32_is_a_plain_forward_pass_and_the_training_mode_comes_back(enc):
    batch = enc.tokenize(["cat", "a red bus"])
    with torch.inference_mode():
        plain = torch.nn.functional.normalize(enc.embed(batch), dim=-1).numpy()
    enc.model.train()
    try:
        np.testing.assert_allclose(enc.encode(["cat", "a red bus"], precision="fp32"), plain, atol=1e-6)  # no dropout
        assert enc.model.training
    finally:
        enc.model.eval()


@needs_bf16
def test_auto_is_bf16_on_this_cpu_and_the_twin_gives_autocasts_numbers(tiny_bert, monkeypatch):
    import mirror.precision

    monkeypatch.setattr(mirror.precision, "bf16_measured_faster", lambda model, kind="encode": True)  # as measured
    enc = load_encoder(tiny_bert)
    auto = enc.encode(TEXTS)
    assert not np.allclose(auto, enc.encode(TEXTS, precision="fp32"), atol=1e-7)  # it is not fp32
    assert cosines(auto, enc.encode(TEXTS, precision="fp32")).min() > 0.999
    twin = enc._twin[1]
    linear = [m for m in twin.modules() if type(m).__name__ == "_Bf16Linear"]
    assert len(linear) == sum(isinstance(m, torch.nn.Linear) for m in enc.model.modules()) > 0
    assert all(m.weight.dtype == torch.bfloat16 and m.packed for m in linear)  # oneDNN's layout: no data_ptr
    assert not any(isinstance(m, torch.nn.Linear) for m in twin.modules())
    assert twin.embeddings.word_embeddings.weight is enc.model.embeddings.word_embeddings.weight  # shared
    linear_params = sum(
        p.numel() for m in enc.model.modules() if isinstance(m, torch.nn.Linear) for p in m.parameters()
    )
    assert enc.twin_nbytes == 2 * linear_params  # counted in a loaded run's memory (explorer.resources.models.Loaded)

    plain = load_encoder(tiny_bert)
    plain._inference_model = lambda: plain.model  # autocast casting the fp32 weights on every call
    np.testing.assert_array_equal(plain.encode(TEXTS), auto)


@needs_bf16
def test_the_twin_follows_the_weights_when_they_change(tiny_bert, monkeypatch):
    import mirror.precision

    monkeypatch.setattr(mirror.precision, "bf16_measured_faster", lambda model, kind="encode": True)  # as measured
    enc = load_encoder(tiny_bert)
    before = enc.encode(TEXTS)
    first = enc._twin
    assert enc.encode(TEXTS) is not None and enc._twin is first  # reused while the weights stay
    with torch.no_grad():
        for p in enc.model.parameters():
            p.mul_(1.5)  # an optimiser step writes the weights in place
    after = enc.encode(TEXTS)
    assert enc._twin is not first and not np.allclose(before, after, atol=1e-3)
    fresh = load_encoder(tiny_bert)
    with torch.no_grad():
        for p in fresh.model.parameters():
            p.mul_(1.5)
    np.testing.assert_array_equal(fresh.encode(TEXTS), after)


@pytest.fixture
def forced_bf16(monkeypatch):
    """`precision="auto"` is bf16 here whatever the CPU (the twin is then plain bf16 where oneDNN cannot pack)."""
    import mirror.precision  # the precision rules' home (mirror.encoder re-exports them)

    monkeypatch.setattr(mirror.precision, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setattr(mirror.precision, "bf16_measured_faster", lambda model, kind="encode": True)


def fused_adamw_step(model) -> None:
    """One step as mirror_tune takes it: torch's fused AdamW writes the weights in place without bumping
    tensor._version on a CPU (torch 2.13), so a cache keyed on _version went stale."""
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
    torch.manual_seed(0)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)


def test_training_makes_the_inference_copy_stale_by_construction(tiny_bert, forced_bf16):
    from mirror.config import MirrorConfig
    from mirror.train import mirror_tune

    enc = load_encoder(tiny_bert)
    before, generation = enc.encode(TEXTS), enc.generation
    assert enc._twin is not None and enc.name == str(tiny_bert)
    config = MirrorConfig.preset("words", batch_size=4, max_steps=3, lr=5e-2, device="cpu", precision="bf16")
    mirror_tune(["cat", "dog", "car", "bus", "red", "blue", "big", "small"], config, encoder=enc)
    assert enc.generation > generation and enc.name is None  # tuned, not saved: no longer the model at source
    after, exact = enc.encode(TEXTS), enc.encode(TEXTS, precision="fp32")
    assert cosines(after, exact).min() > 0.999  # the tuned weights, in bf16
    assert cosines(before, exact).min() < 0.99  # ... not the copy made of the base


def test_a_writer_that_does_not_bump_the_generation_is_caught_by_the_weights_sample(tiny_bert, forced_bf16):
    enc = load_encoder(tiny_bert)
    before, generation = enc.encode(TEXTS), enc.generation
    with torch.no_grad():
        fused_adamw_step(enc.model)  # not inside enc.changing_weights(): a writer that forgot
    assert enc.generation == generation
    after, exact = enc.encode(TEXTS), enc.encode(TEXTS, precision="fp32")
    assert cosines(after, exact).min() > 0.999 and cosines(before, exact).min() < 0.99


def test_changing_weights_drops_the_copy_even_when_the_write_fails(tiny_bert, forced_bf16):
    enc = load_encoder(tiny_bert)
    enc.encode(TEXTS)
    assert enc.twin_nbytes > 0
    with pytest.raises(RuntimeError), enc.changing_weights():
        assert enc.twin_nbytes == 0  # freed as the write begins
        raise RuntimeError("a step failed half-way")
    assert enc.twin_nbytes == 0 and enc.name is None


def test_training_forward_passes_never_use_the_twin(enc):
    enc.model.train()
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert enc._inference_model() is enc.model  # gradients must reach the real weights
    finally:
        enc.model.eval()


# ---------------------------------------------------------------- faithfulness on the bundled model


@pytest.mark.slow
def test_bf16_embeddings_are_faithful_to_fp32_on_a_real_set():
    """bf16 (what auto picks on a CPU with native bf16) against fp32 on 2,000 words and 1,000 sentences (a quarter
    of each where bf16 is emulated):
    cosine >= 0.999 for every string and >= 99% identical top-10 neighbours; fp32 matches sentence-transformers."""
    from mirror.encoder import bundled_model_path, cpu_has_native_bf16, load_sentence_transformer
    from tests.conftest import ROOT

    enc = load_encoder("bundled")
    # a CPU without native bf16 emulates every bf16 matmul (~200 s on a loaded 2-core machine for the full sets):
    # a quarter of each set there, whose 500 words' and 250 sentences' top-10 neighbours are the same measure
    scale = 1 if cpu_has_native_bf16() else 4
    for name, n in (("en_top10k.txt", 2000 // scale), ("stsb_train_sentences.txt", 1000 // scale)):
        lines = (ROOT / "examples" / name).read_text().splitlines()
        texts = list(dict.fromkeys(t.strip() for t in lines if t.strip()))[:n]
        fp32 = enc.encode(texts, precision="fp32")
        bf16 = enc.encode(texts, precision="bf16")
        assert cosines(bf16, fp32).min() >= 0.999, name
        top = lambda x: np.argsort(-(x[:300] @ x.T), axis=1, kind="stable")[:, :10]  # noqa: E731
        same = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top(bf16), top(fp32), strict=True)])
        assert same >= 0.99, (name, same)
        if name.startswith("stsb"):
            st = load_sentence_transformer(bundled_model_path())
            naive = st.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
            assert cosines(fp32, naive).min() > 0.99999


def test_an_encoder_with_its_bf16_twin_deep_copies_into_an_independent_one(tiny_bert):
    import copy

    enc = load_encoder(tiny_bert)
    before = enc.encode(TEXTS)  # builds the twin where the CPU has native bf16 (packed weights cannot be copied)
    other = copy.deepcopy(enc)  # what the estimate's calibration trains, and must not touch the original
    assert other.model is not enc.model and other.twin_nbytes == 0
    np.testing.assert_array_equal(other.encode(TEXTS), before)
    with torch.no_grad():
        next(other.model.parameters()).add_(1.0)
    np.testing.assert_array_equal(enc.encode(TEXTS), before)


def test_every_tokenizer_call_on_a_served_encoder_holds_the_lock(tiny_bert, tmp_path):
    """A served encoder's tokenizer is shared by searches, the general checks and the planner, each with its own
    truncation/padding settings: a call that changes them while another thread's runs fails ("Already borrowed"). So
    every call goes through mirror.encoder.TOKENIZER_LOCK: encode, tokenize, token_lengths, the long-upload self-check
    and the estimate's count of the checks' tokens."""
    from explorer.compare.forgetting import MIN_LONG, own_long_texts
    from explorer.tune import checkcost

    enc = load_encoder(tiny_bert, pooling="mean")
    real, held = enc.tokenizer, []

    class Watched:
        """The tokenizer, noting for each call whether this thread held the lock."""

        def __getattr__(self, name):
            return getattr(real, name)

        def __len__(self):
            return len(real)

        def __call__(self, *args, **kwargs):
            held.append(encoder_module.TOKENIZER_LOCK._is_owned())
            return real(*args, **kwargs)

    enc.tokenizer = Watched()
    long = [" ".join(f"w{i}x{j}" for j in range(120)) for i in range(MIN_LONG)]
    enc.encode(["a cat", "a dog"])
    enc.tokenize(["a cat"])
    enc.token_lengths(["a cat"])
    assert own_long_texts(enc, enc, long) is not None
    checkcost._CHECK_LENGTHS.clear()
    checkcost.forgetting_lengths(enc)
    assert len(held) >= 5 and all(held), held
    assert not encoder_module.TOKENIZER_LOCK._is_owned()


# Issue 37: a model's memory is priced from its config before any weight is made or downloaded.


def test_the_weights_are_counted_from_the_config_alone(tiny_bert, tmp_path):
    import resource

    from transformers import BertConfig

    from mirror.encoder import check_weights
    from mirror.errors import MirrorError

    enc = load_encoder(tiny_bert)
    exact = 4 * (sum(p.numel() for p in enc.model.parameters()) + sum(b.numel() for b in enc.model.buffers()))
    assert check_weights(tiny_bert, "tiny", 10**9) == exact
    large = tmp_path / "large"  # BERT-large's sizes, no weights: 1.3 GB if they were made
    BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096).save_pretrained(
        large
    )
    for name in ("vocab.txt", "tokenizer_config.json"):
        (large / name).write_bytes((tiny_bert / name).read_bytes())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(MirrorError, match=r"declares 33\d M parameters.*up to 64 MB"):
        load_encoder(large, max_weights=64 * 2**20)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 100 * 1024  # kB: nothing was made
    assert check_weights(large, "large", 2 * 2**30) > 1.3e9  # under a larger budget: counted, on the meta device
    deep = tmp_path / "deep"
    BertConfig(hidden_size=8, num_hidden_layers=100_000, num_attention_heads=1, intermediate_size=8).save_pretrained(
        deep
    )
    with pytest.raises(MirrorError, match="100,000 layers"):
        check_weights(deep, "deep", 2**40)


def test_a_hub_model_is_priced_from_its_config_before_its_weights_come(tiny_bert, tmp_path, monkeypatch):
    import huggingface_hub.constants as constants
    from transformers import BertConfig

    from mirror.errors import MirrorError
    from tests.fake_hub import FakeHub

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    tiny = {p.name: p.read_bytes() for p in tiny_bert.iterdir() if p.is_file()}
    large = {**tiny, "config.json": BertConfig(hidden_size=1024, num_hidden_layers=24).to_json_string().encode()}
    with FakeHub() as hub:
        monkeypatch.setattr(constants, "ENDPOINT", hub.url)
        monkeypatch.setattr(
            constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}"
        )
        hub.models.update({"org/large": large, "org/tiny": tiny})
        with pytest.raises(MirrorError, match="M parameters"):
            load_encoder("org/large", max_weights=64 * 2**20)
        fetched = [r["path"].rsplit("/", 1)[-1] for r in hub.requests if "/resolve/" in r["path"]]
        assert set(fetched) == {"config.json"}  # the weights never came down
        enc = load_encoder("org/tiny", max_weights=64 * 2**20)  # a model that fits loads as before
        assert enc.encode(["cat"]).shape == (1, 32)
