"""The device and the number format a model runs in: `resolve_device`, `resolve_precision` and `autocast` (training's
rule: bf16 on CUDA and on CPUs with native bf16, fp32 elsewhere), and the bf16 inference copy of a model's Linear
weights that CPU bf16 encoding runs (`bf16_twin`), with the weights sample that tells when it is stale.
"""

from __future__ import annotations

from typing import Any

import torch

from mirror.errors import MirrorError


def bf16_twin(model: Any) -> Any:
    """A copy of `model` sharing all its tensors but the Linear ones, which it holds in bf16 (packed for oneDNN
    where the CPU has native bf16): a snapshot of the weights as they are now."""
    import copy

    shared = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    twin = copy.deepcopy(model, memo=shared)  # the module tree only: every tensor is shared
    pack = cpu_has_native_bf16()
    for parent in twin.modules():
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(parent, name, _Bf16Linear(child, pack))
    twin.eval()
    return twin


def weights_sample(model: Any) -> list[torch.Tensor]:
    """64 values each of the first and last parameter and the first and last Linear weight: any training step, blend
    or state-dict load changes them. ~20 us, where a single query takes ~1 ms."""
    params = list(model.parameters())
    linears = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    picked = {id(t): t for t in [*params[:1], *linears[:1], *linears[-1:], *params[-1:]]}.values()
    return [w.detach().reshape(-1)[:: max(1, w.numel() // 64)].to("cpu", copy=True) for w in picked]


def same_sample(sample: list[torch.Tensor], model: Any) -> bool:
    """Whether `model`'s weights still give `sample` (`weights_sample`)."""
    now = weights_sample(model)
    return len(now) == len(sample) and all(torch.equal(a, b) for a, b in zip(now, sample, strict=True))


class _Bf16Linear(torch.nn.Module):
    """A Linear's bf16 inference copy: what autocast computes (bf16 input, weight and bias; bf16 output), without
    casting the weight on each call. Packed, oneDNN also skips re-laying the weight out on each call, which is
    most of a few-token forward pass (a 384x1536 layer for 3 tokens: ~40 us instead of ~300-600 us)."""

    def __init__(self, linear: torch.nn.Linear, pack: bool):
        super().__init__()
        self.weight = linear.weight.detach().to(torch.bfloat16)
        self.bias = None if linear.bias is None else linear.bias.detach().to(torch.bfloat16)
        self.packed = False
        if pack:
            try:
                packed = torch.ops.mkldnn._reorder_linear_weight(self.weight)
                probe = torch.zeros(1, linear.in_features, dtype=torch.bfloat16)
                torch.ops.mkldnn._linear_pointwise(probe, packed, self.bias, "none", [], "")  # runs here, or not at all
                self.weight, self.packed = packed, True
            except (AttributeError, RuntimeError, TypeError):  # private ops absent or changed: the plain bf16 weight
                pass

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(torch.bfloat16)
        if self.packed:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        return torch.nn.functional.linear(x, self.weight, self.bias)


def autocast(device: torch.device, precision: str = "auto"):
    """The autocast context for `precision` ("auto", "fp32", "bf16", "fp16") on `device`."""
    dtype = resolve_precision(device, precision)
    if dtype is None:
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=dtype)


def resolve_precision(device: torch.device, precision: str = "auto") -> torch.dtype | None:
    """None for fp32; auto picks bf16 on CUDA (fp16 without bf16) and on CPUs with native bf16."""
    if precision == "fp32":
        return None
    if precision == "bf16":
        return torch.bfloat16
    if precision == "fp16":
        return torch.float16
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if cpu_has_native_bf16() else None


def cpu_has_native_bf16() -> bool:
    """True on CPUs with AVX512-BF16 or AMX, where oneDNN runs bf16 matmuls natively."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # pragma: no cover - very old torch builds
        return False


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise MirrorError("device 'cuda' was asked for but no CUDA GPU is available; use --device auto or cpu")
    return torch.device(device)


def bf16_nbytes(twin: Any) -> int:
    """Memory held by a bf16 twin's own weights (its Linear weights and biases in bf16)."""
    linears = [m for m in twin.modules() if isinstance(m, _Bf16Linear)]
    return sum(2 * t.numel() for m in linears for t in (m.weight, m.bias) if t is not None)
