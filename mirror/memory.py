"""Activation-memory model of a transformer encoder step, and how much memory this machine can give one.

Training keeps every layer's activations for the backward pass. Korthikanti et al. (2022, "Reducing
Activation Recomputation in Large Transformer Models", eq. 1) count them for one layer at 16-bit as
s·b·h·(34 + 5·a·s/h) bytes (s tokens, b sequences, h hidden, a heads): 11sbh + 5as²b in attention,
19sbh in the MLP (intermediate 4h), 4sbh in the two LayerNorms, with 1-byte dropout masks. PyTorch keeps
more than that count, as the tensors saved for backward show (torch.autograd.graph.saved_tensors_hooks on
the bundled model): dropout masks as wide as the values, queries/keys/values in a second (transposed)
layout, and the attention probabilities three times (softmax output, dropout mask, dropout output), in
fp32 even under CPU bf16 autocast, which runs scaled_dot_product_attention in fp32 (its math kernel, as
dropout is on). So `step_bytes` counts per layer (11sbh + 2sbI) values of the activation width (I the
intermediate size, so an MLP that is not 4h is counted right) plus 3as²b fp32 values. The as²b term is
what makes a long string expensive: it grows with the square of the padded length.

A training step peaks in the backward pass, while the gradients of the layer in flight exist next to the
activations still kept: we count one layer more than the model has, plus the embeddings and the (b, 1, s, s)
attention mask the model expands, times TRAIN_SLACK. Inference keeps nothing across layers: its peak is one
layer's working set, (12sbh + 2sbI) values, plus the mask and the output rows; the fused SDPA kernels that
`load_encoder` asks for keep no s x s scores there (measured: only the mask grows with s²), eager attention
keeps scores and softmax (`fused_attention=False`).

Other BERT-family shapes (`Geometry`, read from the model by `model_geometry`): I is the widest activation of a
layer's MLP, twice the intermediate size for a gated one (ModernBERT's GLU keeps its 2I-wide projection, the
activation and their product: 4I values where BERT keeps 2I); the architectures without fused attention in
transformers (MPNet, DeBERTa) run eager attention, which in training keeps about the same 3 fp32 copies of the
scores (autograd's saved tensors: 3.0 a layer for BERT eager and MPNet, 0.8 for DeBERTa-v2) and in inference the
scores and softmax; DeBERTa's disentangled attention adds content-to-position and position-to-content scores of
width 2k (k its relative span, 256 for DeBERTa-v3): counted as 4 fp32 copies of (b, a, s, 2k) in training (3.25
measured) and 3 in inference. bench/bench_arch_memory.py measures each architecture against this count.

Calibration: the peak RSS increase (VmHWM after resetting it once the model is loaded) of one mirror_tune
step (batch = the strings, 2 views each) or one Encoder.encode call of the bundled all-MiniLM-L6-v2
(6 layers, h 384, 12 heads, I 1536) on 2 CPU threads (AMD EPYC with AVX512-BF16), a fresh process per row,
against `static_bytes + step_bytes` (training) and `step_bytes` (encode). MB = 2^20 bytes:

    training step       fp32: measured  estimate  ratio    bf16 autocast: measured  estimate  ratio
      2 strings x   8         367 MB    394 MB  1.07x                   378 MB    435 MB  1.15x
     16 strings x 128        1564 MB   1980 MB  1.27x                  1199 MB   1776 MB  1.48x
      8 strings x 256        1906 MB   2587 MB  1.36x                  1607 MB   2383 MB  1.48x
     64 strings x  32        1134 MB   1524 MB  1.34x                   847 MB   1321 MB  1.56x
     32 strings x 128        2868 MB   3573 MB  1.25x                  2215 MB   3123 MB  1.41x
     16 strings x 256        3708 MB   4788 MB  1.29x                  3229 MB   4338 MB  1.34x
      4 strings x 512        2866 MB   3801 MB  1.33x                  2553 MB   3598 MB  1.41x
      8 strings x 512        5532 MB   7217 MB  1.30x                  4789 MB   6766 MB  1.41x

    encode (fp32)       measured  estimate  ratio
      2 strings x   8      52 MB     65 MB  1.24x
    128 strings x  64     289 MB    330 MB  1.14x
    512 strings x  32     432 MB    594 MB  1.38x
    128 strings x 128     490 MB    600 MB  1.23x
    128 strings x 256     596 MB   1152 MB  1.93x
     32 strings x 512     491 MB    624 MB  1.27x
      8 strings x 512     133 MB    204 MB  1.54x
    128 strings x 512    1139 MB   2304 MB  2.02x

The estimate is an upper bound in every row, 1.07-1.56x above the measurement in training and 1.14-2.02x
in encode (a row repeated varies by up to ~10%). Under bf16 the activations are counted at 3 bytes a value
(`activation_bytes`), as autocast keeps LayerNorm, softmax and the residual stream in fp32. Not calibrated on
a GPU: there the fused attention kernels keep no scores even in training, so the estimate is conservative.
"""

