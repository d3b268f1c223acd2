"""mirror_tune: the MirrorBERT training loop. It knows nothing of the UI; it reports through callbacks."""

from __future__ import annotations

import math
import platform
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mirror import distributed
from mirror.augment import make_views
from mirror.config import MirrorConfig
from mirror.data import clean_texts
from mirror.encoder import Encoder, autocast, load_encoder, resolve_device, resolve_precision, save_encoder
from mirror.errors import MirrorError
from mirror.loss import nt_xent

LOWER_LR = "lower the learning rate or raise the temperature"
StepFn = Callable[[int, int, float], None]
StopFn = Callable[[], bool]


@dataclass
class MirrorResult:
    """What a run produced: the tuned encoder (in eval mode) and how the run went."""

    encoder: Encoder
    config: MirrorConfig  # as run: pooling resolved to "cls"/"mean"
    losses: list[float]
    steps: int
    total_steps: int
    seconds: float
    device: str
    cancelled: bool
    n_texts: int
    notes: list[str] = field(default_factory=list)

    @property
    def final_loss(self) -> float | None:
        tail = self.losses[-10:]
        return sum(tail) / len(tail) if tail else None

    def stats(self) -> dict[str, Any]:
        return {
            "base_model": self.config.model,
            "strings": self.n_texts,
            "steps": self.steps,
            "total_steps": self.total_steps,
            "seconds": round(self.seconds, 3),
            "device": self.device,
            "cancelled": self.cancelled,
            "first_loss": self.losses[0] if self.losses else None,
            "final_loss": self.final_loss,
            "notes": self.notes,
        }

    def summary(self) -> str:
        status = "cancelled" if self.cancelled else "done"
        loss = f"{self.final_loss:.4f}" if self.final_loss is not None else "n/a"
        return (
            f"{status}: {self.steps}/{self.total_steps} steps on {self.n_texts} strings in {self.seconds:.1f}s "
            f"on {self.device}; final loss {loss}; pooling {self.config.pooling}, mode {self.config.mode}"
        )


BUCKET_CHUNK = 32  # batches per length-sorting chunk


def plan_batches(
    n: int, batch_size: int, rng: random.Random, min_size: int = 2, lengths: Sequence[int] | None = None
) -> list[list[int]]:
    """Shuffled batches covering all n strings once; never drops a partial batch.

    A final batch smaller than `min_size` (one string has no negatives; under torchrun each rank
    needs a string) joins the previous batch. With `lengths`, strings are sorted by length within
    random chunks of BUCKET_CHUNK batches and the batches are then shuffled: little padding, random order.
    """
    order = list(range(n))
    rng.shuffle(order)
    if lengths is not None:
        chunk = batch_size * BUCKET_CHUNK
        order = [i for c in range(0, n, chunk) for i in sorted(order[c : c + chunk], key=lambda j: lengths[j])]
    batches = [order[i : i + batch_size] for i in range(0, n, batch_size)]
    if len(batches) > 1 and len(batches[-1]) < min_size:
        batches[-2].extend(batches.pop())
    if lengths is not None:
        rng.shuffle(batches)
    return batches


def steps_per_epoch(n: int, batch_size: int, min_size: int = 2) -> int:
    full = math.ceil(n / batch_size)
    return full - 1 if full > 1 and 0 < n % batch_size < min_size else full


