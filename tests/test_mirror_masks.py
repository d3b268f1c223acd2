"""The inputs a training step hands the model (mirror.encoder.model_inputs) give the embeddings transformers' own
mask gives, for every architecture that takes a prepared mask, with SDPA and eager attention; and a step's batch made
ahead in a worker thread (mirror.train.Ahead, on a GPU) changes nothing a run computes."""

from __future__ import annotations

import random

import pytest
import torch

from mirror.encoder import PREPARED_MASK_TYPES, model_inputs, pooled

VOCAB = 120


def tiny_model(model_type: str, attention: str):
    from transformers import AutoConfig, AutoModel

    sizes = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
    if model_type == "distilbert":
        sizes = {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64}
    config = AutoConfig.for_model(model_type, vocab_size=VOCAB, max_position_embeddings=64, pad_token_id=1, **sizes)
    torch.manual_seed(0)
    return AutoModel.from_config(config, attn_implementation=attention).eval()


def batch(lengths: list[int]) -> dict[str, torch.Tensor]:
    width = max(lengths)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, VOCAB, (len(lengths), width), generator=g)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
        ids[row, n:] = 1  # padding
    return {"input_ids": ids, "attention_mask": mask}


# every type that takes a prepared mask, with each attention it has (MPNet has no SDPA; camembert is RoBERTa's code)
COMBOS = [
    (t, a)
    for t in sorted(PREPARED_MASK_TYPES - {"camembert"})
    for a in ("sdpa", "eager")
    if (t, a) != ("mpnet", "sdpa")
]


@pytest.mark.parametrize(("model_type", "attention"), COMBOS)
def test_prepared_inputs_embed_as_transformers_own_mask(model_type, attention):
    model = tiny_model(model_type, attention)
    for lengths in ([7, 3, 5, 1], [6, 6, 6]):  # padded, then a batch without padding (no mask at all)
        b = batch(lengths)
        padded = min(lengths) < max(lengths)
        inputs = model_inputs(model, b, padded)
        assert ("attention_mask" in inputs) == padded
        if padded:
            assert inputs["attention_mask"].dim() == 4
        with torch.no_grad():
            for pooling in ("mean", "cls"):
                ours, theirs = pooled(model, b, pooling, inputs), pooled(model, b, pooling)
                assert torch.allclose(ours, theirs, atol=1e-6), (model_type, attention, lengths, pooling)


def test_other_models_get_their_batch_as_it_is():
    model = tiny_model("bert", "sdpa")
    model.config.model_type = "deberta-v2"  # makes its own mask from the 2-D one
    b = batch([4, 2])
    assert model_inputs(model, b, True) is b
    assert "attention_mask" not in model_inputs(model, batch([3, 3]), False)  # no padding: no mask, for any model


def test_a_batch_made_ahead_in_a_thread_is_the_batch_made_in_turn():
    """Ahead draws from a seeded stream one prepare at a time, in the order taken: threaded or not, the same batches.
    A dropped batch (out of memory: the plan changes) is waited for, never made while another is."""
    import threading
    import time

    from mirror.train import Ahead

    def run(threaded: bool, drop_after: list[int] | None = None) -> list:
        rng, busy, overlaps = random.Random(7), threading.Lock(), []

        def prepare(ids):
            if not busy.acquire(blocking=False):
                overlaps.append(ids)
                busy.acquire()
            time.sleep(0.01)
            try:
                return [(i, rng.random()) for i in ids]
            finally:
                busy.release()

        ahead = Ahead(prepare, threaded)
        queue, out = [[1, 2], [3], [4, 5], [6]], []
        while queue:
            ids = queue.pop(0)
            out.append(ahead.take(ids, queue[0] if queue else None))
            if ids == drop_after:
                ahead.drop()
                queue = [[4], [5], [6]]
        ahead.close()
        assert not overlaps
        return out

    assert run(True) == run(False)
    dropped = run(True, drop_after=[3])
    assert [[i for i, _ in batch] for batch in dropped] == [[1, 2], [3], [4], [5], [6]]


def test_a_run_with_its_batches_made_ahead_computes_what_it_computes_without(tiny_bert, monkeypatch):
    import mirror.train as train
    from mirror import MirrorConfig, mirror_tune
    from tests.conftest import SENTENCES

    config = MirrorConfig.preset("sentences", model=str(tiny_bert), batch_size=3, epochs=2, device="cpu", lr=1e-3)
    plain = mirror_tune(SENTENCES, config)
    real = train.Ahead
    monkeypatch.setattr(train, "Ahead", lambda prepare, threaded: real(prepare, True))
    threaded = mirror_tune(SENTENCES, config)
    assert threaded.losses == plain.losses and threaded.steps == plain.steps > 2
    for a, b in zip(plain.encoder.model.parameters(), threaded.encoder.model.parameters(), strict=True):
        assert torch.equal(a, b)
