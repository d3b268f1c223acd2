"""Shared fixtures: offline mode, one torch thread, tiny random BERT/RoBERTa models built here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"

LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789.,!?'-")
WORDS = ["cat", "dog", "car", "bus", "the", "a", "is", "on", "red", "blue", "big", "small", "man", "woman"]


def pytest_configure(config):
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    """A 2-layer, hidden-32 random BERT with a WordPiece vocab written here (a plain HF folder)."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny_bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + LETTERS + ["##" + c for c in LETTERS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True).save_pretrained(folder)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    import torch

    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_roberta(tmp_path_factory) -> Path:
    """A tiny random RoBERTa with a byte-level BPE vocab of single characters (mask token `<mask>`)."""
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizerFast

    folder = tmp_path_factory.mktemp("tiny_roberta")
    tokens = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "Ġ"] + LETTERS + [c.upper() for c in LETTERS if c.isalpha()]
    RobertaTokenizerFast(vocab={t: i for i, t in enumerate(tokens)}, merges=[]).save_pretrained(folder)
    config = RobertaConfig(
        vocab_size=len(tokens),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=130,
        pad_token_id=1,
    )
    import torch

    torch.manual_seed(0)
    RobertaModel(config).save_pretrained(folder)
    return folder


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA
