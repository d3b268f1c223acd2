"""LoRA (Hu et al. 2021) in plain torch, for `MirrorConfig.lora_rank`: low-rank adapters on the attention Linear layers
of a transformer with every base weight frozen, merged into those weights when training ends, so a saved model is an
ordinary one (the app, the index and `mirror check` load it unchanged).

    n = add_lora(model, rank=8)   # W x  ->  W x + B A x, B = 0: the model computes what it did
    ...train...                   # only the A and B matrices train
    merge_lora(model)             # W <- W + B A: plain Linear layers again
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch

from mirror.errors import MirrorError

# A transformer layer's number in a parameter or module name: encoder.layer.3. (BERT, RoBERTa, ELECTRA, MPNet, DeBERTa),
# transformer.layer.3. (DistilBERT), layers.3. (ModernBERT).
LAYER = re.compile(r"(?:^|\.)layers?\.(\d+)\.")
# An attention block's part of a name: .attention. (BERT and most of the family; MPNet's .attention.attn.), .attn.
# (ModernBERT's Wqkv and Wo).
ATTENTION = re.compile(r"(?:^|\.)(?:attention|attn)(?:\.|$)")


class LoRALinear(torch.nn.Module):
    """`base(x) + B(A(x))`: a frozen Linear plus a trained rank-r update; B starts at zero (the base's output)."""

    def __init__(self, base: torch.nn.Linear, rank: int) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        kw = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.lora_a = torch.nn.Parameter(torch.empty(rank, base.in_features, **kw))
        self.lora_b = torch.nn.Parameter(torch.zeros(base.out_features, rank, **kw))
        torch.nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))  # as a Linear's weight (and peft's A)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + torch.nn.functional.linear(torch.nn.functional.linear(x, self.lora_a), self.lora_b)

    def merged(self) -> torch.nn.Linear:
        """The base Linear with the update written into its weight: W + B·A."""
        with torch.no_grad():
            self.base.weight += (self.lora_b.float() @ self.lora_a.float()).to(self.base.weight.dtype)
        return self.base


def lora_targets(model: Any, skip_layers: int = 0) -> list[str]:
    """Names of the Linear layers of the attention blocks (queries, keys, values, output) of every transformer layer
    from `skip_layers` up (the lower ones are frozen layers: they keep the base's weights)."""
    names = []
    for name, module in model.named_modules():
        layer = LAYER.search(name + ".")
        if (
            isinstance(module, torch.nn.Linear)
            and ATTENTION.search(name)
            and layer
            and int(layer.group(1)) >= skip_layers
        ):
            names.append(name)
    return names


def add_lora(model: Any, rank: int, skip_layers: int = 0) -> int:
    """Freeze every weight of `model` and put a rank-`rank` adapter on each of its `lora_targets` (in place);
    returns how many. MirrorError when the model has none."""
    targets = lora_targets(model, skip_layers)
    if not targets:
        raise MirrorError("LoRA found no attention layers to adapt in this model (or all of them are frozen)")
    model.requires_grad_(False)
    for name in targets:
        parent, _, child = name.rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        setattr(owner, child, LoRALinear(getattr(owner, child), rank))
    return len(targets)


def merge_lora(model: Any) -> int:
    """Write every adapter of `model` into its base weight and put the plain Linear back (in place); returns how many
    (0 for a model without adapters)."""
    found = [(name, m) for name, m in model.named_modules() if isinstance(m, LoRALinear)]
    for name, module in found:
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, module.merged())
    return len(found)
