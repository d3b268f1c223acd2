"""Encode a corpus on several processes (torchrun), then build the index once from their shard files.

Each rank embeds its contiguous slice of the texts (duplicates dropped first, so ids stay the input order)
on its own device and writes the rows to a .npy shard in a folder next to the output; after a barrier,
rank 0 reads the shards memory-mapped, trains the index on a sample, adds the shards in rank order and
saves the folder atomically (`VectorIndex.save`). Nothing large goes through the process group: only a
folder name, broadcast by rank 0; the ranks then agree through small files in that folder and barriers.

    torchrun --nproc_per_node 4 -m index build --encoder runs/words --input big.txt --out runs/big --type ivfpq

Without a process group, the same two steps run anywhere that shares a filesystem (a job array, say):
`encode_shard(encoder, texts, folder, rank, world_size)` on each worker, then, once all are done,
`build_from_shards(folder, texts, world_size, encoder=...)` on one of them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from index.folder import check_target
from index.inputs import as_encoder, unique_texts
from index.options import BATCH_SIZE, DEFAULT_OPTIONS, IndexOptions, check_positive
from index.rows import Rows
from index.store import ProgressFn, VectorIndex
from mirror.distributed import shard_bounds, world
from mirror.errors import MirrorError

if TYPE_CHECKING:
    from mirror.encoder import Encoder

SHARD_SUFFIX = ".shards-"  # the shard folder: .<out name>.shards-XXXXXXXX next to the output
POLL_SECONDS = 0.2  # how often the other ranks look whether rank 0 has finished


def shard_path(folder: str | Path, rank: int, world_size: int) -> Path:
    return Path(folder) / f"shard-{rank:05d}-of-{world_size:05d}.npy"


def encode_shard(
    encoder: Encoder | str | Path,
    texts: Sequence[str],
    folder: str | Path,
    rank: int,
    world_size: int,
    *,
    batch_size: int = BATCH_SIZE,
    on_progress: ProgressFn | None = None,
    device: str = "auto",
) -> Path:
    """Embed rank `rank`'s contiguous slice of `texts` (of `world_size` slices) into a float32 .npy shard.

    The slice is taken after dropping duplicates, so shard r holds rows shard_bounds(n, world, r) of the
    index. The file appears complete or not at all (written under another name, then renamed).
    """
    if not 0 <= rank < world_size:
        raise MirrorError(f"rank must be in [0, {world_size}), got {rank}")
    check_positive("batch size", batch_size)
    texts = unique_texts(texts)
    lo, hi = shard_bounds(len(texts), world_size, rank)
    enc = as_encoder(encoder, device)
    rows = enc.encode(texts[lo:hi], batch_size=batch_size, normalize=True, on_progress=on_progress)
    path = shard_path(folder, rank, world_size)
    partial = path.with_name(f".{path.stem}.partial.npy")
    try:
        np.save(partial, rows)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return path


def build_from_shards(
    folder: str | Path,
    texts: Sequence[str],
    world_size: int,
    options: IndexOptions = DEFAULT_OPTIONS,
    *,
    encoder: Encoder | None = None,
    gpu: bool | None = None,
) -> VectorIndex:
    """The index of the `world_size` shards `encode_shard` wrote to `folder` for `texts`, rows in rank order.

    Shards are memory-mapped and handed to FAISS a block at a time; an ivfpq index writes its float16
    re-ranking rows into `folder` too (they move into the index folder on `save`).
    """
    texts = unique_texts(texts)
    chunks = []
    for rank in range(world_size):
        lo, hi = shard_bounds(len(texts), world_size, rank)
        path = shard_path(folder, rank, world_size)
        try:
            rows = np.load(path, mmap_mode="r")
        except (OSError, ValueError) as exc:
            raise MirrorError(f"shard {rank} of {world_size} is missing or unreadable ({path}: {exc})") from None
        if rows.ndim != 2 or len(rows) != hi - lo:
            raise MirrorError(
                f"{path}: holds {rows.shape[0] if rows.ndim else 0} rows, expected {hi - lo} (texts {lo}..{hi - 1}); "
                "the shards were made from other texts or another world size"
            )
        chunks.append(rows)
    return VectorIndex.from_rows(Rows(chunks), texts, options, encoder=encoder, gpu=gpu, spill_dir=Path(folder))


def build_index(
    encoder: Encoder | str | Path,
    texts: Sequence[str],
    out: str | Path,
    options: IndexOptions = DEFAULT_OPTIONS,
    *,
    batch_size: int = BATCH_SIZE,
    on_progress: ProgressFn | None = None,
    device: str = "auto",
    gpu: bool | None = None,
) -> VectorIndex | None:
    """Build and save an index of `texts` at `out`, the encoding split over the ranks of the process group.

    Call it on every rank (torchrun). Rank 0 returns the saved index, the others None once it is saved. If any
    rank fails to encode, or rank 0 to build or save, every rank raises and nothing is written: an index
    already at `out` stays as it was, and the shard folder is removed. Outside a process group this is
    `VectorIndex.build(...)` followed by `save(out)`.
    """
    rank, world_size = world()
    target = check_target(out)  # every rank, before encoding
    if world_size == 1:
        index = VectorIndex.build(
            encoder, texts, options, batch_size=batch_size, on_progress=on_progress, device=device, gpu=gpu
        )
        index.save(target)
        return index
    import torch.distributed as dist

    # The ranks agree through files in the shard folder and tensor-free barriers. (A collective on a tensor made in
    # Python, like any_rank's, just before exiting can abort the process: gloo's worker thread may drop the last
    # reference to that tensor while the interpreter shuts down.)
    folder: Path | None = None
    failure: BaseException | None = None
    try:
        folder = _shared_folder(target, rank)  # a collective: every rank gets here
        enc = as_encoder(encoder, rank_device(device))
        encode_shard(enc, texts, folder, rank, world_size, batch_size=batch_size, on_progress=on_progress)
    except Exception as exc:  # written down for the other ranks, raised below
        failure = exc
        if folder is not None:
            _write(folder / f"failed-rank-{rank:05d}.txt", _describe(exc))
    if folder is None:  # every rank failed to get the folder (its name is broadcast), so all stop here
        assert failure is not None
        raise failure
    dist.barrier()  # every shard, or a note of why it is missing, is on disk
    failed = sorted(folder.glob("failed-rank-*.txt"))
    if failed:
        reason = f"{failed[0].stem[len('failed-') :]}: {failed[0].read_text(encoding='utf-8')}"
        dist.barrier()  # every rank has looked before rank 0 removes the folder
        if rank == 0:
            shutil.rmtree(folder, ignore_errors=True)
        if failure is not None:
            raise failure
        raise MirrorError(f"encoding failed on {reason}; nothing was saved")
    verdict_file = folder / "verdict.txt"
    if rank != 0:
        # Wait for rank 0 without a collective (its build may outlast the process group's timeout): it writes its
        # verdict once the index is saved or its build failed, so every rank exits with the job's status.
        while not verdict_file.exists():
            time.sleep(POLL_SECONDS)
        verdict = verdict_file.read_text(encoding="utf-8")
        dist.barrier()  # read: rank 0 may remove the folder
        if verdict != "ok":
            raise MirrorError(f"rank 0 failed to build or save the index ({verdict}); nothing was saved")
        return None
    try:
        index = build_from_shards(folder, texts, world_size, options, encoder=enc, gpu=gpu)
        index.save(target)
    except Exception as exc:
        failure = exc
    try:
        _write(verdict_file, "ok" if failure is None else _describe(failure))
        dist.barrier()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if failure is not None:
        raise failure
    return index


def _describe(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, MirrorError) else f"{type(exc).__name__}: {exc}"


def _write(path: Path, text: str) -> None:
    """Write a small file that readers see whole or not at all."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def rank_device(device: str) -> str:
    """The encoder device of this rank: under torchrun with GPUs, "auto"/"cuda" mean this rank's own GPU."""
    import torch

    if device in ("auto", "cuda") and world()[1] > 1 and torch.cuda.is_available():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', torch.cuda.current_device()))}"
    return device


def _shared_folder(target: Path, rank: int) -> Path:
    """A fresh folder next to `target`, made by rank 0 and named to every rank (it must be on a shared disk)."""
    import torch.distributed as dist

    made: list[Any] = [None]
    if rank == 0:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            made[0] = tempfile.mkdtemp(prefix=f".{target.name}{SHARD_SUFFIX}", dir=target.parent)
        except OSError as exc:
            made[0] = exc
    dist.broadcast_object_list(made, src=0)
    if not isinstance(made[0], str):
        raise MirrorError(f"could not make a shard folder next to {target}: {made[0]}")
    folder = Path(made[0])
    if not folder.is_dir():
        raise MirrorError(
            f"the shard folder {folder} (made by rank 0) is not visible from rank {rank}: --out must be on a "
            "filesystem every node shares"
        )
    return folder
