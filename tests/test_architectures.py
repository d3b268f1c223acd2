"""Every BERT-family architecture the README lists, end to end: a tiny random model of each (tests/architectures.py,
its own tokenizer) loads with the fastest attention its architecture has (eager for MPNet and DeBERTa, with a note),
tunes through the CLI (`train --index`, with LoRA and frozen layers and embeddings) and through the service (the app's
Launch), and each saved folder loads in plain SentenceTransformer giving the vectors our encoder and its index hold.
What depends on the architecture is checked on the way: the mask token, token type ids, the position limit, LoRA's
targets, the frozen layers' names, the dropout keys, the bf16 inference copy and the memory plan.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from tests.architectures import ARCHITECTURES, EAGER, SENTENCE_ENCODERS, build
from tests.conftest import TINY, WORDS
from ui.plan_md import plan_text

TOL = 0.02  # largest component difference of unit vectors (the invariant test's rule): bf16 noise is ~0.005
LONG = " ".join(["the big red cat is on the blue car"] * 60)  # ~600 tokens: past every position table here
TEXTS = [*WORDS, "a man is on the big red bus", "the small dog is on the blue car", LONG]


def reference(folder: Path, texts: list[str]) -> np.ndarray:
    """What a user who downloads the model computes: SentenceTransformer(folder), fp32, unit rows."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    return model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)


def weights(folder: Path) -> dict:
    from mirror.encoder import load_encoder

    return {k: v.detach().clone() for k, v in load_encoder(folder).model.named_parameters()}


