"""VectorIndex: ranking on synthetic vectors, save/load, encoder checks, add, IVF recall, the GPU path."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import faiss
import numpy as np
import pytest

from index import EXACT_MAX, IndexOptions
from index.options import DEFAULT_OPTIONS, default_nlist
from index.store import VectorIndex
from mirror.errors import MirrorError
from tests.synthetic import clustered, recall_at_10, unit

faiss.omp_set_num_threads(1)

WORDS = ["cat", "dog", "car", "bus", "red", "blue", "big", "small", "man", "woman"]


def fan(query: np.ndarray, cosines: list[float], rng: np.random.Generator) -> np.ndarray:
    """Unit vectors at the given cosine similarities to `query` (each in its own random orthogonal direction)."""
    rows = []
    for c in cosines:
        u = rng.standard_normal(query.shape[0])
        u -= (u @ query) * query
        rows.append(c * query + np.sqrt(1 - c * c) * unit(u))
    return np.asarray(rows, dtype=np.float32)


@pytest.fixture(scope="module")
def tiny_encoder(tiny_bert):
    from mirror.encoder import load_encoder

    return load_encoder(tiny_bert)


# ---------------------------------------------------------------- ranking and search results


def test_ranking_follows_known_cosines():
    rng = np.random.default_rng(0)
    query = unit(rng.standard_normal(48))
    cosines = [0.2, 0.9, 0.5, 0.99, 0.7, -0.3]
    index = VectorIndex.from_vectors(fan(query, cosines, rng), [f"t{i}" for i in range(len(cosines))])

    (hits,) = index.search_vectors(query, k=4)

    assert [h.text for h in hits] == ["t3", "t1", "t4", "t2"]
    assert [h.id for h in hits] == [3, 1, 4, 2]
    assert [h.rank for h in hits] == [1, 2, 3, 4]
    np.testing.assert_allclose([h.score for h in hits], [0.99, 0.9, 0.7, 0.5], atol=1e-5)


def test_search_vectors_normalises_and_answers_each_query():
    rng = np.random.default_rng(1)
    data = unit(rng.standard_normal((50, 16)))
    index = VectorIndex.from_vectors(data * 3.0, [str(i) for i in range(50)])  # unnormalised input

    results = index.search_vectors(data[[7, 21, 42]] * 0.5, k=3)

    assert [r[0].id for r in results] == [7, 21, 42]
    assert all(r[0].score == pytest.approx(1.0, abs=1e-5) for r in results)
    assert all(len(r) == 3 and r[0].score >= r[1].score >= r[2].score for r in results)


def test_batched_flat_search_matches_faiss():
    rng = np.random.default_rng(12)
    data = clustered(3_000, 24, 6, rng)
    queries = unit(rng.standard_normal((60, 24)))  # >= 20 queries: the NumPy GEMM path
    index = VectorIndex.from_vectors(data, [str(i) for i in range(len(data))])
    reference = faiss.IndexFlatIP(24)
    reference.add(data)

    for k in (1, 10, 3_000):
        want_scores, want_ids = reference.search(queries, k)
        results = index.search_vectors(queries, k)
        got_ids = np.array([[h.id for h in r] for r in results])
        np.testing.assert_allclose([[h.score for h in r] for r in results], want_scores, atol=1e-5)
        if k < 3_000:  # among all 3,000 rows a few near-ties (1e-7 apart) swap places between BLAS libraries
            np.testing.assert_array_equal(got_ids, want_ids)
        else:
            assert all(sorted(a) == sorted(b) for a, b in zip(got_ids, want_ids, strict=True))


def test_k_larger_than_index_returns_everything():
    rng = np.random.default_rng(2)
    index = VectorIndex.from_vectors(unit(rng.standard_normal((5, 8))), list("abcde"))

    (hits,) = index.search_vectors(rng.standard_normal(8), k=50)

    assert sorted(h.text for h in hits) == list("abcde")
    assert [h.rank for h in hits] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("k", [0, -1, 2.5, True])
def test_bad_k_is_refused(k):
    index = VectorIndex.from_vectors(np.eye(3, dtype=np.float32), ["a", "b", "c"])
    with pytest.raises(MirrorError, match="k must be a positive integer"):
        index.search_vectors(np.ones(3), k=k)


def test_bad_query_vectors_are_refused():
    index = VectorIndex.from_vectors(np.eye(3, dtype=np.float32), ["a", "b", "c"])
    with pytest.raises(MirrorError, match="dimension 3"):
        index.search_vectors(np.ones(4))
    with pytest.raises(MirrorError, match="non-zero"):
        index.search_vectors(np.zeros(3))
    with pytest.raises(MirrorError, match="no encoder"):
        index.search("a")


def test_string_search_always_returns_a_list_per_query(tiny_encoder):
    index = VectorIndex.build(tiny_encoder, WORDS)

    single = index.search("cat", k=3)
    many = index.search(["cat", "big dog"], k=3)

    assert len(single) == 1 and len(single[0]) == 3
    assert len(many) == 2 and all(len(hits) == 3 for hits in many)
    # the fast single-query path embeds exactly like the batch encoder
    np.testing.assert_allclose(index.embed(["cat"]), tiny_encoder.encode(["cat"]), atol=1e-5)


@pytest.mark.parametrize("queries", ["", "   ", [], ["cat", ""]])
def test_empty_queries_are_refused(tiny_encoder, queries):
    index = VectorIndex.build(tiny_encoder, WORDS[:3])
    with pytest.raises(MirrorError, match="empty|no query"):
        index.search(queries)


def test_empty_or_bad_texts_are_refused(tiny_encoder):
    with pytest.raises(MirrorError, match="no texts"):
        VectorIndex.build(tiny_encoder, [])
    with pytest.raises(MirrorError, match="no texts"):
        VectorIndex.from_vectors(np.zeros((0, 4), dtype=np.float32), [])
    with pytest.raises(MirrorError, match="not a single string"):
        VectorIndex.build(tiny_encoder, "cat dog")
    with pytest.raises(MirrorError, match="empty or blank"):
        VectorIndex.build(tiny_encoder, ["cat", " "])
    with pytest.raises(MirrorError, match="one vector per text"):
        VectorIndex.from_vectors(np.eye(3, dtype=np.float32), ["a", "b"])


def test_empty_index_cannot_be_searched():
    index = VectorIndex.from_vectors(np.eye(2, dtype=np.float32), ["a", "b"])
    index._texts.clear()  # an index emptied behind our back (e.g. a hand-edited folder) still fails clearly
    with pytest.raises(MirrorError, match="index is empty"):
        index.search_vectors(np.ones(2))


# ---------------------------------------------------------------- add and duplicates


def test_duplicates_are_dropped_keeping_the_first_row():
    vectors = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float32)
    index = VectorIndex.from_vectors(vectors, ["a", "b", "a"])

    assert index.texts == ["a", "b"]
    assert index.search_vectors([1, 0, 0], k=1)[0][0].text == "a"
    assert index.search_vectors([0, 0, 1], k=1)[0][0].score < 0.5  # the duplicate's row was not indexed


def test_add_vectors_appends_and_skips_known_texts():
    rng = np.random.default_rng(3)
    data = unit(rng.standard_normal((20, 8)))
    index = VectorIndex.from_vectors(data[:10], [f"t{i}" for i in range(10)])

    added = index.add_vectors(data[8:], [f"t{i}" for i in range(8, 20)])  # t8, t9 are known

    assert added == 10
    assert len(index) == 20 and index.meta["count"] == 20
    assert index.texts == [f"t{i}" for i in range(20)]
    for i in (3, 15):
        top = index.search_vectors(data[i], k=1)[0][0]
        assert (top.id, top.text) == (i, f"t{i}")
    assert index.add_vectors(data[:2], ["t0", "t1"]) == 0


def test_add_texts_with_the_encoder(tiny_encoder):
    index = VectorIndex.build(tiny_encoder, WORDS[:5])

    assert index.add(["woman", "cat", "man", "woman"]) == 2
    assert index.add(["cat"]) == 0
    assert index.texts == WORDS[:5] + ["woman", "man"]
    # the new rows hold the encoder's embeddings of the new texts
    hits = index.search_vectors(tiny_encoder.encode(["man"]), k=len(index))[0]
    assert {h.text: h.score for h in hits}["man"] == pytest.approx(1.0, abs=1e-5)


# ---------------------------------------------------------------- approximate index


def test_auto_switches_to_ivf_with_recall_at_least_0_95():
    points = clustered(12_200, 32, 40, np.random.default_rng(4))
    data, queries = points[:12_000], points[12_000:]  # queries: unseen points of the same clusters

    index = VectorIndex.from_vectors(data, [str(i) for i in range(len(data))], IndexOptions(exact_max=5_000))

    info = index.meta["index"]
    assert index.kind == "ivf" and info["auto"] is True
    assert info["nlist"] == default_nlist(12_000) and info["nprobe_auto"] is True
    assert 1 <= info["nprobe"] < info["nlist"]  # really approximate: not scanning every list
    assert info["calibrated_recall_at_10"] >= 0.95
    assert recall_at_10(index, data, queries) >= 0.95
    index.set_nprobe(1)
    assert recall_at_10(index, data, queries) < 0.95  # the calibration was needed


def test_small_index_is_exact_and_overrides_are_recorded():
    rng = np.random.default_rng(6)
    data = clustered(2_000, 16, 10, rng)
    texts = [str(i) for i in range(len(data))]

    assert VectorIndex.from_vectors(data, texts).kind == "flat"
    assert VectorIndex.from_vectors(data, texts, IndexOptions(kind="flat", exact_max=10)).kind == "flat"
    forced = VectorIndex.from_vectors(data, texts, IndexOptions(kind="ivf", nlist=16, nprobe=3))
    info = forced.meta["index"]
    assert (forced.kind, info["nlist"], info["nprobe"], info["nprobe_auto"], info["auto"]) == (
        "ivf",
        16,
        3,
        False,
        False,
    )
    assert forced._cpu.nprobe == 3
    with pytest.raises(MirrorError, match="nlist"):
        VectorIndex.from_vectors(data, texts, IndexOptions(kind="ivf", nlist=5_000))
    with pytest.raises(MirrorError, match="nprobe must be between"):
        forced.set_nprobe(17)
    with pytest.raises(MirrorError, match="kind must be one of"):
        VectorIndex.from_vectors(data, texts, IndexOptions(kind="hnsw"))
    with pytest.raises(MirrorError, match="apply to an IVF index"):
        VectorIndex.from_vectors(data, texts, IndexOptions(kind="flat", nprobe=4))
    with pytest.raises(MirrorError, match="nprobe must be between"):
        VectorIndex.from_vectors(data, texts, IndexOptions(kind="ivf", nlist=8, nprobe=9))


def test_options_are_checked_before_encoding(tiny_encoder, monkeypatch):
    monkeypatch.setattr(tiny_encoder, "encode", lambda *a, **kw: pytest.fail("encoded before checking options"))
    for options in ({"kind": "hnsw"}, {"nlist": -1}, {"kind": "flat", "nlist": 4}, {"exact_max": 1.5}):
        with pytest.raises(MirrorError):
            VectorIndex.build(tiny_encoder, WORDS, IndexOptions(**options))
    with pytest.raises(MirrorError, match="batch size must be a positive integer"):
        VectorIndex.build(tiny_encoder, WORDS, batch_size=0)


def test_index_options_are_one_checked_value():
    options = IndexOptions(kind="ivf", nlist=np.int64(16), nprobe=4)  # NumPy integers are integers
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.kind = "flat"  # type: ignore[misc]
    with pytest.raises(MirrorError, match="nprobe must be between 1 and nlist \\(8\\)"):
        dataclasses.replace(options, nlist=8, nprobe=9)  # a changed copy is checked again
    with pytest.raises(MirrorError, match="nlist must be a non-negative integer, got True"):
        IndexOptions(nlist=True)
    assert [IndexOptions(exact_max=100).kind_for(n) for n in (100, 101)] == ["flat", "ivf"]
    assert IndexOptions(kind="ivfpq").kind_for(10) == "ivfpq"
    assert options.requested() == {"nlist": 16, "nprobe": 4}
    assert IndexOptions(kind="ivfpq", rerank=8).requested() == {
        "nlist": None,
        "nprobe": None,
        "pq_m": None,
        "rerank": 8,
    }
    assert IndexOptions() == DEFAULT_OPTIONS and DEFAULT_OPTIONS.exact_max == EXACT_MAX


def test_ivf_fills_k_when_probed_lists_are_short():
    rng = np.random.default_rng(7)
    data = clustered(800, 16, 8, rng)
    index = VectorIndex.from_vectors(data, [str(i) for i in range(800)], IndexOptions(kind="ivf", nlist=16, nprobe=1))

    (hits,) = index.search_vectors(data[0], k=800)

    assert len(hits) == 800 and len({h.id for h in hits}) == 800


def test_growing_past_the_threshold_rebuilds_as_ivf():
    rng = np.random.default_rng(8)
    data = clustered(3_000, 16, 12, rng)
    texts = [str(i) for i in range(len(data))]
    index = VectorIndex.from_vectors(data[:1_000], texts[:1_000], IndexOptions(exact_max=2_000, nlist=32))
    assert index.kind == "flat"

    index.add_vectors(data[1_000:], texts[1_000:])

    assert index.kind == "ivf" and len(index) == 3_000 and index.texts == texts
    assert index.meta["index"]["nlist"] == 32  # the nlist asked for at build time is used when it switches
    assert index.meta["index"]["nprobe_auto"] is True
    for i in (5, 2_500):
        assert index.search_vectors(data[i], k=1)[0][0].id == i


# ---------------------------------------------------------------- save and load


def test_save_load_round_trip_with_the_stored_encoder(tiny_encoder, tiny_bert, tmp_path):
    index = VectorIndex.build(tiny_encoder, WORDS)
    out = index.save(tmp_path / "idx")

    meta = json.loads((out / "meta.json").read_text())
    assert meta["encoder"]["absolute"] == str(tiny_bert.resolve())
    assert meta["encoder"]["path"] == os.path.relpath(tiny_bert.resolve(), out)  # ../../tiny_bert0 or so
    assert meta["encoder"]["fingerprint"] == tiny_encoder.fingerprint()
    assert (meta["count"], meta["dim"], meta["index"]["type"]) == (len(WORDS), 32, "flat")
    assert {"created", "versions"} <= meta.keys() and meta["versions"]["faiss"] == faiss.__version__
    assert json.loads((out / "texts.json").read_text()) == WORDS

    loaded = VectorIndex.load(out)  # no encoder given: loads the stored one and checks it
    assert loaded.texts == WORDS and loaded.encoder is not None
    assert loaded.encoder.fingerprint() == tiny_encoder.fingerprint()
    probe = np.random.default_rng(9).standard_normal(32)
    before, after = index.search_vectors(probe, k=5)[0], loaded.search_vectors(probe, k=5)[0]
    assert [h.id for h in after] == [h.id for h in before]
    np.testing.assert_allclose([h.score for h in after], [h.score for h in before], atol=1e-6)
    assert [h.id for h in loaded.search("cat dog", 3)[0]] == [h.id for h in index.search("cat dog", 3)[0]]


def test_ivf_round_trip_keeps_its_parameters(tmp_path):
    rng = np.random.default_rng(10)
    data = clustered(1_000, 16, 8, rng)
    index = VectorIndex.from_vectors(data, [str(i) for i in range(1_000)], IndexOptions(kind="ivf", nlist=8, nprobe=2))

    loaded = VectorIndex.load(index.save(tmp_path / "ivf"))

    assert loaded.kind == "ivf" and loaded._cpu.nprobe == 2 and loaded.meta["index"]["nlist"] == 8
    assert loaded.encoder is None
    assert loaded.add_vectors(data[:1] * -1, ["new"]) == 1  # the direct map survived: still growable
    assert loaded.search_vectors(data[0] * -1, k=1)[0][0].text == "new"


def test_loading_with_another_encoder_is_refused(tiny_encoder, tiny_roberta, tiny_bert, tmp_path):
    from mirror.encoder import load_encoder

    out = VectorIndex.build(tiny_encoder, WORDS).save(tmp_path / "idx")

    with pytest.raises(MirrorError, match="built with the encoder .* not comparable"):
        VectorIndex.load(out, load_encoder(tiny_roberta))
    with pytest.raises(MirrorError, match="fingerprint"):  # same weights, other pooling: other embeddings
        VectorIndex.load(out, load_encoder(tiny_bert, pooling="mean"))
    assert len(VectorIndex.load(out, load_encoder(tiny_bert))) == len(WORDS)


def test_missing_stored_encoder_is_a_clear_error(tiny_bert, tmp_path):
    import shutil

    from mirror.encoder import load_encoder

    model = tmp_path / "model"
    shutil.copytree(tiny_bert, model)
    out = VectorIndex.build(load_encoder(model), WORDS).save(tmp_path / "idx")
    shutil.rmtree(model)

    with pytest.raises(MirrorError, match="could not load the encoder this index was built with"):
        VectorIndex.load(out)


def test_index_and_model_moved_together_still_find_each_other(tiny_bert, tmp_path):
    from mirror.encoder import load_encoder

    shutil.copytree(tiny_bert, tmp_path / "here" / "model")
    encoder = load_encoder(tmp_path / "here" / "model")
    VectorIndex.build(encoder, WORDS).save(tmp_path / "here" / "idx")
    assert json.loads((tmp_path / "here" / "idx" / "meta.json").read_text())["encoder"]["path"] == "../model"

    shutil.move(tmp_path / "here", tmp_path / "there")  # the absolute path recorded is gone: the relative one works
    loaded = VectorIndex.load(tmp_path / "there" / "idx")
    assert loaded.encoder.fingerprint() == encoder.fingerprint() and loaded.search("cat", 1)[0][0].text
    again = loaded.save(tmp_path / "elsewhere" / "idx2")  # saved elsewhere: the path follows the model
    assert json.loads((again / "meta.json").read_text())["encoder"]["path"] == "../../there/model"
    assert VectorIndex.load(again).encoder.fingerprint() == encoder.fingerprint()


def test_an_encoder_changed_since_loading_is_not_named_by_its_source(tiny_bert, tmp_path):
    """A tuned encoder keeps its base's `source` until saved; the index must not name the base as its encoder."""
    import torch

    from mirror.encoder import load_encoder, save_encoder

    encoder = load_encoder(tiny_bert)
    assert encoder.name == str(tiny_bert)
    with torch.no_grad():
        next(encoder.model.parameters()).add_(0.01)  # what an optimiser step does
    assert encoder.name is None
    out = VectorIndex.build(encoder, WORDS).save(tmp_path / "idx")
    stored = json.loads((out / "meta.json").read_text())["encoder"]
    assert stored["path"] is None and "changed, not saved" in stored["source"]
    with pytest.raises(MirrorError, match="never saved"):
        VectorIndex.load(out)
    assert len(VectorIndex.load(out, encoder)) == len(WORDS)  # given explicitly, it is checked and used

    saved = save_encoder(encoder, tmp_path / "tuned")
    assert encoder.name == encoder.source == str(saved)
    out = VectorIndex.build(encoder, WORDS).save(tmp_path / "idx")
    assert json.loads((out / "meta.json").read_text())["encoder"]["path"] == "../tuned"
    assert VectorIndex.load(out).encoder.fingerprint() == encoder.fingerprint()


