"""The Explore tab's pure parts on synthetic vectors: twin maps (explorer.compare.maps), what moved (mirror.moved) and
space health (explorer.compare.health)."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from explorer.compare import health, maps
from mirror import moved
from mirror.errors import MirrorError
from tests.conftest import ROOT


def clustered(n_clusters: int, per: int, dim: int = 16, spread: float = 0.05, seed: int = 0) -> np.ndarray:
    """`n_clusters` tight groups of `per` unit-ish vectors around random centres, cluster after cluster."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_clusters, dim))
    return np.vstack([c + spread * rng.normal(size=(per, dim)) for c in centres]).astype(np.float32)


# ------------------------------------------------------------------------------------------------------ maps


def test_align_maps_a_rotated_reflected_scaled_shifted_copy_back_exactly():
    rng = np.random.default_rng(1)
    target = rng.normal(size=(40, 2))
    theta = 1.1
    rot = np.array([[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]])
    for flip in (np.eye(2), np.diag([1.0, -1.0])):
        moving = target @ flip @ rot * 3.7 + np.array([5.0, -2.0])
        np.testing.assert_allclose(maps.align(moving, target), target, atol=1e-9)


def test_align_leaves_an_unrelated_layout_centred_on_the_target():
    rng = np.random.default_rng(2)
    target, moving = rng.normal(size=(30, 2)) + 4.0, rng.normal(size=(30, 2))
    np.testing.assert_allclose(maps.align(moving, target).mean(0), target.mean(0), atol=1e-9)
    # and keeps the target's spread: the tuned map is drawn at the base map's size, however much it moved
    aligned = maps.align(moving, target)
    spread = np.linalg.norm(aligned - aligned.mean(0)) / np.linalg.norm(target - target.mean(0))
    assert spread == pytest.approx(1.0)


COLUMNS = {"ids", "texts", "base", "tuned", "base_cluster", "tuned_cluster", "moved"}


def test_twin_map_on_a_few_strings_uses_pca_and_returns_the_documented_dict():
    vecs = clustered(4, 5)
    texts = [f"s{i}" for i in range(20)]
    out = maps.twin_map(texts, vecs, vecs[::-1].copy())
    assert set(out) == COLUMNS | {"clusters", "queries", "method", "n_total", "n_shown", "note", "seconds"}
    assert out["method"] == "pca" and "PCA" in out["note"]
    assert out["n_total"] == out["n_shown"] == 20 and out["queries"] == []
    assert list(out["ids"]) == list(range(20)) and out["texts"] == texts
    assert out["base"].shape == out["tuned"].shape == (20, 2)
    assert len(out["base_cluster"]) == len(out["tuned_cluster"]) == len(out["moved"]) == 20
    assert ((0 <= out["moved"]) & (out["moved"] <= 1)).all()
    assert np.abs(out["base"]).max() == pytest.approx(1.0, abs=1e-3)  # normalised to about [-1, 1]
    for side in ("base", "tuned"):
        for c in out["clusters"][side]:
            assert set(c) == {"id", "name", "examples", "colour", "size"}
        assert sum(c["size"] for c in out["clusters"][side]) == 20
    as_json = maps.map_json(out)  # the /map endpoint's value: plain lists, the same numbers
    assert as_json["ids"] == list(range(20)) and as_json["base"][3] == pytest.approx(out["base"][3], abs=1e-4)
    assert json.loads(json.dumps(as_json)) == as_json


def test_twin_map_of_identical_spaces_puts_every_string_in_the_same_place():
    vecs = clustered(3, 8)
    out = maps.twin_map([f"s{i}" for i in range(24)], vecs, vecs.copy(), method="pca")
    np.testing.assert_allclose(out["base"], out["tuned"], atol=1e-3)
    assert (out["moved"] == 0.0).all()
    assert [c["colour"] for c in out["clusters"]["base"]] == [c["colour"] for c in out["clusters"]["tuned"]]


def test_twin_map_samples_past_max_points_and_says_so():
    vecs = clustered(5, 12)
    texts = [f"s{i}" for i in range(60)]
    out = maps.twin_map(texts, vecs, vecs, max_points=40, method="pca")
    assert out["n_total"] == 60 and out["n_shown"] == len(out["ids"]) == len(out["texts"]) == 40
    assert "random sample of 40 of your 60" in out["note"]
    assert [texts[i] for i in out["ids"]] == out["texts"]
    again = maps.twin_map(texts, vecs, vecs, max_points=40, method="pca")
    assert list(again["ids"]) == list(out["ids"])  # seeded


