"""Tiny random models of every BERT-family architecture the README lists, each with a tokenizer of its own kind built
offline (WordPiece, byte-level BPE, SentencePiece Unigram) and its own special tokens: `<mask>` for RoBERTa, XLM-R and
MPNet, `[MASK]` for the rest; no token type ids for DistilBERT, RoBERTa, XLM-R, MPNet and ModernBERT.

    folder = build("mpnet", tmp_path / "mpnet")   # a sentence-transformers folder, as all-mpnet-base-v2 is

`SENTENCE_ENCODERS` are saved as sentence-transformers folders (mean pooling), as the bases users bring of those
architectures are (all-mpnet-base-v2, all-MiniLM, paraphrase-multilingual on XLM-R, msmarco-distilbert,
modernbert-embed); the others as plain Hugging Face checkpoints, as roberta-base, electra-base and deberta-v3-base are.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LETTERS, VOCAB_WORDS

ARCHITECTURES = ("bert", "roberta", "distilbert", "electra", "xlm-roberta", "mpnet", "deberta-v2", "modernbert")
SENTENCE_ENCODERS = {"bert", "distilbert", "xlm-roberta", "mpnet", "modernbert"}
EAGER = {"mpnet", "deberta-v2"}  # no fused (SDPA) attention in transformers: load_encoder falls back to eager
SHAPE = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
POSITIONS = 64  # a short position table: a long string must be truncated within it, never an index error


def _wordpiece(specials: list[str]) -> dict[str, int]:
    tokens = specials + VOCAB_WORDS + LETTERS + ["##" + c for c in LETTERS]
    return {t: i for i, t in enumerate(tokens)}


def _unigram(specials: list[str]) -> list[tuple[str, float]]:
    """A SentencePiece-style vocabulary: the specials, whole words after the ▁ marker, single characters."""
    pieces = [(t, 0.0) for t in specials] + [("▁", -2.0)]
    pieces += [("▁" + w, -1.0) for w in VOCAB_WORDS] + [(c, -3.0) for c in LETTERS]
    return pieces


def tokenizer(arch: str):
    """The tokenizer kind `arch`'s public checkpoints ship, over a small vocabulary."""
    import transformers as tf

    if arch in ("bert", "electra"):
        return tf.BertTokenizer(vocab=_wordpiece(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]), do_lower_case=True)
    if arch == "distilbert":
        return tf.DistilBertTokenizer(vocab=_wordpiece(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    if arch == "modernbert":  # its own is a BPE PreTrainedTokenizerFast with BERT's specials and no token types
        tok = tf.BertTokenizer(vocab=_wordpiece(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]), do_lower_case=True)
        tok.model_input_names = ["input_ids", "attention_mask"]
        return tok
    if arch == "mpnet":
        return tf.MPNetTokenizer(vocab=_wordpiece(["<s>", "<pad>", "</s>", "[UNK]", "<mask>"]))
    if arch == "roberta":
        chars = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "Ġ"] + LETTERS + [c.upper() for c in LETTERS if c.isalpha()]
        return tf.RobertaTokenizer(vocab={t: i for i, t in enumerate(chars)}, merges=[])
    if arch == "xlm-roberta":
        return tf.XLMRobertaTokenizer(vocab=_unigram(["<s>", "<pad>", "</s>", "<unk>", "<mask>"]))
    if arch == "deberta-v2":
        return tf.DebertaV2Tokenizer(vocab=_unigram(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    raise ValueError(arch)


def config(arch: str, vocab_size: int, pad_id: int):
    """A 2-layer, 32-wide config of `arch` (its own layout: ELECTRA's narrower embeddings, ModernBERT's gated MLP and
    local/global attention, DeBERTa-v3's disentangled relative attention)."""
    import transformers as tf

    common = {"vocab_size": vocab_size, "pad_token_id": pad_id}
    if arch == "distilbert":
        return tf.DistilBertConfig(
            dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=POSITIONS, **common
        )
    if arch == "modernbert":
        ids = {k: None for k in ("bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id")}
        return tf.ModernBertConfig(**SHAPE, global_attn_every_n_layers=2, local_attention=8, **ids, **common)
    shaped = {**SHAPE, "max_position_embeddings": POSITIONS, **common}
    if arch == "deberta-v2":  # deberta-v3-base's attention: relative, log buckets, no absolute positions
        extra = {"relative_attention": True, "position_buckets": 16, "pos_att_type": ["p2c", "c2p"]}
        return tf.DebertaV2Config(**shaped, **extra, position_biased_input=False, norm_rel_ebd="layer_norm")
    if arch == "electra":
        return tf.ElectraConfig(**shaped, embedding_size=16)
    classes = {"bert": tf.BertConfig, "roberta": tf.RobertaConfig, "xlm-roberta": tf.XLMRobertaConfig}
    return {**classes, "mpnet": tf.MPNetConfig}[arch](**shaped)


def build(arch: str, folder: Path, seed: int = 0) -> Path:
    """A tiny random `arch` model with its tokenizer in `folder`: a sentence-transformers folder (mean pooling) for
    SENTENCE_ENCODERS, a plain Hugging Face folder otherwise."""
    import torch
    from transformers import AutoModel

    from mirror.encoder import write_st_files

    tok = tokenizer(arch)
    cfg = config(arch, len(tok), tok.pad_token_id)
    torch.manual_seed(seed)
    model = AutoModel.from_config(cfg)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    if arch in SENTENCE_ENCODERS:
        write_st_files(
            folder, cfg.hidden_size, "mean", POSITIONS - 2 if arch in ("xlm-roberta", "mpnet") else POSITIONS
        )
    return folder
