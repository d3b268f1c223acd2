"""Data-parallel training under torchrun: shard each global batch, gather embeddings with gradients.

Every rank draws the same global batch (same seed), embeds its contiguous shard, and all-gathers the
embeddings *with* gradients, so the loss sees all 2B views of the global batch exactly as one process
would. Each rank then holds the same loss; the gather's backward sums the gradient contributions of
all ranks (world x the true gradient on the local shard) and DDP's averaging divides by world again,
so the update equals the single-process update on the global batch.
"""

from __future__ import annotations

import gc
import os

import torch
import torch.distributed as dist


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init_from_env() -> tuple[int, int]:
    """Join the process group torchrun describes (WORLD_SIZE > 1), else do nothing.

    NCCL with one GPU per local rank where CUDA is available, gloo on CPUs.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or (dist.is_available() and dist.is_initialized()):
        return world()
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl")
    else:
        dist.init_process_group("gloo")
    return world()


def shutdown() -> None:
    """Leave the process group cleanly (every rank calls it on the way out, after its last collective).

    Garbage first: a DistributedDataParallel wrapper lives in a reference cycle, and its reducer holds the group and
    its finished work; left to the interpreter's exit, it is freed after the group is destroyed and gloo's threads are
    gone, and the process aborts ("terminate called without an active exception"). Then a barrier, so no rank
    tears its connections down while another is still in a collective or writing its results; then destroy."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def shard_bounds(n: int, world_size: int, rank: int) -> tuple[int, int]:
    """Contiguous [lo, hi) of n items for `rank`; sizes differ by at most one."""
    base, extra = divmod(n, world_size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def gather_with_grad(local: torch.Tensor, n: int) -> torch.Tensor:
    """All ranks' shards of an (n, D) tensor in rank order, differentiable w.r.t. the local shard."""
    rank, size = world()
    if size == 1:
        return local
    biggest = shard_bounds(n, size, 0)[1]  # rank 0 holds a largest shard
    padded = torch.nn.functional.pad(local, (0, 0, 0, biggest - local.shape[0]))
    parts = _AllGather.apply(padded)
    sizes = [hi - lo for lo, hi in (shard_bounds(n, size, r) for r in range(size))]
    return torch.cat([part[:m] for part, m in zip(parts, sizes, strict=False)])


class _AllGather(torch.autograd.Function):
    """all_gather whose backward hands each rank the sum over ranks of the gradient of its shard."""

    @staticmethod
    def forward(ctx, local: torch.Tensor) -> tuple[torch.Tensor, ...]:
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, local.contiguous())
        return tuple(parts)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor) -> torch.Tensor:
        stacked = torch.stack(grads).contiguous()
        dist.all_reduce(stacked)  # gloo has no reduce_scatter; the sum, then our slice
        return stacked[dist.get_rank()]


def any_rank(flag: bool) -> bool:
    """True on every rank if it is true on any rank (so all ranks stop together)."""
    if world()[1] == 1:
        return flag
    t = torch.tensor([1.0 if flag else 0.0])
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)