def test_the_meta_for_a_shipped_copy_names_the_model_relative_to_it(tiny_bert, tmp_path):
    from index.folder import with_encoder_at

    out = VectorIndex.build(tiny_bert, WORDS).save(tmp_path / "idx")
    meta = json.loads(with_encoder_at(out, "../mirror-model"))
    assert meta["encoder"]["path"] == meta["encoder"]["source"] == "../mirror-model"
    assert "absolute" not in meta["encoder"] and str(tiny_bert) not in json.dumps(meta)
    with pytest.raises(MirrorError, match="relative to the index folder"):
        with_encoder_at(out, "/abs/model")


def test_save_replaces_an_index_atomically(tmp_path, monkeypatch):
    out = tmp_path / "idx"
    VectorIndex.from_vectors(np.eye(3, dtype=np.float32), ["a", "b", "c"]).save(out)
    bigger = VectorIndex.from_vectors(np.eye(4, dtype=np.float32), list("abcd"))

    def broken_write(index, path):
        raise OSError("disk full")

    monkeypatch.setattr(faiss, "write_index", broken_write)
    with pytest.raises(OSError, match="disk full"):
        bigger.save(out)
    assert VectorIndex.load(out).texts == ["a", "b", "c"]  # the old index is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # and no temporary folder is left

    monkeypatch.undo()
    bigger.save(out)
    assert VectorIndex.load(out).texts == list("abcd")