def test_twin_map_refuses_too_few_strings_and_unknown_methods():
    vecs = clustered(1, 5)
    with pytest.raises(MirrorError, match="at least 3"):
        maps.twin_map(["a", "b"], vecs[:2], vecs[:2])
    with pytest.raises(MirrorError, match="unknown layout"):
        maps.twin_map([str(i) for i in range(5)], vecs, vecs, method="tsne")


@pytest.mark.slow  # numba compiles UMAP's kernels on a process's first call: 30 s to minutes on 2 busy cores
def test_twin_map_on_50_strings_or_more_uses_umap():
    base = clustered(4, 15, seed=3)
    tuned = clustered(4, 15, seed=4)
    out = maps.twin_map([f"s{i}" for i in range(60)], base, tuned, seed=0)
    assert out["method"] == "umap" and out["n_shown"] == 60 and "PCA" not in out["note"]
    xy = out["tuned"]
    assert np.isfinite(xy).all() and xy.std(0).min() > 0
    # the tuned layout starts from the base one and is aligned to it: the groups the two spaces share stay put
    assert sum(c["size"] for c in out["clusters"]["tuned"]) == 60
    # UMAP's kernels were compiled into numba's disk cache (not once per process): the ones every layout runs
    import umap.layouts
    import umap.umap_
    from numba.core.caching import FunctionCache

    for kernel in (umap.umap_.smooth_knn_dist, umap.layouts._nb_optimize_layout_euclidean_single_epoch):
        assert isinstance(kernel._cache, FunctionCache) and kernel.overloads
        assert Path(kernel._cache._cache_file._index_path).is_file()  # saved (or loaded): its index is on disk
    # the parallel SGD is made from the same function: cached too, it would load the serial code or give its own
    assert not isinstance(umap.layouts._nb_optimize_layout_euclidean_single_epoch_parallel._cache, FunctionCache)


