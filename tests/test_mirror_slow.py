"""Integration tests on the bundled real model (all-MiniLM-L6-v2): marked slow, still in the default run."""

from __future__ import annotations

import numpy as np
import pytest

from mirror import MirrorConfig
from mirror.encoder import load_encoder, load_sentence_transformer
from mirror.evaluate import evaluate_pairs, read_pairs
from mirror.train import mirror_tune, save_result

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gold(request):
    from tests.conftest import SHARED_DATA

    if not SHARED_DATA.is_dir():
        pytest.skip("shared data not found")
    return {
        "simlex": read_pairs(SHARED_DATA / "wordsim" / "simlex999.txt"),
        "ws353": read_pairs(SHARED_DATA / "wordsim" / "wordsim353.tsv"),
    }


def test_bundled_model_loads_offline_with_its_own_pooling():
    enc = load_encoder("bundled")
    assert (enc.pooling, enc.dim, enc.max_seq_length, enc.mask_token) == ("mean", 384, 256, "[MASK]")
    emb = enc.encode(["a cat sat on the mat", "a kitten sat on the rug", "stock markets fell sharply"])
    assert emb[0] @ emb[1] > emb[0] @ emb[2] + 0.2


def test_tuning_on_a_few_hundred_words_raises_their_word_similarity(gold):
    """[CLS] of the bundled model is a poor word encoder; mirror tuning on the gold words fixes much of it."""
    vocab = sorted({w for pairs in gold.values() for a, b, _ in pairs for w in (a, b)})
    before = {k: evaluate_pairs(load_encoder("bundled", pooling="cls"), v).spearman for k, v in gold.items()}
    result = mirror_tune(vocab, MirrorConfig.preset("words", pooling="cls", device="cpu"))
    after = {k: evaluate_pairs(result.encoder, v).spearman for k, v in gold.items()}
    assert result.steps == 2 * ((len(vocab) + 199) // 200)
    assert np.mean(result.losses[-3:]) < np.mean(result.losses[:3])
    for name in gold:
        assert after[name] > before[name] + 0.1, (name, before, after)


def test_tuned_bundled_model_round_trips_through_sentence_transformers(tmp_path):
    words = ["cat", "dog", "kitten", "puppy", "car", "truck", "apple", "pear"] * 3
    result = mirror_tune(words, MirrorConfig.preset("words", max_steps=2, device="cpu"))
    out = save_result(result, tmp_path / "tuned")
    st = load_sentence_transformer(out)
    ours = load_encoder(out).encode(["cat", "truck"], precision="fp32")  # ST runs fp32
    theirs = st.encode(["cat", "truck"], normalize_embeddings=True)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    assert st.max_seq_length == 256  # the inference length of the base, not the training bound of 25
