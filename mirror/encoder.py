"""Encoders: a model, its tokenizer and its pooling (`Encoder`: embed batches for training and search), loaded from the
bundled model, a hub id or a local folder (`load_encoder`), saved as sentence-transformers (`save_encoder`).

A tuned model is a sentence-transformers folder (modules.json + 1_Pooling/config.json), so `SentenceTransformer(path)`
loads it with the pooling it was trained with, plus `mirror_config.json` with the run's config and stats. Where a
model's files come from: mirror.hub; building the transformers model: mirror.hf; the device, the precision and the
bf16 inference copy: mirror.precision; output folders: mirror.folders.
"""

from __future__ import annotations

import hashlib
import json
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

from mirror import hooks, memory
from mirror.config import BUNDLED_MODEL, MIRROR_CONFIG_FILE, MODEL_FOLDER
from mirror.data import SURROGATE
from mirror.errors import MirrorError
from mirror.folders import check_out_dir, replace_dir
from mirror.hf import (
    DROPOUT_KEYS,
    attention_note,
    attention_of,
    check_weights,
    fastest_attention,
    load_hf,
    model_max_length,
    pooling_from_config,
    read_json,
)
from mirror.hub import bundled_model_path, hub_download_bytes, resolve_folder
from mirror.names import is_under, shown_model
from mirror.precision import (
    autocast,
    bf16_nbytes,
    bf16_twin,
    cpu_has_native_bf16,
    resolve_device,
    resolve_precision,
    same_sample,
    weights_sample,
)

# the engine's loading, precision and folder helpers, importable from here as before
__all__ = [
    "DROPOUT_KEYS",
    "Encoder",
    "attention_note",
    "autocast",
    "bundled_model_path",
    "check_weights",
    "cpu_has_native_bf16",
    "encode_batches",
    "fastest_attention",
    "hub_download_bytes",
    "load_encoder",
    "load_sentence_transformer",
    "model_inputs",
    "pooled",
    "replace_dir",
    "resolve_device",
    "resolve_precision",
    "save_encoder",
    "tokenized",
    "write_st_files",
]

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
    """`tokenizer(texts, **kwargs)` holding TOKENIZER_LOCK; not verbose: a count of a string's tokens past the model's
    length (token_lengths, the general checks' lengths) is what it asks for, not the "will result in indexing errors"
    warning transformers logs for it (a server's log said so at every start)."""
    kwargs.setdefault("verbose", False)
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
_TWIN_LOCK = threading.Lock()  # searches from several threads build an encoder's bf16 twin once


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
        if mark is not None and (mark[0] != self.generation or not same_sample(mark[1], self.model)):
            return None
        return self.source

    def mark_source(self, source: str) -> None:
        """Record that the current weights are the model at `source` (just loaded from, or saved to, it)."""
        self.source = source
        self._source_mark = (self.generation, weights_sample(self.model))

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
        return model_max_length(model, self.tokenizer)

    def tokenize(self, texts: Sequence[str], max_length: int | None = None) -> dict[str, torch.Tensor]:
        """Tokenize with padding to the longest string of this batch (never to max length).

        `max_length` (default: the inference length) is capped at what the model's positions take, so a
        long string is truncated, never an index error; strings are cut before tokenizing (CHARS_PER_TOKEN).
        """
        limit = min(max_length or self.max_seq_length, self.token_limit)
        return self._tokenized(texts, limit, padding=True, return_tensors="pt")

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
        depend on its batch (up to float rounding). `precision` (resolve_precision): "auto" is bf16 autocast on
        CUDA and on CPUs with native bf16 where this machine measured it faster for the model, fp32 elsewhere.
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
            with autocast(device, precision, self.model, "encode"):
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
                        hooks.pause()  # a run's index build may yield to interactive work (mirror.hooks)
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
        return self._tokenized(texts, limit, return_attention_mask=False, return_token_type_ids=False)["input_ids"]

    def _tokenized(self, texts: Sequence[str], limit: int, **kwargs: Any) -> Any:
        """The tokenizer's output for `texts`, each cut (CHARS_PER_TOKEN) and truncated to `limit` tokens."""
        return tokenized(self.tokenizer, _cut(texts, limit), truncation=True, max_length=limit, **kwargs)

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
            if twin is None or twin[0][:2] != key or not same_sample(twin[0][2], model):
                twin = self._twin = ((*key, weights_sample(model)), bf16_twin(model))
        return twin[1]

    @property
    def twin_nbytes(self) -> int:
        """Memory held by the bf16 inference copy of the Linear weights (0 until a CPU bf16 encode built it)."""
        twin = self._twin
        return 0 if twin is None else bf16_nbytes(twin[1])

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


def _rows_that_fit(model: Any, device: torch.device, precision: str, budget: int | None) -> Callable[[int, int], int]:
    """`fits(n, length)`: how many of n rows padded to `length` one inference batch may take within `budget`
    bytes (default: what the machine has available); at least one, which must be embedded whatever it costs."""
    budget = memory.available_bytes(device) if budget is None else budget
    geometry = memory.model_geometry(model)
    dtype_bytes = memory.activation_bytes(resolve_precision(device, precision, model, "encode"))

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
    folder = resolve_folder(source, allowed_roots, shown, max_weights, cache_dir)
    transformer_dir, st_pooling, st_max_len = folder, None, None
    for module in _st_modules(folder, shown):
        mtype, mpath = str(module.get("type", "")), module.get("path", "")
        if mtype.endswith("Transformer"):
            transformer_dir = folder / mpath
            st_max_len = (read_json(transformer_dir / "sentence_bert_config.json") or {}).get("max_seq_length")
            if st_max_len is None:
                st_max_len = (read_json(folder / "sentence_bert_config.json") or {}).get("max_seq_length")
        elif mtype.endswith("Pooling"):
            st_pooling = pooling_from_config(read_json(folder / mpath / "config.json") or {})
    if pooling == "auto":
        pooling = st_pooling if st_pooling in ("cls", "mean") else ("mean" if st_pooling else "cls")
    if pooling not in ("cls", "mean"):
        raise MirrorError(f"pooling must be 'auto', 'cls' or 'mean', got {pooling!r}")
    check_weights(transformer_dir, shown, max_weights)
    model, tokenizer = load_hf(transformer_dir, shown, dropout)
    max_len = int(st_max_len or model_max_length(model, tokenizer))
    info = read_json(folder / MIRROR_CONFIG_FILE) or {}
    encoder = Encoder(
        model=model, tokenizer=tokenizer, pooling=pooling, max_seq_length=max_len, source=source, info=info
    ).to(resolve_device(device))
    encoder.mark_source(source)
    return encoder


def _st_modules(folder: Path, shown: str) -> list[dict[str, Any]]:
    """The entries of a sentence-transformers folder's modules.json ([] without one), every module path checked
    to stay inside the folder: an uploaded model must not name another folder on the machine (an absolute path,
    `..`, a symlink out) and have it loaded in its place."""
    modules = read_json(folder / "modules.json")
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


def load_sentence_transformer(path: str | Path, device: str = "cpu"):
    """Load a saved folder with sentence-transformers itself (for interop checks and peer benchmarks)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path), device=device, trust_remote_code=False)