def test_save_refuses_to_replace_a_folder_that_is_not_an_index(tmp_path):
    precious = tmp_path / "documents"
    precious.mkdir()
    (precious / "thesis.txt").write_text("do not delete")
    index = VectorIndex.from_vectors(np.eye(2, dtype=np.float32), ["a", "b"])

    with pytest.raises(MirrorError, match="not an index folder"):
        index.save(precious)
    assert (precious / "thesis.txt").read_text() == "do not delete"


def test_loading_a_damaged_folder_is_a_clear_error(tmp_path):
    with pytest.raises(MirrorError, match="not an index folder"):
        VectorIndex.load(tmp_path)
    out = VectorIndex.from_vectors(np.eye(3, dtype=np.float32), ["a", "b", "c"]).save(tmp_path / "idx")
    (out / "texts.json").write_text('["a", "b"]')
    with pytest.raises(MirrorError, match="inconsistent"):
        VectorIndex.load(out)
    (out / "index.faiss").write_bytes(b"garbage")
    with pytest.raises(MirrorError, match="damaged"):
        VectorIndex.load(out)


# ---------------------------------------------------------------- GPU path (faked: faiss sees no GPU here)


class FakeGpu:
    """Stands in for faiss' GPU functions: the 'GPU index' is a CPU clone; calls are counted."""

    def __init__(self):
        self.calls: list[str] = []

    def install(self, monkeypatch):
        monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
        monkeypatch.setattr(faiss, "StandardGpuResources", lambda: self.calls.append("resources") or object())
        monkeypatch.setattr(faiss, "index_cpu_to_gpu", self.to_gpu, raising=False)
        monkeypatch.setattr(faiss, "index_gpu_to_cpu", self.to_cpu, raising=False)

    def to_gpu(self, res, device, index):
        self.calls.append("to_gpu")
        self.replica = faiss.clone_index(index)
        return self.replica

    def to_cpu(self, index):
        self.calls.append("to_cpu")
        return faiss.clone_index(index)