def mirror_tune(
    texts: Sequence[str],
    config: MirrorConfig | None = None,
    on_step: StepFn | None = None,
    should_stop: StopFn | None = None,
    encoder: Encoder | None = None,
) -> MirrorResult:
    """Mirror-fine-tune an encoder on `texts` (cleaned and de-duplicated here too).

    `on_step(step, total, loss)` is called after every optimiser step; `should_stop()` is polled
    between steps and ends the run cleanly (result.cancelled). `encoder` skips loading `config.model`.
    """
    config = (config or MirrorConfig.preset("words")).validated()
    texts, _ = clean_texts(texts)
    if len(texts) < 2:
        raise MirrorError(f"need at least 2 distinct non-empty strings to tune (got {len(texts)})")
    device = resolve_device(config.device)
    rng = random.Random(config.seed)
    torch.manual_seed(config.seed)
    if encoder is None:
        encoder = load_encoder(config.model, pooling=config.pooling, device=str(device), dropout=config.dropout)
    else:
        encoder.to(device)
        _set_dropout(encoder.model, config.dropout)
    config = MirrorConfig.from_dict({**config.to_dict(), "pooling": encoder.pooling})
    rank, world_size = distributed.world()
    min_batch = max(2, world_size)
    if len(texts) < min_batch:
        raise MirrorError(f"need at least {min_batch} distinct strings for {world_size} processes (got {len(texts)})")

    model = _wrap_for_training(encoder, config, device, world_size)
    optimizer = torch.optim.AdamW(_param_groups(model, config.weight_decay), lr=config.lr, fused=True)
    amp_dtype = resolve_precision(device, config.precision)
    # fp16 needs loss scaling; bf16 has fp32's range and does not.
    scaler = torch.amp.GradScaler(device.type) if amp_dtype == torch.float16 else None
    total = config.epochs * steps_per_epoch(len(texts), config.batch_size, min_batch)
    if config.max_steps:
        total = min(total, config.max_steps)
    losses: list[float] = []
    pending: list[torch.Tensor] = []  # losses still on the device: read back in one sync every log_every steps
    sync_every = 1 if device.type == "cpu" else config.log_every
    lengths = encoder.token_lengths(texts) if config.bucket_by_length else None
    step, cancelled = 0, False
    batch_size, notes = config.batch_size, []

    def read_back() -> None:
        first = step - len(pending) + 1
        values = torch.stack(pending).tolist() if pending else []
        pending.clear()
        for offset, (value, grad_norm) in enumerate(values):
            if not math.isfinite(value):
                raise MirrorError(f"the loss became {value}: {LOWER_LR}")
            if not math.isfinite(grad_norm):  # the step wrote it into the weights: the next loss would be nan
                raise MirrorError(
                    f"the loss became nan: the gradient norm was {grad_norm} at step {first + offset}; {LOWER_LR}"
                )
            losses.append(value)
            if on_step is not None:
                on_step(first + offset, total, value)

    started = time.perf_counter()
    model.train()  # dropout on in both forward passes: the "feature" augmentation
    try:
        for epoch in range(config.epochs):
            queue = plan_batches(len(texts), batch_size, rng, min_batch, lengths)
            while queue and step < total:
                if distributed.any_rank(should_stop is not None and should_stop()):
                    cancelled = True
                    break
                batch_ids = queue.pop(0)
                try:
                    pending.append(
                        _train_step(encoder, optimizer, scaler, [texts[i] for i in batch_ids], config, rng, device)
                    )
                except torch.OutOfMemoryError:
                    if world_size > 1:
                        raise MirrorError(
                            f"out of memory at global batch {batch_size}: rerun with a smaller --batch-size"
                        ) from None
                    # Free what the failed step held and go on with half the batch: fewer negatives
                    # per step, but the run finishes, and the result says so.
                    optimizer.zero_grad(set_to_none=True)
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                    batch_size, queue = _halve_batches([batch_ids, *queue], batch_size, min_batch)
                    remaining = len(queue) + (config.epochs - epoch - 1) * steps_per_epoch(
                        len(texts), batch_size, min_batch
                    )
                    total = min(step + remaining, config.max_steps or step + remaining)
                    notes.append(f"out of memory at step {step + 1}: continued with batch size {batch_size}")
                    continue
                step += 1
                if len(pending) >= sync_every:
                    read_back()
            if cancelled or step >= total:
                break
        read_back()
    finally:
        encoder.model = model  # unwrap DDP
        model.eval()
        optimizer.zero_grad(set_to_none=True)
    if step:
        _check_finite(encoder, step)
    return MirrorResult(
        encoder=encoder,
        config=config,
        losses=losses,
        steps=step,
        total_steps=total,
        seconds=time.perf_counter() - started,
        device=_device_name(device) + ", " + {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[amp_dtype],
        cancelled=cancelled,
        n_texts=len(texts),
        notes=notes,
    )


def _train_step(
    encoder: Encoder,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    strings: list[str],
    config: MirrorConfig,
    rng: random.Random,
    device: torch.device,
) -> torch.Tensor:
    """One optimiser step; returns [loss, gradient norm] on the device (norm 0 when not clipping or with fp16)."""
    view1, view2 = make_views(strings, encoder.mask_token, config.mask_span, rng, config.mask_min_chars)
    n = len(strings)
    rank, world_size = distributed.world()
    lo, hi = distributed.shard_bounds(n, world_size, rank)  # the whole batch in a single process
    local = view1[lo:hi] + view2[lo:hi]
    batch = encoder.tokenize(local, config.max_length)
    if device.type == "cuda":  # pinned host memory makes the copy truly asynchronous
        batch = {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}
    with autocast(device, config.precision):
        emb = encoder.embed(batch)
    b = hi - lo
    z1 = distributed.gather_with_grad(emb[:b], n)
    z2 = distributed.gather_with_grad(emb[b:], n)
    loss = nt_xent(z1, z2, config.temperature)  # fp32 inside, whatever the autocast
    optimizer.zero_grad(set_to_none=True)
    grad_norm = torch.zeros((), device=loss.device)
    if scaler is None:
        loss.backward()
        if config.grad_clip > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(encoder.model.parameters(), config.grad_clip)
        optimizer.step()
    else:  # fp16: the scaler skips a step whose gradients overflowed and lowers its scale, so no norm is checked
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        if config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(encoder.model.parameters(), config.grad_clip)
        scaler.step(optimizer)
        scaler.update()
    return torch.stack([loss.detach().float(), grad_norm.detach().float()])  # read back later: no host sync here


def _wrap_for_training(encoder: Encoder, config: MirrorConfig, device: torch.device, world_size: int) -> Any:
    """Freeze the unused pooler head, compile and wrap for DDP as asked; returns the bare model (for the optimiser
    and to unwrap into after the run)."""
    model = encoder.model
    for name, param in model.named_parameters():
        if name.startswith("pooler."):  # BERT's pooler head is not used by [CLS]/mean pooling
            param.requires_grad_(False)
    if config.compile:
        encoder.model = torch.compile(encoder.model, dynamic=True)
    if world_size > 1:
        from torch.nn.parallel import DistributedDataParallel

        encoder.model = DistributedDataParallel(
            encoder.model, device_ids=[device.index] if device.type == "cuda" else None
        )
    return model


def _halve_batches(batches: list[list[int]], batch_size: int, min_batch: int) -> tuple[int, list[list[int]]]:
    """After an out-of-memory step: the strings of `batches` re-planned at half the batch size, in order."""
    if batch_size // 2 < min_batch:
        raise MirrorError(f"out of memory even at batch size {batch_size}: use a smaller model or max length")
    batch_size //= 2
    rest = [i for ids in batches for i in ids]
    queue = [rest[i : i + batch_size] for i in range(0, len(rest), batch_size)]
    if len(queue) > 1 and len(queue[-1]) < min_batch:
        queue[-2].extend(queue.pop())
    return batch_size, queue


def _check_finite(encoder: Encoder, step: int) -> None:
    """Refuse a model whose last step broke it: every loss read back was finite, but the update after the last
    one is only seen here (`--lr inf` once wrote nan into every weight of a 1-step run, and it was saved)."""
    if not torch.stack([torch.isfinite(p).all() for p in encoder.model.parameters()]).all().item():
        raise MirrorError(f"the loss became nan: the weights are no longer finite after step {step}; {LOWER_LR}")


def save_result(result: MirrorResult, out_dir: str | Path) -> Path:
    """Save the tuned encoder as a sentence-transformers folder plus mirror_config.json (atomic)."""
    return save_encoder(
        result.encoder,
        out_dir,
        extra={"config": result.config.to_dict(), "stats": result.stats(), "versions": versions()},
    )


def versions() -> dict[str, str]:
    import transformers

    import mirror

    return {
        "mirror": mirror.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on matrices only: biases and LayerNorm weights are not decayed."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim < 2 or "LayerNorm" in name or "layer_norm" in name else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _set_dropout(model: torch.nn.Module, p: float) -> None:
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = p
    for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
        if hasattr(model.config, key):
            setattr(model.config, key, p)


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({torch.get_num_threads()} threads)"
