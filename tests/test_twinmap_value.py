"""ui.twinmap.twin_map_value: the service's twin-map dict -> the component's compact value (no browser)."""

from __future__ import annotations

import math

import pytest

from mirror.errors import MirrorError
from tests.twinmap_data import synthetic_twin_map
from ui.twinmap import PALETTE, TwinMap, twin_map_value


def test_points_become_parallel_arrays_in_order():
    data = synthetic_twin_map(30, 3, seed=1)
    v = twin_map_value(data)
    pts = data["points"]
    assert v["texts"] == [p["text"] for p in pts]
    assert v["ids"] == [p["i"] for p in pts]
    assert len(v["base"]) == len(v["tuned"]) == 2 * len(pts)
    for k in (0, 7, 29):
        assert v["base"][2 * k : 2 * k + 2] == pytest.approx(pts[k]["base"], abs=1e-4)
        assert v["tuned"][2 * k : 2 * k + 2] == pytest.approx(pts[k]["tuned"], abs=1e-4)
    assert v["bc"] == [p["base_cluster"] for p in pts] and v["tc"] == [p["tuned_cluster"] for p in pts]
    assert v["moved"] == pytest.approx([p["moved"] for p in pts], abs=1e-4)
    assert [c["name"] for c in v["clusters"]["tuned"]] == [c["name"] for c in data["clusters"]["tuned"]]
    assert v["queries"][0]["text"] == "a query" and v["method"] == "umap"
    assert (v["n_total"], v["n_shown"], v["note"]) == (80, 30, data["note"])
    assert twin_map_value(v) is v  # already built: passed through


def test_bad_colours_missing_clusters_and_out_of_range_moved_are_repaired():
    data = synthetic_twin_map(12, 3)
    data["clusters"]["base"][1]["colour"] = "red; background:url(x)"
    del data["clusters"]["tuned"][2]  # points still name tuned cluster 2
    data["points"][0]["moved"] = 3.0
    data["points"][1]["moved"] = float("nan")
    v = twin_map_value(data)
    assert v["clusters"]["base"][1]["colour"] == PALETTE[1]
    assert [c["id"] for c in v["clusters"]["tuned"]] == [0, 1, 2]
    assert v["moved"][0] == 1.0 and v["moved"][1] == 0.0


def test_empty_none_and_bad_input():
    assert twin_map_value(None) is None
    assert twin_map_value({"points": [], "note": "too few strings"}) == {"texts": [], "note": "too few strings"}
    bad = synthetic_twin_map(5, 2)
    bad["points"][3]["tuned"] = [math.inf, 0.0]
    with pytest.raises(MirrorError, match="point 1003 tuned"):
        twin_map_value(bad)
    bad["points"][3]["tuned"] = [1.0]
    with pytest.raises(MirrorError, match="pair of numbers"):
        twin_map_value(bad)
    with pytest.raises(MirrorError):
        twin_map_value(["not", "a", "dict"])


def test_component_postprocesses_the_service_dict_and_loads_its_assets():
    tm = TwinMap(map_height=300, render=False)
    assert "pointScreenXY" in tm.js_on_load and ".tm-map" in tm.css_template
    assert tm.props["map_height"] == 300
    v = tm.postprocess(synthetic_twin_map(10, 2))
    assert len(v["texts"]) == 10
    assert tm.postprocess(None) is None
    assert "${" not in tm.html_template and "`" not in tm.html_template + tm.css_template  # JS template literals