def assert_loads_like_sentence_transformers(folder: Path, index_folder: Path) -> None:
    """The saved folder in plain SentenceTransformer = our encoder of it (fp32) = the rows its index holds."""
    from explorer.compare.explore import vectors_of
    from index.store import VectorIndex
    from mirror.encoder import load_encoder

    tuned = load_encoder(folder)
    ref = reference(folder, TEXTS)
    assert np.abs(tuned.encode(TEXTS, precision="fp32") - ref).max() < 1e-5
    index = VectorIndex.load(index_folder, tuned, gpu=False)
    rows = vectors_of(index)
    by_text = {t: i for i, t in enumerate(TEXTS)}
    assert sorted(index.texts) == sorted(TEXTS)
    assert np.abs(rows - ref[[by_text[t] for t in index.texts]]).max() <= TOL
    # the CPU bf16 inference copy (its Linear weights in bf16, whatever the architecture's layout) gives the same
    bf16 = tuned.encode(TEXTS, precision="bf16")
    assert tuned.twin_nbytes > 0 and np.abs(bf16 - ref).max() <= TOL


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_architecture_tunes_saves_reloads_and_indexes(arch, tmp_path, capsys):
    import torch

    from explorer import MirrorApp, Settings
    from mirror import memory
    from mirror.__main__ import main
    from mirror.augment import make_views
    from mirror.config import MirrorConfig
    from mirror.encoder import load_encoder
    from mirror.lora import LAYER, lora_targets
    from mirror.train import embedding_names

    base = build(arch, tmp_path / "models" / arch)
    enc = load_encoder(base, dropout=0.3)

    # attention: fused where transformers has it for the architecture, else eager, and the runs say so
    assert enc.attention == ("eager" if arch in EAGER else "sdpa")
    geometry = memory.model_geometry(enc.model)
    assert geometry.fused == (arch not in EAGER) and (geometry.relative > 0) == (arch == "deberta-v2")
    # the memory plan counts a gated MLP's (ModernBERT's) 2x-wide projection
    intermediate = getattr(enc.model.config, "intermediate_size", None) or enc.model.config.hidden_dim
    assert geometry.intermediate == (2 if arch == "modernbert" else 1) * intermediate
    # the run's dropout everywhere the architecture keeps one (ModernBERT: attention, MLP and embedding dropout)
    drops = [m.p for m in enc.model.modules() if isinstance(m, torch.nn.Dropout)]
    drops += [m.attention_dropout for m in enc.model.modules() if isinstance(getattr(m, "attention_dropout", 0), float)]
    assert drops and set(drops) == {0.3}, drops
    # the mask token the span masking writes into a view is one token of the model's vocabulary
    view = make_views(["the big red cat is on the blue car"], enc.mask_token, 5, random.Random(0))[1][0]
    ids = enc.tokenize([view])["input_ids"][0].tolist()
    assert enc.mask_token in view and ids.count(enc.tokenizer.mask_token_id) == 1, (enc.mask_token, view, ids)
    # the position limit: a string past it is cut to what the position table takes (RoBERTa's and MPNet's start
    # after the padding index), and the model runs on it
    long = enc.tokenize([LONG], max_length=10_000)
    assert long["input_ids"].shape[1] == enc.token_limit <= enc.model.config.max_position_embeddings
    with torch.no_grad():
        assert enc.embed(long).shape == (1, enc.dim)
    # LoRA's targets: the attention projections of every layer, and only those
    targets = lora_targets(enc.model)
    assert targets and all(".attn" in t or ".attention" in t for t in targets), targets
    # the memory plan prices this architecture above what a training forward keeps for its backward
    batch = enc.tokenize(TEXTS[-3:], 48)
    kept = memory.kept_for_backward(enc.model, batch)
    assert memory.step_bytes(3, batch["input_ids"].shape[1], geometry, 4, training=True) > kept
    # the presets: a sentence-transformers folder is a sentence encoder whatever its architecture
    sentences = MirrorConfig.preset("sentences", model=str(base))
    assert (sentences.temperature, sentences.lr) == ((0.1, 1e-5) if arch in SENTENCE_ENCODERS else (0.04, 2e-5))

    # the CLI: tune (LoRA on the attention of the layers above the lowest, which is frozen) and index
    words = tmp_path / "strings.txt"
    words.write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "cli-run"
    settings = ["--max-steps", "2", "--batch-size", "8", "--lr", "1e-3", "--device", "cpu", "--quiet"]
    remedies = ["--lora-rank", "2", "--freeze-layers", "1"]
    argv = ["train", str(words), "--out", str(out), "--model", str(base), "--index", *settings, *remedies]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert ("has no fused (SDPA) attention" in printed) == (arch in EAGER), printed
    assert_loads_like_sentence_transformers(out / "model", out / "tuned_index")
    before, after = weights(base), weights(out / "model")
    assert before.keys() == after.keys()
    changed = {k for k in before if not torch.allclose(before[k], after[k], atol=1e-7, rtol=0)}
    layer_1 = {k for k in targets if LAYER.search(k + ".").group(1) == "1"}
    assert changed and {k.rsplit(".", 1)[0] for k in changed} <= layer_1, changed  # only the adapted weights
    assert {t + ".weight" for t in layer_1} <= changed
    layer_1_weights = {k for k in before if (m := LAYER.search(k)) and m.group(1) == "1"}

    # the service: the app's Launch on the folder (allowed as a local model root), served and indexed
    app = MirrorApp(
        Settings(work_dir=tmp_path / "sessions", model_roots=(base.parent,), general_checks=False, warm_up=False)
    )
    session = app.session()
    app.loader.load_pasted(session, "\n".join(TEXTS))
    if arch in EAGER:  # the plan shown before Launch says so too
        assert "has no fused (SDPA) attention" in plan_text(app, session, str(base), "auto", dict(TINY))
    frozen = {"freeze_layers": 1, "freeze_embeddings": True}  # every weight trains but the lowest layer's and these
    events = list(app.trainer.train(session, str(base), "auto", {**TINY, **frozen}))
    assert events[-1].kind == "done", events[-1]
    run = events[-1].run
    after = weights(run.folder / "model")
    changed = {k for k in before if not torch.allclose(before[k], after[k], atol=1e-7, rtol=0)}
    embeddings = {k for k in before if k.startswith(embedding_names(enc.model))}
    assert any(k.startswith("encoder.") for k in embeddings) == (arch in ("mpnet", "deberta-v2"))  # relative ones
    assert any(k in changed for k in layer_1_weights) and not changed & embeddings, (changed, embeddings)
    assert all(LAYER.search(k) is None or LAYER.search(k).group(1) != "0" for k in changed), changed
    assert any("has no fused (SDPA) attention" in n for n in run.stats.get("notes", [])) == (arch in EAGER)
    assert_loads_like_sentence_transformers(run.folder / "model", run.folder / "tuned_index")
    hits = app.searcher.search(session, "cat", k=3)[0]
    assert len(hits["tuned"]) == 3 and len(hits["base"]) == 3