def test_gpu_path_builds_searches_and_saves_a_cpu_copy(tmp_path, monkeypatch):
    rng = np.random.default_rng(11)
    data = clustered(2_000, 16, 10, rng)
    texts = [str(i) for i in range(2_000)]
    cpu_only = VectorIndex.from_vectors(data, texts, IndexOptions(kind="ivf", nlist=16))
    fake = FakeGpu()
    fake.install(monkeypatch)

    index = VectorIndex.from_vectors(data, texts, IndexOptions(kind="ivf", nlist=16))

    assert index.on_gpu and fake.calls == ["resources", "to_gpu", "to_cpu"]
    assert index.meta["index"]["gpu"] is True
    assert fake.replica.nprobe == index.meta["index"]["nprobe"] == cpu_only.meta["index"]["nprobe"]
    queries = data[:20]
    assert [[h.id for h in r] for r in index.search_vectors(queries, 5)] == [
        [h.id for h in r] for r in cpu_only.search_vectors(queries, 5)
    ]
    index.add_vectors(-data[:1], ["new"])
    assert fake.replica.ntotal == index._cpu.ntotal == 2_001  # both copies grow
    out = index.save(tmp_path / "gpu")
    monkeypatch.undo()
    loaded = VectorIndex.load(out)
    assert not loaded.on_gpu and len(loaded) == 2_001
    assert loaded.search_vectors(-data[0], 1)[0][0].text == "new"


