"""Two gloo CPU processes on a global batch match one process on the same batch (loss and update)."""

from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mirror import MirrorConfig
from mirror.distributed import shard_bounds, shutdown
from mirror.encoder import load_encoder
from mirror.train import mirror_tune
from tests.conftest import SENTENCES

STRINGS = [*SENTENCES[:6], "cat"]  # 7 strings: shards of 4 and 3, and the masked views differ in length


def config(model: str) -> MirrorConfig:
    # dropout 0: the two runs must see identical forward passes; fp32 for exact comparison
    return MirrorConfig.preset(
        "sentences",
        model=model,
        dropout=0.0,
        precision="fp32",
        lr=0.5,
        batch_size=7,
        epochs=2,
        min_steps=0,  # the two epochs asked for, not the preset's minimum for small uploads
        device="cpu",
        pooling="mean",
        grad_clip=0,
    )


def plain_sgd(params, lr, **_):
    """Adam hides a wrongly scaled gradient (its update is scale-free); plain SGD shows it."""
    return torch.optim.SGD(params, lr=lr)


def _worker(rank: int, world: int, store: str, model: str, out: str) -> None:
    torch.set_num_threads(1)
    torch.optim.AdamW = plain_sgd
    # Rendezvous through a file, not a port picked by one process and bound later by another: under load (other
    # servers and tests starting) a freed port can be taken in between, or another run's rank can connect to ours.
    timeout = datetime.timedelta(seconds=300)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=timeout)
    result = mirror_tune(STRINGS, config(model))
    if rank == 0:
        torch.save({"losses": result.losses, "state": result.encoder.model.state_dict()}, out)
    del result
    # On success only: after an exception the other rank may sit in a collective, and destroying the group then
    # can hang; mp.spawn stops it and reports the error instead.
    shutdown()


def test_shard_bounds_cover_the_batch():
    for n in range(2, 12):
        for w in range(1, 4):
            spans = [shard_bounds(n, w, r) for r in range(w)]
            assert spans[0][0] == 0 and spans[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
            assert max(hi - lo for lo, hi in spans) - min(hi - lo for lo, hi in spans) <= 1


def test_two_gloo_processes_match_one_process(tiny_bert, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.optim, "AdamW", plain_sgd)
    out = tmp_path / "ddp.pt"
    store = tmp_path / "rendezvous"
    mp.spawn(_worker, args=(2, str(store), str(tiny_bert), str(out)), nprocs=2, join=True)
    ddp = torch.load(out)
    single = mirror_tune(STRINGS, config(str(tiny_bert)))
    assert len(ddp["losses"]) == len(single.losses) == 2
    assert ddp["losses"] == pytest.approx(single.losses, rel=1e-5, abs=1e-6)
    base = load_encoder(tiny_bert).model.state_dict()
    moved = 0
    for name, tensor in single.encoder.model.state_dict().items():
        torch.testing.assert_close(ddp["state"][name], tensor, rtol=1e-4, atol=1e-6)
        moved += not torch.equal(tensor, base[name])
    assert moved > 10  # the comparison is of real updates, not of untouched weights
