"""Index scale-out: encoding split over ranks (two gloo processes), IVF-PQ with exact re-ranking, multi-GPU sharding.

faiss sees no GPU here: the multi-GPU choice logic runs against a fake of faiss' GPU functions that shards the
index over CPU sub-indexes the way faiss' GPU cloner does (IndexShards: contiguous rows for flat, ids modulo the
GPU count for IVF), so the search results through the "GPUs" are real.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path

import faiss
import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from index.calibrate import RERANK_MAX
from index.distributed import build_from_shards, build_index, encode_shard, shard_path
from index.options import IndexOptions, default_pq_m, pq_bits
from index.store import VectorIndex, bytes_per_vector
from mirror.distributed import shard_bounds
from mirror.errors import MirrorError
from tests.synthetic import clustered, recall_at_10

faiss.omp_set_num_threads(1)

WORDS = ["cat", "dog", "car", "bus", "the", "a", "is", "on", "red", "blue", "big", "small", "man", "woman"]
FLAT = IndexOptions(kind="flat")


def corpus(n: int, seed: int = 0) -> list[str]:
    """n distinct short strings the tiny BERT vocabulary covers, of varied lengths, with a few duplicates."""
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 7)))) + f" {i}" for i in range(n)]
    return texts + texts[:5]  # duplicates: dropped before the split, so they must not shift the ids


def same_hits(a: VectorIndex, b: VectorIndex, queries: np.ndarray, k: int = 10, atol: float = 1e-5) -> None:
    """Same ids at the same ranks with scores within `atol`; two ids may swap only where their scores tie within
    `atol` (encoding in other batches changes the last float bits, and the tiny random encoder makes near-twins)."""
    ra, rb = a.search_vectors(queries, k), b.search_vectors(queries, k)
    np.testing.assert_allclose([[h.score for h in r] for r in ra], [[h.score for h in r] for r in rb], atol=atol)
    for hits_a, hits_b in zip(ra, rb, strict=True):
        for ha, hb in zip(hits_a, hits_b, strict=True):
            if ha.id != hb.id:
                tied = [h.id for h in hits_b if abs(h.score - ha.score) <= atol]
                assert ha.id in tied or abs(ha.score - hits_b[-1].score) <= atol, (ha, hb)


def leftovers(folder: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


@pytest.fixture(scope="module")
def tiny_encoder(tiny_bert):
    from mirror.encoder import load_encoder

    return load_encoder(tiny_bert)


# ---------------------------------------------------------------- two gloo processes (torchrun's environment)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli_rank(rank: int, world: int, runs: list[tuple[int, list[str], tuple[int, str]]], out: str) -> None:
    """One torchrun worker: the environment torchrun sets, then `python -m index build ...` in this process, once
    per run (a new process group on a new port each time). Rank 0 records each run's exit codes and the output
    folder's contents before the next run can start (the next rendezvous waits for it).

    A run's `fail` = (rank, "encode" | "save"): that rank's encoder, or its index writing, raises.
    """
    from mirror.encoder import Encoder

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    encode, write_index = Encoder.encode, faiss.write_index
    from index.__main__ import main

    for i, (port, argv, fail) in enumerate(runs):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                          WORLD_SIZE=str(world))  # fmt: skip
        Encoder.encode, faiss.write_index = encode, write_index

        def broken(*args, fail=fail, **kwargs):
            raise MirrorError(f"injected {fail[1]} failure on rank {rank}")

        if rank == fail[0]:
            if fail[1] == "encode":
                Encoder.encode = broken
            else:
                faiss.write_index = broken
        code = main(argv)
        Path(out, f"run{i}-rank{rank}").write_text(str(code))
        if rank == 0:
            folder = Path(argv[argv.index("--out") + 1])
            state = {"left": leftovers(folder.parent, set()),
                     "files": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}}  # fmt: skip
            Path(out, f"run{i}.json").write_text(json.dumps(state))


@pytest.fixture(scope="module")
def sharded_run(tiny_bert, tmp_path_factory):
    """`torchrun --nproc_per_node 2 -m index build` over 3,000 texts; then again over that index with rank 1
    failing to encode, and with rank 0 failing to save (two processes, three builds)."""
    tmp = tmp_path_factory.mktemp("ranks")
    texts = corpus(3_000)
    (tmp / "input").mkdir()
    source, small = tmp / "input" / "texts.txt", tmp / "input" / "small.txt"
    source.write_text("\n".join(texts) + "\n")
    small.write_text("\n".join(corpus(200, seed=1)) + "\n")  # the failing runs need no big input
    (tmp / "out").mkdir()
    (tmp / "runs").mkdir()

    def argv(path: Path) -> list[str]:
        return ["build", "--encoder", str(tiny_bert), "--input", str(path), "--out", str(tmp / "out" / "idx"),
                "--quiet", "--type", "flat", "--batch-size", "64"]  # fmt: skip

    fails = [(-1, ""), (1, "encode"), (0, "save")]
    runs = [(_free_port(), argv(source if not i else small), fail) for i, fail in enumerate(fails)]
    mp.spawn(_cli_rank, args=(2, runs, str(tmp / "runs")), nprocs=2, join=True)
    results = {
        fail: ([int((tmp / "runs" / f"run{i}-rank{r}").read_text()) for r in range(2)],
               json.loads((tmp / "runs" / f"run{i}.json").read_text()))
        for i, fail in enumerate(fails)
    }  # fmt: skip
    return {"texts": texts, "out": tmp / "out" / "idx", "runs": results}


def test_two_ranks_build_the_index_one_process_builds(sharded_run, tiny_encoder):
    codes, state = sharded_run["runs"][-1, ""]
    assert codes == [0, 0]
    assert state["left"] == ["idx"]  # the shard folder is gone
    index = VectorIndex.load(sharded_run["out"])  # the stored encoder loads and its fingerprint matches
    single = VectorIndex.build(tiny_encoder, sharded_run["texts"], FLAT)

    assert index.texts == single.texts and len(index) == 3_000  # ids = input order, duplicates dropped
    assert index.kind == "flat" and index.meta["encoder"]["fingerprint"] == tiny_encoder.fingerprint()
    np.testing.assert_allclose(index._cpu.reconstruct_n(0, 3_000), single._cpu.reconstruct_n(0, 3_000), atol=1e-5)
    queries = single._cpu.reconstruct_n(0, 3_000)[::100]
    same_hits(index, single, queries)
    assert [h.id for h in index.search(["red cat 7", "the big bus"], 5)[0]] == [
        h.id for h in single.search(["red cat 7", "the big bus"], 5)[0]
    ]


@pytest.mark.parametrize("fail", [(1, "encode"), (0, "save")], ids=["rank1-encode", "rank0-save"])
def test_a_failing_rank_leaves_the_previous_index(sharded_run, fail):
    codes, state = sharded_run["runs"][fail]
    assert codes == [2, 2]  # both ranks stop with `error: ...`, neither hangs
    assert state["left"] == ["idx"]  # no shard folder, no temporary index folder
    assert state["files"] == sharded_run["runs"][-1, ""][1]["files"]  # the previous index, byte for byte


def test_build_index_without_a_process_group_is_the_plain_build(tiny_encoder, tmp_path):
    texts = corpus(300)
    index = build_index(tiny_encoder, texts, tmp_path / "idx", FLAT)

    assert leftovers(tmp_path, set()) == ["idx"]
    loaded = VectorIndex.load(tmp_path / "idx")
    single = VectorIndex.build(tiny_encoder, texts, FLAT)
    assert loaded.texts == single.texts == index.texts
    same_hits(loaded, single, single._cpu.reconstruct_n(0, 300)[::10], atol=1e-6)


# ---------------------------------------------------------------- shards by hand (explicit rank and world)


def test_encode_shard_by_rank_then_build_from_shards(tiny_encoder, tmp_path):
    texts = corpus(500)
    folder = tmp_path / "shards"
    folder.mkdir()
    for rank in (2, 0, 1):  # any order, any machine sharing the folder
        encode_shard(tiny_encoder, texts, folder, rank, 3, batch_size=32)

    assert sorted(p.name for p in folder.iterdir()) == [shard_path(folder, r, 3).name for r in range(3)]
    assert [len(np.load(shard_path(folder, r, 3))) for r in range(3)] == [167, 167, 166]
    index = build_from_shards(folder, texts, 3, FLAT, encoder=tiny_encoder)
    single = VectorIndex.build(tiny_encoder, texts, FLAT)
    assert index.texts == single.texts
    same_hits(index, single, single._cpu.reconstruct_n(0, 500)[::25])

    with pytest.raises(MirrorError, match="shard 1 of 3 is missing"):
        shard_path(folder, 1, 3).unlink()
        build_from_shards(folder, texts, 3)
    with pytest.raises(MirrorError, match="holds 167 rows, expected 134"):
        build_from_shards(folder, texts[:400], 3)
    with pytest.raises(MirrorError, match="rank must be"):
        encode_shard(tiny_encoder, texts, folder, 3, 3)


@pytest.mark.parametrize("kind", ["ivf", "ivfpq"])
def test_shards_train_and_add_exactly_like_one_array(kind, tmp_path):
    """Memory-mapped shards, sampled for training and added block by block, give the index of one in-RAM array."""
    rng = np.random.default_rng(1)
    data = clustered(6_001, 32, 20, rng)
    texts = [f"t{i}" for i in range(len(data))]
    folder = tmp_path / "shards"
    folder.mkdir()
    for rank in range(3):
        lo, hi = shard_bounds(len(data), 3, rank)  # 2,001 + 2,000 + 2,000 rows
        np.save(shard_path(folder, rank, 3), data[lo:hi])

    sharded = build_from_shards(folder, texts, 3, IndexOptions(kind=kind))
    whole = VectorIndex.from_vectors(data, texts, IndexOptions(kind=kind))

    for key in ("nlist", "nprobe", "rerank", "calibrated_recall_at_10", "bytes_per_vector"):
        assert sharded.meta["index"].get(key) == whole.meta["index"].get(key), key
    same_hits(sharded, whole, data[::97], atol=0)
    if kind == "ivfpq":  # its float16 rows went to a file in the shard folder, not to RAM
        assert isinstance(sharded._store.chunks[0], np.memmap)
        assert (folder / "vectors.f16.npy").is_file()


# ---------------------------------------------------------------- IVF-PQ


def test_ivfpq_recall_memory_and_round_trip(tmp_path):
    rng = np.random.default_rng(4)
    points = clustered(20_300, 64, 40, rng)
    data, queries = points[:20_000], points[20_000:]  # queries: unseen points of the same clusters

    index = VectorIndex.from_vectors(data, [str(i) for i in range(len(data))], IndexOptions(kind="ivfpq"))

    info = index.meta["index"]
    assert (info["pq_m"], info["pq_bits"], info["nlist"]) == (8, 8, 256)  # 64-d: 8 sub-quantizers of 8 dims
    assert info["bytes_per_vector"] == {"ram": 16, "disk": 128}  # 8 code bytes + 8-byte id; float16 rows on disk
    assert info["nprobe_auto"] and info["rerank_auto"] and 1 <= info["rerank"] <= RERANK_MAX
    assert 1 <= info["nprobe"] < info["nlist"] and info["calibrated_recall_at_10"] >= 0.96
    assert recall_at_10(index, data, queries) >= 0.95
    (hits,) = index.search_vectors(data[123], 5)
    assert hits[0].id == 123 and hits[0].score == pytest.approx(1.0, abs=2e-3)  # re-ranked: exact up to float16
    assert [h.rank for h in hits] == [1, 2, 3, 4, 5]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)

    codes_only = VectorIndex.from_vectors(data, [str(i) for i in range(len(data))],
                                          IndexOptions(kind="ivfpq", rerank=1, nprobe=info["nprobe"]))  # fmt: skip
    assert recall_at_10(codes_only, data, queries) < 0.9  # why the float16 rows are kept

    out = index.save(tmp_path / "pq")
    assert sorted(p.name for p in out.iterdir()) == ["index.faiss", "meta.json", "texts.json", "vectors.f16.npy"]
    assert isinstance(index._store.chunks[0], np.memmap)  # after saving, read from the folder, not RAM
    loaded = VectorIndex.load(out)
    assert loaded.kind == "ivfpq" and loaded.meta["index"]["rerank"] == info["rerank"]
    same_hits(loaded, index, queries[:50], atol=0)
    assert loaded.add_vectors(-data[:1], ["new"]) == 1  # grows: codes and float16 rows
    assert loaded.search_vectors(-data[0], 1)[0][0].text == "new"
    assert len(VectorIndex.load(loaded.save(out))) == 20_001


def test_ivfpq_options_and_damage():
    rng = np.random.default_rng(5)
    data = clustered(3_000, 48, 10, rng)
    texts = [str(i) for i in range(len(data))]

    index = VectorIndex.from_vectors(data, texts, IndexOptions(kind="ivfpq", pq_m=12, nlist=16, nprobe=4, rerank=8))
    info = index.meta["index"]
    assert (info["pq_m"], info["pq_bits"], info["nprobe"], info["rerank"]) == (12, 6, 4, 8)  # 3,000 rows: 6 bits
    assert not info["nprobe_auto"] and not info["rerank_auto"] and "calibrated_recall_at_10" not in info
    assert index._cpu.pq.M == 12 and "pq=12x6, rerank=8" in repr(index)
    index.set_rerank(3)
    assert index.meta["index"]["rerank"] == 3
    with pytest.raises(MirrorError, match="pq_m must divide"):
        VectorIndex.from_vectors(data, texts, IndexOptions(kind="ivfpq", pq_m=7))
    with pytest.raises(MirrorError, match="applies to an ivfpq index"):
        VectorIndex.from_vectors(data, texts, IndexOptions(kind="ivf", rerank=4))
    with pytest.raises(MirrorError, match="rerank must be a positive integer"):
        VectorIndex.from_vectors(data, texts, IndexOptions(kind="ivfpq", rerank=0))
    with pytest.raises(MirrorError, match="rerank applies"):
        VectorIndex.from_vectors(data, texts, IndexOptions(kind="ivf")).set_rerank(2)


def test_ivfpq_folder_without_its_rows_is_refused(tmp_path):
    data = clustered(2_000, 16, 8, np.random.default_rng(6))
    out = VectorIndex.from_vectors(data, [str(i) for i in range(2_000)], IndexOptions(kind="ivfpq")).save(
        tmp_path / "pq"
    )
    np.save(out / "vectors.f16.npy", np.zeros((10, 16), dtype=np.float16))
    with pytest.raises(MirrorError, match="inconsistent"):
        VectorIndex.load(out)
    (out / "vectors.f16.npy").unlink()
    with pytest.raises(MirrorError, match="damaged"):
        VectorIndex.load(out)


def test_pq_parameters():
    assert [default_pq_m(d) for d in (384, 768, 32, 64, 100)] == [48, 96, 4, 8, 20]
    assert [pq_bits(n) for n in (100, 5_000, 9_984, 1_000_000)] == [1, 7, 8, 8]
    flat, ivf = faiss.IndexFlatIP(384), faiss.IndexIVFFlat(faiss.IndexFlatIP(384), 384, 4, faiss.METRIC_INNER_PRODUCT)
    ivfpq = faiss.IndexIVFPQ(faiss.IndexFlatIP(384), 384, 4, 48, 8, faiss.METRIC_INNER_PRODUCT)
    assert [bytes_per_vector(i) for i in (flat, ivf, ivfpq)] == [
        {"ram": 1536, "disk": 0},
        {"ram": 1544, "disk": 0},
        {"ram": 56, "disk": 768},
    ]


def test_cli_builds_an_ivfpq_index(tiny_bert, tmp_path, capsys):
    from index.__main__ import main

    source = tmp_path / "texts.txt"
    source.write_text("\n".join(corpus(800)) + "\n")
    code = main(["build", "--encoder", str(tiny_bert), "--input", str(source), "--out", str(tmp_path / "idx"),
                 "--type", "ivfpq", "--nlist", "8", "--pq-m", "8", "--quiet"])  # fmt: skip

    assert code == 0, capsys.readouterr().err
    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    assert meta["index"]["type"] == "ivfpq" and meta["index"]["pq_m"] == 8 and meta["count"] == 800
    assert main(["query", str(tmp_path / "idx"), "red cat", "-k", "3", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out.splitlines()[-1])[0]["hits"]) == 3


# ---------------------------------------------------------------- several GPUs (faked)


class FakeGpus:
    """faiss' GPU entry points for a machine with `count` GPUs, each "GPU" being a CPU sub-index.

    `index_cpu_to_all_gpus` with shard=True splits the index as faiss' ToGpuClonerMultiple does: a flat
    index into contiguous row ranges (IndexShards with successive ids), an IVF by id modulo the GPU count
    (shard_type 1, the default) with the shards keeping global ids.
    """

    def __init__(self, count: int):
        self.count = count
        self.clones: list[dict] = []
        self.nprobe_calls: list[float] = []
        self.single: list[object] = []
        self._alive: list[object] = []  # sub-indexes must outlive the IndexShards that points to them

    def install(self, monkeypatch) -> FakeGpus:
        fake = self

        class ParameterSpace:
            def set_index_parameter(self, index, name, value):
                assert name == "nprobe"
                fake.nprobe_calls.append(value)
                for i in range(index.count()):
                    faiss.downcast_index(index.at(i)).nprobe = int(value)

        monkeypatch.setattr(faiss, "get_num_gpus", lambda: self.count)
        monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", self.to_all_gpus, raising=False)
        monkeypatch.setattr(faiss, "GpuParameterSpace", ParameterSpace, raising=False)
        monkeypatch.setattr(faiss, "StandardGpuResources", lambda: object(), raising=False)
        monkeypatch.setattr(faiss, "index_cpu_to_gpu", self.to_one_gpu, raising=False)
        monkeypatch.setattr(faiss, "index_gpu_to_cpu", self.to_cpu, raising=False)
        return self

    def to_all_gpus(self, index, co=None, ngpu=-1):
        self.clones.append({"shard": co.shard, "float16": co.useFloat16, "ngpu": ngpu, "rows": index.ntotal})
        assert co.shard, "several GPUs must shard the index, not replicate it"
        if isinstance(index, faiss.IndexIVF):
            shards = faiss.IndexShards(index.d, False, False)
            for i in range(ngpu):
                part = faiss.clone_index(index)
                part.reset()
                index.copy_subset_to(part, faiss.InvertedLists.SUBSET_TYPE_ID_MOD, ngpu, i)
                self._keep(shards, part)
        else:
            shards = faiss.IndexShards(index.d, False, True)
            xb = index.reconstruct_n(0, index.ntotal)
            for i in range(ngpu):
                part = faiss.IndexFlatIP(index.d)
                part.add(xb[index.ntotal * i // ngpu : index.ntotal * (i + 1) // ngpu])
                self._keep(shards, part)
        self._alive.append(shards)
        return shards

    def _keep(self, shards, part) -> None:
        self._alive.append(part)
        shards.add_shard(part)

    def to_one_gpu(self, res, device, index, co=None):
        self.single.append(co)
        return faiss.clone_index(index)

    def to_cpu(self, index):
        return faiss.clone_index(index)


@pytest.mark.parametrize("kind", ["flat", "ivf", "ivfpq"])
def test_several_gpus_shard_the_index(kind, tmp_path, monkeypatch):
    rng = np.random.default_rng(7)
    data = clustered(4_000, 32, 12, rng)
    texts = [str(i) for i in range(len(data))]
    options = IndexOptions(kind=kind, nlist=32 if kind != "flat" else None)
    cpu_only = VectorIndex.from_vectors(data, texts, options, gpu=False)
    fake = FakeGpus(2).install(monkeypatch)

    index = VectorIndex.from_vectors(data, texts, options)

    assert index.on_gpu and index.meta["index"]["gpu"] is True and index.meta["index"]["gpu_shards"] == 2
    assert fake.single == []  # the one-GPU path (StandardGpuResources + index_cpu_to_gpu) was not taken
    assert fake.clones[0] == {"shard": True, "float16": kind == "ivfpq", "ngpu": 2, "rows": 4_000}
    if kind != "flat":
        assert fake.nprobe_calls[-1] == index.meta["index"]["nprobe"] == cpu_only.meta["index"]["nprobe"]
        assert all(faiss.downcast_index(index._gpu.index.at(i)).nprobe == index._cpu.nprobe for i in range(2))
        index.set_nprobe(3)
        assert fake.nprobe_calls[-1] == 3
        cpu_only.set_nprobe(3)
    assert [index._gpu.index.at(i).ntotal for i in range(2)] == [2_000, 2_000]
    same_hits(index, cpu_only, data[::50])  # answered by the shards: same hits as one CPU index
    index.add_vectors(-data[:1], ["new"])
    assert fake.clones[-1]["rows"] == 4_001 and index._gpu.index.ntotal == 4_001  # re-sharded from the CPU copy
    assert index.search_vectors(-data[0], 1)[0][0].text == "new"

    out = index.save(tmp_path / "idx")
    reopened = VectorIndex.load(out)  # still under the fake: sharded again on load
    assert reopened.on_gpu and reopened._gpu.shards == 2 and fake.clones[-1]["rows"] == 4_001
    monkeypatch.undo()
    loaded = VectorIndex.load(out)  # what was saved is the plain CPU index
    assert not loaded.on_gpu and len(loaded) == 4_001
    assert loaded.search_vectors(-data[0], 1)[0][0].text == "new"


def test_one_gpu_gets_float16_lookup_tables_for_ivfpq_and_unsupported_codes_stay_on_cpu(monkeypatch):
    data = clustered(3_000, 40, 10, np.random.default_rng(8))
    texts = [str(i) for i in range(len(data))]
    fake = FakeGpus(1).install(monkeypatch)

    index = VectorIndex.from_vectors(
        data, texts, IndexOptions(kind="ivfpq", nlist=16)
    )  # 40-d: 4 sub-quantizers (supported)
    assert index.on_gpu and "gpu_shards" not in index.meta["index"] and fake.clones == []
    assert len(fake.single) == 1 and fake.single[0].useFloat16 is True

    odd = VectorIndex.from_vectors(
        data, texts, IndexOptions(kind="ivfpq", nlist=16, pq_m=5)
    )  # 5-byte codes: no GPU IVF-PQ
    assert not odd.on_gpu and odd.meta["index"]["gpu"] is False and len(fake.single) == 1