from __future__ import annotations

import math
import os
from typing import Any, NamedTuple

import torch

# Share of the free memory a run may plan to use: the CPU figure leaves room for the rest of the process
# (the web app, other sessions, the allocator's slack); a GPU's free memory is the GPU's alone.
CPU_FRACTION = 0.5
GPU_FRACTION = 0.8
# The plain count is only ~5% above the largest measured peaks (32 strings x 128, fp32): the backward's
# transient buffers and the allocator's slack vary with shapes and threads, so training gets this margin.
TRAIN_SLACK = 1.2
# The default plan of a server's training step (host_train_budget): this share of the machine's (container's)
# memory left after the loaded models and the process itself; the estimate is an upper bound (1.1-1.6x the
# measured peak), so a run planned at half stays well inside what is left.
HOST_FRACTION = 0.5
PROCESS_BYTES = 1536 * 1024**2  # a web process: Python, torch, Gradio, the bundled base model, FAISS, UMAP
DEFAULT_TRAIN_CAP = 8 * 1024**3
FIRST_STEP_BYTES = 128 * 1024**2  # a 2-string, 8-token step of the bundled model adds 110 MB beyond its states
FIRST_CALL_BYTES = 64 * 1024**2  # thread pools and kernel scratch of an inference call (2 x 8 tokens peak at 52 MB)


# fp32 copies of the attention scores one layer keeps: in training (autograd's saved tensors: softmax output, dropout
# mask and output), in inference with eager attention (scores, masked scores and softmax alive at once: 2.6 copies
# measured on MPNet, whose relative position bias lives through the whole forward); DeBERTa's relative scores.
TRAIN_SCORE_COPIES = 3
EAGER_SCORE_COPIES = 3
TRAIN_RELATIVE_COPIES = 4
INFER_RELATIVE_COPIES = 3


class Geometry(NamedTuple):
    """What the activation estimate needs from an encoder: its shape and how its attention runs."""

    layers: int
    hidden: int
    heads: int
    intermediate: int  # the widest activation of a layer's MLP (2x intermediate_size for a gated one)
    fused: bool = True  # fused attention (SDPA): no s x s scores kept in inference
    relative: int = 0  # width of relative-position scores per query (DeBERTa: 2 x its span), 0: none


def model_geometry(model: Any) -> Geometry:
    """The Geometry of a Hugging Face encoder (BERT, RoBERTa, DistilBERT, MPNet, DeBERTa, ModernBERT...): its
    config's shape, the widest Linear output of its layers, its attention implementation."""
    while not hasattr(model, "config") and hasattr(model, "module"):  # wrapped by DistributedDataParallel
        model = model.module
    cfg = model.config

    def first(*keys: str, default: int | None = None) -> int:
        for key in keys:
            value = getattr(cfg, key, None)
            if isinstance(value, int) and value > 0:
                return value
        if default is None:
            raise ValueError(f"model config has none of {keys}")
        return default

    hidden = first("hidden_size", "dim", "d_model")
    intermediate = first("intermediate_size", "hidden_dim", "ffn_dim", default=4 * hidden)
    # a gated MLP projects to 2 x intermediate (ModernBERT's Wi): the widest Linear says so; an attention block's fused
    # qkv projection (3h) is narrower than any MLP here, and the vocabulary has no Linear in a bare encoder
    widest = max((m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear)), default=0)
    return Geometry(
        layers=first("num_hidden_layers", "n_layers", "num_layers"),
        hidden=hidden,
        heads=first("num_attention_heads", "n_heads", "num_heads"),
        intermediate=max(intermediate, widest if widest <= 4 * intermediate else intermediate),
        fused=getattr(cfg, "_attn_implementation", None) in ("sdpa", "flash_attention_2", "flex_attention"),
        relative=relative_width(cfg),
    )