@pytest.mark.slow  # imports umap: a few seconds with the numba cache the install filled
def test_the_installs_warm_up_needs_only_numpy_and_umap_and_caches_the_kernels_maps_run(tmp_path):
    """scripts/bootstrap.sh runs scripts/warm_maps.py while pip installs the rest: torch, FAISS, gradio and the
    project's packages may not be there yet. Run as then (those imports refused), it caches what a map runs."""
    blocked = ["torch", "faiss", "gradio", "transformers", "sentence_transformers", "explorer", "mirror", "index", "ui"]
    code = (
        "import runpy, sys\n"
        "class NotYet:  # as if not installed: `import torch` raises ImportError\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {blocked!r}: raise ImportError(name + ' is not installed yet')\n"
        "sys.meta_path.insert(0, NotYet())\n"
        f"runpy.run_path({str(ROOT / 'scripts' / 'warm_maps.py')!r}, run_name='__main__')\n"
        "import umap.layouts, umap.umap_\n"
        "for k in (umap.umap_.smooth_knn_dist, umap.layouts._nb_optimize_layout_euclidean_single_epoch):\n"
        "    print(k._cache._cache_file._index_path)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0 and "compiled and cached" in run.stderr, run.stderr[-3000:]
    indexes = run.stdout.split()
    assert len(indexes) == 2 and all(Path(p).is_file() for p in indexes)


def test_every_cluster_shown_gets_its_own_colour():
    vecs = clustered(20, 6, seed=5)
    out = maps.twin_map([f"s{i}" for i in range(120)], vecs, clustered(20, 6, seed=6), n_clusters=20, method="pca")
    for side in ("base", "tuned"):
        colours = [c["colour"] for c in out["clusters"][side]]
        assert len(colours) == len(set(colours)) and len(colours) > 10


def test_a_surviving_cluster_keeps_its_colour_and_a_new_one_gets_an_unused_colour():
    base_labels = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
    tuned_labels = np.array([2, 2, 2, 0, 0, 1, 1, 1, 1])  # base 0 -> tuned 2, base 1 -> tuned 0 (mostly)
    base = [{"id": i, "colour": maps.PALETTE[i]} for i in range(3)]
    tuned = [{"id": i, "colour": maps.PALETTE[i]} for i in range(3)]
    maps._match_colours(base_labels, tuned_labels, base, tuned)
    assert tuned[2]["colour"] == base[0]["colour"] and tuned[0]["colour"] == base[1]["colour"]
    assert tuned[1]["colour"] == base[2]["colour"]
    more = [{"id": i, "colour": ""} for i in range(4)]  # a fourth tuned cluster with no base partner
    maps._match_colours(base_labels, np.array([2, 2, 2, 0, 0, 0, 1, 1, 1]), base, more)
    assert more[3]["colour"] not in {c["colour"] for c in more[:3]}
    assert len({c["colour"] for c in more}) == 4


def test_clusters_are_named_by_their_central_strings():
    vecs = maps._unit(clustered(2, 5, seed=7))
    texts = [f"alpha{i}" for i in range(5)] + [f"beta{i}" for i in range(5)]
    labels, found = maps.clusters(vecs, texts, 2)
    assert sorted(c["size"] for c in found) == [5, 5]
    assert len(set(labels[:5])) == 1 and len(set(labels[5:])) == 1 and labels[0] != labels[5]
    for c in found:
        prefix = "alpha" if c["id"] == labels[0] else "beta"
        assert all(part.startswith(prefix) for part in c["name"].split(" · "))


def test_check_points_and_cluster_counts():
    assert maps.check_points("100", 3000) == 100
    with pytest.raises(MirrorError):
        maps.check_points(5, 3000)
    with pytest.raises(MirrorError):
        maps.check_points("many", 3000)
    assert (
        maps.n_clusters_for(3000) == maps.MAX_CLUSTERS
        and maps.n_clusters_for(100) == 7
        and maps.n_clusters_for(60) == 5
    )


# ------------------------------------------------------------------------------------------------------ moved


def test_a_string_moved_to_another_group_ranks_first_with_what_it_gained_and_lost():
    # three tight groups of 11; string 0 sits in group A under the base and in group B after tuning
    base = clustered(3, 11, seed=8)
    tuned = base.copy()
    tuned[0] = base[11] + 0.01  # now inside group B (rows 11..21)
    texts = [f"s{i}" for i in range(33)]
    rows = moved.neighbour_changes(texts, base, tuned, k=10)
    first = rows[0]
    assert first["text"] == "s0" and first["moved"] == 1.0
    group_a, group_b = {f"s{i}" for i in range(1, 11)}, {f"s{i}" for i in range(11, 22)}
    assert set(first["lost"]) == group_a and set(first["base_neighbours"]) == group_a
    assert set(first["gained"]) <= group_b and len(first["gained"]) == 10
    assert first["gained"] == first["tuned_neighbours"] and first["gained"][0] == "s11"  # nearest first
    assert all(r["moved"] <= 0.2 for r in rows[1:])  # the others lost or gained s0 at most
    untouched = [r for r in rows if r["text"] in {f"s{i}" for i in range(22, 33)}]
    assert all(r["moved"] == 0 and r["gained"] == r["lost"] == [] for r in untouched)


def test_moved_ties_keep_input_order_and_top_k_never_returns_the_string_itself():
    vecs = np.ones((5, 4), dtype=np.float32)  # identical vectors: every order is a tie
    ids = moved.top_k(vecs, 10)
    assert ids.shape == (5, 4) and all(i not in row for i, row in enumerate(ids))
    rows = moved.neighbour_changes(list("abcde"), vecs, vecs)
    assert [r["text"] for r in rows] == list("abcde") and all(r["moved"] == 0 for r in rows)
    assert moved.neighbour_changes(["alone"], vecs[:1], vecs[:1]) == []


def test_filter_rows_ignores_case_and_spacing():
    rows = [{"text": t} for t in ("New York", "new  york city", "Boston")]
    assert [r["text"] for r in moved.filter_rows(rows, "  NEW   york ")] == ["New York", "new  york city"]
    assert moved.filter_rows(rows, "") == rows and moved.filter_rows(rows, None) == rows
    assert moved.filter_rows(rows, "paris") == []


def test_moved_csv_has_a_header_and_one_ranked_row_per_string():
    rows = [
        {"text": 'say "hi", ok', "moved": 0.5, "gained": ["a", "b"], "lost": ["c"]},
        {"text": "plain", "moved": 0.0, "gained": [], "lost": []},
    ]
    parsed = list(csv.reader(io.StringIO(moved.moved_csv(rows))))
    assert parsed == [
        ["rank", "string", "moved", "gained", "lost"],
        ["1", 'say "hi", ok', "0.50", "a | b", "c"],
        ["2", "plain", "0.00", "", ""],
    ]


# ------------------------------------------------------------------------------------------------------ health


def test_identical_vectors_have_mean_cosine_one_and_uniformity_zero():
    h = health.space_health(np.tile([[3.0, 4.0, 0.0]], (6, 1)))
    assert h["mean_cosine"] == pytest.approx(1.0) and h["uniformity"] == pytest.approx(0.0)
    assert "alignment" not in h


def test_orthonormal_vectors_have_mean_cosine_zero_and_uniformity_minus_four():
    h = health.space_health(np.eye(5) * 2.5)  # scale does not matter: rows are made unit
    assert h["mean_cosine"] == pytest.approx(0.0, abs=1e-12)
    assert h["uniformity"] == pytest.approx(-4.0)  # every pair at squared distance 2: log exp(-2·2)


def test_health_against_a_hand_computed_small_case():
    # unit vectors at 0°, 90° and 180°: cosines 0, -1, 0; squared distances 2, 4, 2
    vecs = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    anchors = np.array([[1.0, 0.0], [0.0, 1.0]])
    positives = np.array([[1.0, 0.0], [1.0, 0.0]])  # one identical (0), one at 90° (squared distance 2)
    h = health.space_health(vecs, (anchors, positives))
    assert h["mean_cosine"] == pytest.approx(-1 / 3)
    assert h["uniformity"] == pytest.approx(math.log((2 * math.exp(-4) + math.exp(-8)) / 3))
    assert h["alignment"] == pytest.approx(1.0)


def test_health_samples_large_inputs_and_needs_two_strings():
    big = np.random.default_rng(0).normal(size=(300, 8))
    assert health.space_health(big, sample=50) == health.space_health(big, sample=50)  # seeded
    assert math.isnan(health.space_health(big[:1])["mean_cosine"])


def test_positive_views_mask_long_strings_and_swap_letters_in_short_ones():
    long = "a sentence of well over thirty characters in all"
    views = health.positive_views([long, "house", "cat", "tree"], "[MASK]", seed=1)
    assert "[MASK]" in views[0] and len(views[0]) == len(long) - 5 + len("[MASK]")
    at = views[0].index("[MASK]")
    assert views[0][:at] == long[:at] and views[0][at + 6 :] == long[at + 5 :]
    assert "[MASK]" not in views[1] and sorted(views[1]) == sorted("house") and views[1] != "house"
    assert views[1][0] == "h" and views[1][-1] == "e"  # inner letters only
    assert [i for i, (a, b) in enumerate(zip(views[1], "house", strict=True)) if a != b] in ([1, 2], [2, 3])
    assert views[2] == "cat"  # under 4 characters: unchanged
    assert health.positive_views([long], "<mask>", seed=1)[0].count("<mask>") == 1
    assert health.positive_views([long, "house"], "[MASK]", seed=1) == views[:2]  # seeded


def test_compare_health_reads_a_spread_out_space_as_what_tuning_aims_for():
    rng = np.random.default_rng(0)
    narrow = np.ones((40, 8)) + 0.1 * rng.normal(size=(40, 8))
    wide = rng.normal(size=(40, 8))
    noisy, close = narrow + 0.3 * rng.normal(size=(40, 8)), wide + 0.01 * rng.normal(size=(40, 8))
    out = health.compare_health(narrow, wide, (narrow, noisy), (wide, close))
    assert out["labels"] == health.LABELS and set(out["base"]) == set(out["tuned"]) == set(health.LABELS)
    assert "spread your strings out" in out["summary"] and "closer to itself" in out["summary"]
    assert "what contrastive tuning aims for" in out["summary"]
    same = health.compare_health(wide, wide)
    assert "kept the overall spread" in same["summary"] and "aims for" not in same["summary"]


def test_place_puts_laid_out_rows_where_they_were_and_the_rest_at_their_neighbours():
    from explorer.compare import layout

    vecs = maps._unit(clustered(4, 30, seed=7))
    keep = np.arange(0, 120, 3)  # a third laid out
    xy_keep = np.random.default_rng(0).normal(size=(len(keep), 2))
    out = layout.place(vecs, keep, xy_keep)
    np.testing.assert_allclose(out[keep], xy_keep)
    twin = np.vstack([vecs, vecs[keep[5]]])  # a row equal to a laid-out one lands on it
    np.testing.assert_allclose(layout.place(twin, keep, xy_keep)[-1], xy_keep[5], atol=1e-6)
    rest = np.setdiff1d(np.arange(120), keep)
    group = rest // 30  # each placed row sits inside the box of its own group's laid-out rows
    for r, g in zip(rest, group, strict=True):
        mine = xy_keep[keep // 30 == g]
        assert (mine.min(0) - 1e-9 <= out[r]).all() and (out[r] <= mine.max(0) + 1e-9).all()


def test_past_sample_max_a_sample_is_laid_out_and_the_rest_placed(monkeypatch):
    from explorer.compare import layout

    calls = []

    def fake_umap(x, knn, **kw):  # PCA instead of UMAP: this checks the sampling, not UMAP
        calls.append(len(x))
        return maps.pca_2d(x)

    monkeypatch.setattr(layout, "umap_layout", fake_umap)
    monkeypatch.setattr(layout, "SAMPLE_MAX", 50)
    base, tuned = maps._unit(clustered(4, 30, seed=1)), maps._unit(clustered(4, 30, seed=2))
    xy_base, xy_tuned = layout.twin_layouts(base, tuned)
    assert calls == [50, 50] and xy_base.shape == xy_tuned.shape == (120, 2)
    assert np.isfinite(xy_base).all() and np.isfinite(xy_tuned).all()