def test_asking_for_a_gpu_without_one_is_a_clear_error():
    if faiss.get_num_gpus() > 0:
        pytest.skip("this machine has a GPU")
    with pytest.raises(MirrorError, match="no GPU"):
        VectorIndex.from_vectors(np.eye(2, dtype=np.float32), ["a", "b"], gpu=True)


# ---------------------------------------------------------------- the real model


@pytest.mark.slow
def test_bundled_model_neighbours_are_related_words(tmp_path):
    from mirror.encoder import load_encoder

    vocab = ["cat", "kitten", "dog", "puppy", "car", "truck", "bus", "apple", "banana", "orange", "red", "blue",
             "green", "king", "queen", "doctor", "nurse", "hospital", "river", "lake"]  # fmt: skip
    encoder = load_encoder("bundled", device="cpu")
    index = VectorIndex.build(encoder, vocab)

    results = index.search(vocab, k=4)

    for word, hits in zip(vocab, results, strict=True):
        assert hits[0].text == word and hits[0].score == pytest.approx(1.0, abs=1e-4)
        assert hits[1].score < 0.99
    related = {"cat": {"kitten", "dog"}, "car": {"truck", "bus"}, "apple": {"banana", "orange"},
               "king": {"queen"}, "doctor": {"nurse", "hospital"}, "red": {"blue", "green"}}  # fmt: skip
    for word, expected in related.items():
        neighbours = {h.text for h in results[vocab.index(word)][1:3]}
        assert neighbours & expected, (word, neighbours)
    loaded = VectorIndex.load(index.save(tmp_path / "idx"))  # stored as "bundled", reloaded and checked
    assert [h.text for h in loaded.search("kitten", 2)[0]] == [h.text for h in results[1][:2]]
