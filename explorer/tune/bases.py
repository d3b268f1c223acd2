"""Base models to choose from: a few well-known ones by need, their size, and their compute per token (what the time
estimate scales by before a model has been timed here).

A model's shape is read from its config without loading weights: the bundled model's and a local folder's
config.json, a hub id's config in the local Hugging Face cache, else KNOWN_CONFIGS (the public configs of the bases
offered in the box). Its parameter count is that config built on PyTorch's meta device (no memory, no download).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirror.config import BUNDLED_MODEL

MINILM_L6 = {"model_type": "bert", "num_hidden_layers": 6, "hidden_size": 384, "intermediate_size": 1536}
BERT_BASE = {"num_hidden_layers": 12, "hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12}
# The public config.json fields that set the size of the hub bases offered in the box (their model cards' configs).
KNOWN_CONFIGS: dict[str, dict[str, Any]] = {
    "sentence-transformers/all-MiniLM-L6-v2": {**MINILM_L6, "num_attention_heads": 12, "vocab_size": 30522},
    "sentence-transformers/all-mpnet-base-v2": {
        "model_type": "mpnet",
        **BERT_BASE,
        "vocab_size": 30527,
        "max_position_embeddings": 514,
    },
    "bert-base-uncased": {"model_type": "bert", **BERT_BASE, "vocab_size": 30522},
    "bert-base-cased": {"model_type": "bert", **BERT_BASE, "vocab_size": 28996},
    "roberta-base": {
        "model_type": "roberta",
        **BERT_BASE,
        "vocab_size": 50265,
        "max_position_embeddings": 514,
        "type_vocab_size": 1,
    },
    "distilbert-base-uncased": {"model_type": "distilbert", "n_layers": 6, "dim": 768, "hidden_dim": 3072},
    "microsoft/deberta-v3-base": {
        "model_type": "deberta-v2",
        **BERT_BASE,
        "vocab_size": 128100,
        "relative_attention": True,
        "position_buckets": 256,
        "max_relative_positions": -1,
        "pos_att_type": ["p2c", "c2p"],
        "position_biased_input": False,
        "share_att_key": True,
        "norm_rel_ebd": "layer_norm",
        "type_vocab_size": 0,
    },  # fmt: skip
}


@dataclass(frozen=True)
class Suggestion:
    """A base offered by need in the base-model box."""

    model: str  # what goes in the box
    name: str  # how it is shown
    need: str  # when to pick it


SUGGESTED = (
    Suggestion(BUNDLED_MODEL, "all-MiniLM-L6-v2 (bundled)", "fast and small; works offline"),
    Suggestion(
        "sentence-transformers/all-mpnet-base-v2", "all-mpnet-base-v2", "a stronger sentence encoder; 8x the compute"
    ),
    Suggestion("bert-base-uncased", "bert-base-uncased", "a plain MLM, not yet a sentence encoder: tuning gains most"),
)


@dataclass(frozen=True)
class Shape:
    """What sizes a model: its parameters, and its multiply-adds per token in the transformer layers."""

    params: int
    layers: int
    hidden: int
    intermediate: int  # the widest MLP activation (2x intermediate_size for a gated MLP)
    relative: int = 0  # DeBERTa's relative-position scores per query (2 x its span)

    @property
    def macs_per_token(self) -> int:
        """Per layer: the four attention projections (4h²), the MLP (h x I in and out, a gated one's 2I in), and
        DeBERTa's relative-position projections (c2p and p2c: 2 x the relative width x h per query)."""
        return self.layers * (
            4 * self.hidden**2 + 2 * self.hidden * self.intermediate + 2 * self.relative * self.hidden
        )


@functools.lru_cache(maxsize=64)
def _shape_of_config(key: str) -> Shape | None:
    """The Shape of the config saved as `key` (a JSON string of config.json's fields), built on the meta device."""
    import json

    import torch
    from transformers import AutoConfig, AutoModel

    from mirror import memory

    fields = json.loads(key)
    model_type = fields.pop("model_type", None)
    fields.pop("auto_map", None)  # the shape of the architecture transformers ships, never a repository's code
    try:
        config = AutoConfig.for_model(model_type, **fields)
        with torch.device("meta"):
            model = AutoModel.from_config(config, trust_remote_code=False)
    except Exception:  # an architecture transformers does not ship, a malformed config: no shape
        return None
    geometry = memory.model_geometry(model)
    params = sum(p.numel() for p in model.parameters())
    return Shape(params, geometry.layers, geometry.hidden, geometry.intermediate, geometry.relative)


def shape_of(model: str) -> Shape | None:
    """The Shape of `model` (bundled, a local folder, a hub id) from its config, never from its weights or the
    network; None where no config is at hand (a hub id neither cached here nor in KNOWN_CONFIGS)."""
    import json

    fields = _config_fields(str(model).strip())
    return _shape_of_config(json.dumps(fields, sort_keys=True)) if fields else None


def _config_fields(model: str) -> dict[str, Any] | None:
    from mirror.encoder import bundled_model_path
    from mirror.names import looks_local

    if model == BUNDLED_MODEL:
        return _read_config(bundled_model_path())
    if looks_local(model, here=False):  # the server's rule: a name is a folder only as a path (mirror.names)
        return _read_config(Path(model).expanduser())
    try:  # a hub id downloaded before: its cached config, offline
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
    except Exception:  # not a valid repo id for the hub library
        cached = None
    if isinstance(cached, str):
        return _read_config(Path(cached).parent)
    return dict(KNOWN_CONFIGS[model]) if model in KNOWN_CONFIGS else None


def _read_config(folder: Path) -> dict[str, Any] | None:
    """config.json of a model folder, or of its sentence-transformers Transformer module."""
    import json

    for path in (folder / "config.json", folder / "0_Transformer" / "config.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("model_type"), str):
            return data
    return None


# Time per multiply-add of a model with DeBERTa's disentangled attention against BERT's, on a CPU: its eager
# attention's gathers over the relative-position scores cost more than their arithmetic. bench_check_cost.py, 2 cores,
# fp32: the checks took 14.7x the bundled model's time on deberta-v3-base's shape and 6.7x on BERT-base's, for 8.9x
# and 8.0x the multiply-adds: (14.7 / 8.9) / (6.7 / 8.0) = 2.0 (bench/RESULTS.md, "Any BERT-family base").
RELATIVE_ATTENTION_SLOWDOWN = 2.0


def relative_compute(model: str) -> float | None:
    """Compute per token of `model` relative to the bundled model, as time (multiply-adds, and DeBERTa's relative
    attention's measured slowdown); None: its shape is not known here."""
    shape, bundled = shape_of(model), shape_of(BUNDLED_MODEL)
    if shape is None or bundled is None:
        return None
    slowdown = RELATIVE_ATTENTION_SLOWDOWN if shape.relative else 1.0
    return slowdown * shape.macs_per_token / bundled.macs_per_token


def fmt_params(n: int) -> str:
    """A parameter count in a few characters: '22.7M', '110M'."""
    millions = n / 1e6
    return f"{millions:.1f}M" if millions < 100 else f"{millions:.0f}M"