def relative_width(cfg: Any) -> int:
    """Per query, how many relative-position scores each of DeBERTa's two extra attention terms (content-to-position,
    position-to-content) computes: 2k for a relative span k (position buckets, else max_relative_positions, else the
    positions); 0 for a model without them."""
    if not getattr(cfg, "relative_attention", False):
        return 0
    if not set(getattr(cfg, "pos_att_type", None) or ()) & {"c2p", "p2c"}:
        return 0
    buckets = getattr(cfg, "position_buckets", -1) or -1
    span = buckets if buckets > 0 else getattr(cfg, "max_relative_positions", -1) or -1
    if span < 1:
        span = getattr(cfg, "max_position_embeddings", 512) or 512
    return 2 * int(span)


def step_bytes(
    n_seqs: int,
    seq_len: int,
    geometry: Geometry,
    dtype_bytes: int = 4,
    training: bool = True,
    fused_attention: bool | None = None,
) -> int:
    """Estimated peak activation bytes of one forward (+ backward when `training`) pass over `n_seqs`
    sequences padded to `seq_len` tokens; `dtype_bytes` from `activation_bytes`. An upper bound on the
    CPU measurements in this module's docstring.

    `fused_attention` (default: the geometry's; SDPA, which `load_encoder` takes where the architecture has it)
    matters in inference only: its fused kernels keep no s x s scores there, while eager attention materialises
    scores and softmax in every layer.
    """
    b, s = n_seqs, seq_len
    layers, h, a, inter = geometry.layers, geometry.hidden, geometry.heads, geometry.intermediate
    fused = geometry.fused if fused_attention is None else fused_attention
    sbh, sbi, scores = s * b * h, s * b * inter, a * s * s * b
    relative = a * s * b * geometry.relative  # DeBERTa's content-to-position and position-to-content scores
    mask = 4 * b * s * s  # the (b, 1, s, s) attention mask the model expands from the padding mask
    if training:
        # Attention probabilities are kept three times (softmax output, dropout mask, dropout output) in fp32:
        # CPU autocast runs scaled_dot_product_attention in fp32, and with dropout it runs the math kernel.
        per_layer = dtype_bytes * (11 * sbh + 2 * sbi) + 4 * (
            TRAIN_SCORE_COPIES * scores + TRAIN_RELATIVE_COPIES * relative
        )
        embeddings = 4 * dtype_bytes * sbh
        return int(TRAIN_SLACK * ((layers + 1) * per_layer + embeddings + mask))
    # One layer at a time: queries, keys, values, context, residuals and the MLP's wide activations.
    per_layer = dtype_bytes * (12 * sbh + 2 * sbi) + 4 * (
        (0 if fused else EAGER_SCORE_COPIES * scores) + INFER_RELATIVE_COPIES * relative
    )
    return per_layer + 2 * dtype_bytes * sbh + mask + FIRST_CALL_BYTES


def activation_bytes(amp_dtype: torch.dtype | None) -> int:
    """Bytes per activation value: 4 in fp32; 3 under bf16/fp16 autocast, which keeps LayerNorm, softmax
    and the residual stream in fp32 (the stored activations measured 0.68x of fp32's, not 0.5x)."""
    return 4 if amp_dtype is None else 3


