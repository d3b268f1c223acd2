"""The device and the number format a model runs in: `resolve_device`, `resolve_precision` and `autocast` ("auto": bf16
on CUDA; on a CPU with native bf16, bf16 where this machine measured it faster for the model and the kind of work,
`bf16_measured_faster`; fp32 elsewhere), and the bf16 inference copy of a model's Linear weights that CPU bf16
encoding runs (`bf16_twin`), with the weights sample that tells when it is stale.
"""

from __future__ import annotations

import json
import os
import platform
import threading
import time
from pathlib import Path
from typing import Any

import torch

try:  # the lock around precision.json's writes (Unix); elsewhere processes measuring at once may keep one
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

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


def autocast(device: torch.device, precision: str = "auto", model: Any = None, kind: str = "encode"):
    """The autocast context for `precision` ("auto", "fp32", "bf16", "fp16") on `device` (resolve_precision)."""
    dtype = resolve_precision(device, precision, model, kind)
    if dtype is None:
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=dtype)


def resolve_precision(
    device: torch.device, precision: str = "auto", model: Any = None, kind: str = "encode"
) -> torch.dtype | None:
    """None for fp32. "auto": bf16 on CUDA (fp16 without bf16); on a CPU with native bf16, bf16 where this machine
    measured `model` faster in it for `kind` of work ("encode" or "train": bf16_measured_faster), or, without a
    model to measure, the CPU's flag alone; fp32 on other CPUs."""
    if precision == "fp32":
        return None
    if precision == "bf16":
        return torch.bfloat16
    if precision == "fp16":
        return torch.float16
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if not cpu_has_native_bf16():
        return None
    if model is None or bf16_measured_faster(model, kind):
        return torch.bfloat16
    return None


def cpu_has_native_bf16() -> bool:
    """True on CPUs with AVX512-BF16 or AMX, where oneDNN runs bf16 matmuls natively."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # pragma: no cover - very old torch builds
        return False


# Native bf16 is not always the quicker (issue 54: on one AVX-512 machine bf16 encoding took 1.3-1.6x fp32's time for
# MiniLM, training 1.4x), so a CPU measures it: once per machine, model shape and kind of work, a few batches of each
# format alternating; bf16 is chosen only where it takes at most BF16_MARGIN of fp32's time (a tie keeps fp32, exact).
# The answers are kept in a file (precision_file: the server, the CLI and the tests' processes on one machine agree).
BF16_MARGIN = 0.9
PROBE_ROWS, PROBE_TOKENS, PROBE_REPEATS = 32, 24, 3
MEASURED: dict[tuple, dict[str, float]] = {}  # (kind, model shape) -> {"fp32": s, "bf16": s, "bf16_chosen": 0/1}
_MEASURE_LOCK = threading.Lock()


def model_shape(model: Any) -> tuple:
    """What a measurement holds for: the model's class and its parameters' count and shapes' count (a wrapper of the
    same model, a copy, a tuned model of the same base: one measurement)."""
    inner = getattr(model, "module", model)
    params = list(inner.parameters())
    return type(inner).__name__, sum(p.numel() for p in params), len(params)


def precision_file() -> Path:
    """Where this machine's measurements are kept: $MIRROR_CACHE_DIR, else the user's cache folder."""
    root = os.environ.get("MIRROR_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(root) / ("" if os.environ.get("MIRROR_CACHE_DIR") else "mirror-explorer") / "precision.json"


def machine_key() -> str:
    """The CPU (its model name), torch's version and its threads: what a measurement holds for."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    return f"{name} | torch {torch.__version__} | {torch.get_num_threads()} threads"


def bf16_measured_faster(model: Any, kind: str = "encode") -> bool:
    """Whether bf16 runs `model` faster than fp32 on this CPU for `kind` ("encode": inference through the bf16 twin, as
    Encoder.encode runs it; "train": a forward and backward pass under autocast, as a training step runs it): measured
    once per machine and model shape (MEASURED, kept in precision_file), with the RNG state and the model's gradients
    and mode left as found."""
    key = (kind, model_shape(model))
    with _MEASURE_LOCK:
        if key not in MEASURED:
            name = f"{machine_key()} | {kind} | {'/'.join(map(str, key[1]))}"
            path = precision_file()
            try:
                kept = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                kept = {}
            if not isinstance(kept, dict):  # valid JSON of another shape (`[1, 2]`): measured again, rewritten
                kept = {}
            if isinstance(kept.get(name), dict) and "bf16_chosen" in kept[name]:
                MEASURED[key] = kept[name]
            else:
                MEASURED[key] = kept[name] = _measure(getattr(model, "module", model), kind)
                _keep(path, name, MEASURED[key])
    return bool(MEASURED[key]["bf16_chosen"])


def _keep(path: Path, name: str, entry: dict[str, Any]) -> None:
    """Add one measurement to `path` under an exclusive lock, read again inside it: processes measuring at once each
    keep theirs (three at once kept one of three when each wrote the file it had read before measuring)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(f".{path.name}.lock"), "a") as lock:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                kept = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                kept = {}
            kept = kept if isinstance(kept, dict) else {}
            kept[name] = entry
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(kept, indent=1, sort_keys=True), encoding="utf-8")
            tmp.replace(path)
    except OSError:  # a read-only home: measured again by the next process
        pass


def _measure(model: Any, kind: str, clock=time.perf_counter) -> dict[str, float]:
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 1000) or 1000)
    was_training = model.training
    grads = {id(p): p.grad for p in model.parameters()}
    best = {"fp32": float("inf"), "bf16": float("inf")}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        ids = torch.randint(5, max(6, min(vocab, 1000)), (PROBE_ROWS, PROBE_TOKENS))
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        try:
            if kind == "train":
                model.train()

                def run(fmt: str) -> None:
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=fmt == "bf16"):
                        out = model(**batch)[0]
                    if out.requires_grad:  # not when every layer is frozen
                        out.float().pow(2).mean().backward()
                    for p in model.parameters():
                        p.grad = None
            else:
                model.eval()
                twin = bf16_twin(model)

                def run(fmt: str) -> None:
                    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=fmt == "bf16"):
                        (twin if fmt == "bf16" else model)(**batch)

            for fmt in ("fp32", "bf16"):  # a first pass of each (oneDNN's kernels chosen, memory allocated): untimed
                run(fmt)
            for _ in range(PROBE_REPEATS):
                for fmt in ("fp32", "bf16"):
                    t = clock()
                    run(fmt)
                    best[fmt] = min(best[fmt], clock() - t)
        finally:
            model.train(was_training)
            for p in model.parameters():
                p.grad = grads.get(id(p))
    return {**best, "bf16_chosen": float(best["bf16"] <= BF16_MARGIN * best["fp32"])}


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
