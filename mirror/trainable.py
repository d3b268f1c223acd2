"""What a run trains and how its model is called: every weight but the pooler head, the embeddings and the lowest
layers when frozen (`set_trainable`), weight decay on matrices only (`param_groups`), the run's dropout on a model
built with another (`set_dropout`), and the model the steps call, compiled and/or DDP-wrapped (`wrapped_for_training`).
"""

from __future__ import annotations

from typing import Any

import torch

from mirror.config import MirrorConfig
from mirror.errors import MirrorError
from mirror.hf import DROPOUT_KEYS
from mirror.lora import LAYER

# Position embeddings that live in the encoder rather than in `embeddings.`: DeBERTa's relative position embeddings,
# MPNet's relative attention bias. They are embeddings: frozen with them (and DeBERTa's LayerNorm over its relative
# embeddings, `encoder.LayerNorm.`, where the encoder has them: XLM-R-XL's encoder.LayerNorm is its final norm).
ENCODER_EMBEDDINGS = ("encoder.rel_embeddings.", "encoder.relative_attention_bias.")


def embedding_names(model: Any) -> tuple[str, ...]:
    """The name prefixes of `model`'s embedding parameters (what `freeze_embeddings` freezes)."""
    names = ("embeddings.", *ENCODER_EMBEDDINGS)
    return (*names, "encoder.LayerNorm.") if hasattr(getattr(model, "encoder", None), "rel_embeddings") else names


def set_trainable(model: Any, config: MirrorConfig) -> None:
    """What trains: everything but BERT's pooler head (unused by [CLS]/mean pooling), the embeddings when frozen,
    and the lowest `freeze_layers` transformer layers. MirrorError when the model has fewer layers than that, or
    when freezing layers finds no numbered layer to freeze (an architecture whose names the LAYER pattern misses)."""
    layers = getattr(model.config, "num_hidden_layers", None) or getattr(model.config, "n_layers", None)
    if config.freeze_layers and layers is not None and config.freeze_layers > layers:
        raise MirrorError(f"frozen layers must be at most the model's {layers} layers, got {config.freeze_layers}")
    frozen_layers, embeddings = 0, embedding_names(model)
    for name, param in model.named_parameters():
        layer = LAYER.search(name)
        in_frozen_layer = layer is not None and int(layer.group(1)) < config.freeze_layers
        frozen_layers += in_frozen_layer
        frozen = (
            name.startswith("pooler.") or (config.freeze_embeddings and name.startswith(embeddings)) or in_frozen_layer
        )
        param.requires_grad_(not frozen)
    if config.freeze_layers and not frozen_layers:
        raise MirrorError(f"frozen layers: this model's ({type(model).__name__}) layers could not be told apart")
    if not config.lora_rank and not any(p.requires_grad for p in model.parameters()):
        raise MirrorError(
            f"nothing is left to train: the embeddings and all {config.freeze_layers} layers are frozen; freeze fewer "
            "layers, or train the embeddings"
        )


def wrapped_for_training(model: Any, config: MirrorConfig, world_size: int, device: torch.device) -> Any:
    """The model the steps call: compiled and/or DDP-wrapped as the config and world ask."""
    wrapped = torch.compile(model, dynamic=True) if config.compile else model
    if world_size > 1:
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(wrapped, device_ids=[device.index] if device.type == "cuda" else None)
    return wrapped


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on matrices only: biases and LayerNorm weights are not decayed."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim < 2 or "LayerNorm" in name or "layer_norm" in name else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def set_dropout(model: torch.nn.Module, p: float) -> None:
    """The run's dropout on a model built with another: every Dropout module, the attention dropout a module keeps
    as a number (ModernBERT's `attention_dropout`, passed to its attention function), and the config's keys."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = p
        elif isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = p
    for key in DROPOUT_KEYS:
        if hasattr(model.config, key):
            setattr(model.config, key, p)