def static_bytes(model: Any, mixed_precision: bool = False, world_size: int = 1) -> int:
    """Bytes a training run adds before its first activation: a gradient and AdamW's two moments per
    trainable fp32 parameter, autocast's 16-bit weight copies, DDP's gradient buckets, and the fixed
    cost of a first step (autograd engine, thread pools, allocator arenas)."""
    n = sum(p.numel() for p in model.parameters() if p.requires_grad)
    per_param = 4 + 8 + (2 if mixed_precision else 0) + (4 if world_size > 1 else 0)
    return n * per_param + FIRST_STEP_BYTES


def kept_for_backward(model: Any, batch: dict[str, torch.Tensor]) -> int:
    """Bytes of the tensors one training forward of `model` over `batch` saves for its backward pass (each storage
    once, the weights excluded): what a step's activations hold, measured (bench/bench_arch_memory.py, the tests)."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = max(seen.get(storage.data_ptr(), 0), storage.nbytes())
        return t

    was_training = model.training
    model.train()
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(**batch)
    finally:
        model.train(was_training)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(size for ptr, size in seen.items() if ptr not in weights)


def inference_peak(model: Any, batch: dict[str, torch.Tensor]) -> int:
    """The CPU allocation peak of one inference forward of `model` over `batch`, above what was allocated before it
    (the PyTorch profiler's memory events): an inference batch's working set, measured."""
    import json
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            model(**batch)
    finally:
        model.train(was_training)
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(trace)
        with open(trace) as f:
            events = [e["args"] for e in json.load(f)["traceEvents"] if e.get("name") == "[memory]"]
    if not events:
        return 0
    before = events[0]["Total Allocated"] - events[0]["Bytes"]
    return max(e["Total Allocated"] for e in events) - before


def available_bytes(device: str | torch.device = "cpu") -> int:
    """Memory a run may plan to use now: the GPU's free memory x GPU_FRACTION, or on a CPU the smaller of
    MemAvailable and what the cgroup (container) limit leaves, x CPU_FRACTION."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * GPU_FRACTION)
    candidates = [v for v in (_meminfo_available(), _cgroup_available()) if v is not None]
    if not candidates:
        try:
            candidates = [os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")]
        except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
            candidates = [8 * 1024**3]
    return int(min(candidates) * CPU_FRACTION)


def total_bytes() -> int:
    """The machine's memory, or the container's (cgroup v2/v1 limit) when that is smaller."""
    candidates = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    candidates.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit_file) as f:
                raw = f.read().strip()
            if raw != "max" and int(raw) < 1 << 60:
                candidates.append(int(raw))
        except (OSError, ValueError):
            continue
    if not candidates:
        try:
            candidates = [os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")]
        except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
            candidates = [16 * 1024**3]
    return min(candidates)


def host_train_budget(reserved: int, total: int | None = None, cap: int = DEFAULT_TRAIN_CAP) -> int:
    """What a server's training step may plan for by default: HOST_FRACTION of the machine's (container's) memory
    (`total`, read when None) after `reserved` bytes (the models it keeps loaded) and PROCESS_BYTES, at most `cap`,
    at least 256 MB (a run that cannot fit that is refused). A 16 GB CPU Space keeping 3 GB of models: 5.75 GB."""
    total = total_bytes() if total is None else total
    return int(max(256 * 1024**2, min(cap, (total - reserved - PROCESS_BYTES) * HOST_FRACTION)))


def fmt_gb(n: float) -> str:
    """Bytes as a short size for messages: '2.1 GB', '350 MB'."""
    if n >= 1024**3:
        return f"{n / 1024**3:.1f} GB"
    return f"{max(1, math.ceil(n / 1024**2))} MB"


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_available() -> int | None:
    """What a cgroup v2 (or v1) memory limit leaves: /proc/meminfo shows the host, not the container."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            with open(limit_file) as f:
                raw = f.read().strip()
            if raw == "max" or int(raw) >= 1 << 60:
                return None
            with open(usage_file) as f:
                return max(0, int(raw) - int(f.read().strip()))
        except (OSError, ValueError):
            continue
    return None
