"""Transformers models from a folder: priced from their config before any weight is made (`check_weights`), built
with the fastest attention the architecture has (`load_hf`), never with remote code; their messages name the model
as the user named it, never a server path.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
from pathlib import Path
from typing import Any

import torch

from mirror import memory
from mirror.errors import MirrorError, without_paths

# Attribute names that hold dropout probabilities across BERT-family configs: BERT, RoBERTa, ELECTRA, MPNet, DeBERTa
# (hidden_/attention_probs_), DistilBERT (dropout, attention_dropout), ModernBERT (attention_, mlp_, embedding_dropout).
DROPOUT_KEYS = (
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "dropout",
    "attention_dropout",
    "mlp_dropout",
    "embedding_dropout",
)
# Models whose position ids start after the padding index (RoBERTa's scheme): two positions fewer than the config has.
OFFSET_POSITIONS = ("roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "roberta-prelayernorm", "mpnet")

# transformers' lazy top-level module is not thread-safe on first use: two threads importing AutoConfig at
# once (the web app warming up its model while the first request loads another) can get an ImportError.
HF_IMPORT_LOCK = threading.Lock()


# A config naming more layers than this is no encoder this app can tune (the largest BERT-family models have 48);
# building even its empty skeleton would take minutes.
MAX_LAYERS = 256


def check_weights(folder: Path, shown: str, max_bytes: int | None) -> int:
    """The bytes the model in `folder` takes in memory in fp32 (4 per parameter), counted from its config.json
    alone: the model is built on PyTorch's meta device (shapes, no storage), so nothing is allocated or read but
    the config. MirrorError when it is over `max_bytes` (None: any size), or the config is no encoder's. A config
    that declares billions of parameters and ships no weights would otherwise have them all made (and initialised)
    by `from_pretrained` before anything failed."""
    if max_bytes is None:
        return 0
    with HF_IMPORT_LOCK:
        from transformers import AutoConfig, AutoModel

    try:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        remote = _remote_code_error(folder, shown)  # an architecture only its own repository's code defines
        if remote is not None:
            raise remote from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MirrorError(
            f"{shown}: could not read the model's config ({without_folder(first, folder, shown)})"
        ) from None
    sizes = {
        k: getattr(config, k, None) for k in ("num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size")
    }
    if not all(isinstance(v, int) and v > 0 for v in sizes.values()):
        return _counted(config, AutoModel, shown, max_bytes)  # another naming: the skeleton says
    layers, hidden, inter, vocab = sizes.values()
    if layers > MAX_LAYERS:
        raise MirrorError(
            f"{shown}: its config declares {layers:,} layers; this server loads encoders up to {MAX_LAYERS}"
        )
    # a lower bound (embeddings, attention and MLP matrices), before building anything: a config declaring 100 B
    # parameters is refused here, in microseconds
    floor = 4 * (vocab * hidden + layers * (4 * hidden * hidden + 2 * hidden * inter))
    if floor > max_bytes:
        raise MirrorError(_too_large(shown, floor // 4, max_bytes))
    return _counted(config, AutoModel, shown, max_bytes, folder)


def shipped_parameters(folder: Path) -> int | None:
    """How many parameters the weight files in `folder` hold at most, read without loading them: a safetensors
    file's header (shapes), a pickled .bin's size (2 bytes a parameter: fp16, the smallest a checkpoint stores).
    None when it has no weight file (a config alone: a hub model's first look, or a folder that cannot load)."""
    total, found = 0, False
    for path in sorted(folder.glob("*.safetensors")):
        found = True
        try:
            with open(path, "rb") as f:
                size = int.from_bytes(f.read(8), "little")
                if not 0 < size <= 100 * 2**20:
                    continue  # not a safetensors header: the load says what is wrong
                header = json.loads(f.read(size))
        except (OSError, ValueError):
            continue
        for name, entry in header.items():
            if name != "__metadata__" and isinstance(entry, dict):
                total += math.prod(int(d) for d in entry.get("shape", []))
    for path in sorted(folder.glob("pytorch_model*.bin")):
        found = True
        with contextlib.suppress(OSError):
            total += path.stat().st_size // 2
    return total if found else None


def _counted(config: Any, auto_model: Any, shown: str, max_bytes: int, folder: Path | None = None) -> int:
    try:
        with torch.device("meta"):
            skeleton = auto_model.from_config(config, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise MirrorError(
            f"{shown}: could not load the model ({type(exc).__name__}: not an encoder this app loads)"
        ) from None
    n = sum(p.numel() for p in skeleton.parameters()) + sum(b.numel() for b in skeleton.buffers())
    if 4 * n > max_bytes:
        raise MirrorError(_too_large(shown, n, max_bytes))
    shipped = shipped_parameters(folder) if folder is not None else None
    if shipped is not None and shipped < n // 2:  # built anyway, the rest would be random numbers, and cost memory
        raise MirrorError(
            f"{shown}: its weights hold {shipped / 1e6:,.1f} M parameters of the {n / 1e6:,.0f} M its config declares; "
            "a model without its weights would be random numbers: upload the model's own weights"
        )
    return 4 * n


def _too_large(shown: str, n_params: int, max_bytes: int) -> str:
    return (
        f"{shown}: its config declares {n_params / 1e6:,.0f} M parameters, {memory.fmt_gb(4 * n_params)} of memory "
        f"to load; this server loads models up to {memory.fmt_gb(max_bytes)} (MIRROR_LOADED_MB, and half the "
        "memory free now)"
    )


def load_hf(folder: Path, shown: str, dropout: float | None):
    with HF_IMPORT_LOCK:
        from transformers import AutoConfig, AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our callers draw their own progress
    try:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
        if dropout is not None:
            for key in DROPOUT_KEYS:
                if hasattr(config, key):
                    setattr(config, key, dropout)
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
        model = AutoModel.from_pretrained(
            folder, config=config, trust_remote_code=False, attn_implementation=fastest_attention(config)
        )
    except (OSError, ValueError, KeyError) as exc:
        raise load_error(exc, folder, shown) from None
    if not getattr(model.config, "hidden_size", None):
        raise MirrorError(f"{shown}: not a text encoder (no hidden_size in its config)")
    return model, tokenizer


def load_error(exc: Exception, folder: Path, shown: str) -> MirrorError:
    """The message for a model transformers could not load: a model that needs its own code (remote code, which is
    never run here) is said so; anything else is the library's first line, without the server's paths."""
    remote = _remote_code_error(folder, shown)
    if remote is not None:
        return remote
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return MirrorError(f"{shown}: could not load the model ({without_folder(first, folder, shown)})")


def _remote_code_error(folder: Path, shown: str) -> MirrorError | None:
    """The message for a model whose config asks for code from its own repository (auto_map), else None."""
    config = read_json(folder / "config.json")
    if not (isinstance(config, dict) and config.get("auto_map")):
        return None
    return MirrorError(
        f"{shown}: this model's architecture ({config.get('model_type', 'unknown')}) needs code from its own "
        "repository (remote code), which Mirror never runs; use a model of an architecture transformers ships "
        "(BERT, RoBERTa, DistilBERT, ELECTRA, XLM-RoBERTa, MPNet, DeBERTa, ModernBERT, ...)"
    )


def fastest_attention(config: Any) -> str:
    """The attention implementation to load a model of `config` with: "sdpa" (PyTorch's fused kernels: less memory
    in inference, faster on a GPU) where transformers has it for the architecture, else "eager" (MPNet, DeBERTa).
    Always named, never left to the config: a config file could otherwise ask for a kernel from the Hub."""
    with HF_IMPORT_LOCK:
        from transformers import MODEL_MAPPING

    try:
        model_class = MODEL_MAPPING[type(config)]
    except KeyError:  # not a model AutoModel loads: its own error says so
        return "sdpa"
    return "sdpa" if getattr(model_class, "_supports_sdpa", False) else "eager"


def attention_of(model: Any) -> str:
    """The attention implementation `model` runs ("sdpa", "eager", ...), read from its config."""
    while not hasattr(model, "config") and hasattr(model, "module"):  # wrapped by DistributedDataParallel
        model = model.module
    return str(getattr(model.config, "_attn_implementation", None) or "eager")


def attention_note(encoder: Any) -> str | None:
    """What a run or plan says when the model runs eager attention (None with fused attention)."""
    if encoder.attention != "eager":
        return None
    model = encoder.model
    while not hasattr(model, "config") and hasattr(model, "module"):
        model = model.module
    return (
        f"{type(model).__name__} has no fused (SDPA) attention in transformers: it runs the plain (eager) attention, "
        "which keeps every layer's token-by-token scores (more memory and time on long strings; the memory plan "
        "counts them)"
    )


def without_folder(message: str, folder: Path, shown: str) -> str:
    """A library's message with the model folder named as the caller named it and any other absolute path cut to
    its last part: a server's paths stay private."""
    for path in {str(folder.resolve()), str(folder)}:
        message = message.replace(path, shown)
    return without_paths(message)


def model_max_length(model: Any, tokenizer: Any) -> int:
    limit = int(getattr(model.config, "max_position_embeddings", 512) or 512)
    if getattr(model.config, "model_type", "") in OFFSET_POSITIONS:
        limit -= 2  # RoBERTa's (and MPNet's) position ids start after the padding index
    tok = getattr(tokenizer, "model_max_length", limit) or limit
    return max(8, min(limit, int(tok) if tok < 1e6 else limit, 512))


def pooling_from_config(cfg: dict[str, Any]) -> str:
    mode = cfg.get("pooling_mode")
    if isinstance(mode, str):
        return mode
    if cfg.get("pooling_mode_cls_token"):
        return "cls"
    if cfg.get("pooling_mode_mean_tokens"):
        return "mean"
    return "other"


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
