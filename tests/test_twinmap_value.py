"""ui.twinmap.twin_map_value: the service's twin-map dict -> the component's compact value (base64 typed arrays, one
array of texts) and back (decode_value, what the page reads); no browser."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mirror.errors import MirrorError
from tests.twinmap_data import synthetic_twin_map
from ui.twinmap import PALETTE, TwinMap, decode_value, twin_map_value


def test_columns_travel_as_typed_arrays_and_decode_to_the_same_numbers():
    data = synthetic_twin_map(30, 3, seed=1)
    v = twin_map_value(data)
    assert v["n"] == 30 and v["texts"] == data["texts"]
    assert all(isinstance(v[c], str) for c in ("ids", "base", "tuned", "bc", "tc", "moved"))  # base64, not lists
    back = decode_value(v)
    assert list(back["ids"]) == list(data["ids"])
    np.testing.assert_allclose(back["base"], data["base"], rtol=1e-6, atol=1e-5)  # float32
    np.testing.assert_allclose(back["tuned"], data["tuned"], rtol=1e-6, atol=1e-5)
    assert list(back["bc"]) == list(data["base_cluster"]) and list(back["tc"]) == list(data["tuned_cluster"])
    np.testing.assert_allclose(back["moved"], data["moved"], atol=0.5 / 255 + 1e-9)  # one byte per string
    assert [c["name"] for c in v["clusters"]["tuned"]] == [c["name"] for c in data["clusters"]["tuned"]]
    assert v["queries"][0]["text"] == "a query" and v["method"] == "umap"
    assert (v["n_total"], v["n_shown"], v["note"]) == (80, 30, data["note"])
    assert twin_map_value(v) is v  # already built: passed through


def test_twenty_thousand_strings_are_a_compact_value():
    """The positions, ids, clusters and moved of 20k strings: ~0.5 MB of JSON, not one object per point."""
    data = synthetic_twin_map(20_000, 5)
    v = twin_map_value(data)
    columns = {k: x for k, x in v.items() if k != "texts"}
    size = len(json.dumps(columns))
    # id (4 bytes), 4 float32 (16), 2 cluster ids (4), moved (1): 25 bytes a string, x 4/3 in base64
    assert 20_000 * 25 * 4 / 3 <= size < 20_000 * 36


def test_bad_colours_missing_clusters_and_out_of_range_moved_are_repaired():
    data = synthetic_twin_map(12, 3)
    data["clusters"]["base"][1]["colour"] = "red; background:url(x)"
    del data["clusters"]["tuned"][2]  # points still name tuned cluster 2
    data["moved"] = data["moved"].copy()
    data["moved"][0] = 3.0
    data["moved"][1] = float("nan")
    v = twin_map_value(data)
    assert v["clusters"]["base"][1]["colour"] == PALETTE[1]
    assert [c["id"] for c in v["clusters"]["tuned"]] == [0, 1, 2]
    moved = decode_value(v)["moved"]
    assert moved[0] == 1.0 and moved[1] == 0.0


def test_empty_none_and_bad_input():
    assert twin_map_value(None) is None
    assert twin_map_value({"texts": [], "note": "too few strings"}) == {"n": 0, "texts": [], "note": "too few strings"}
    bad = synthetic_twin_map(5, 2)
    bad["tuned"] = bad["tuned"].copy()
    bad["tuned"][3] = [math.inf, 0.0]
    with pytest.raises(MirrorError, match="point 3 tuned"):
        twin_map_value(bad)
    bad["tuned"] = [[1.0]] * 5
    with pytest.raises(MirrorError, match="one value per string|pairs of numbers"):
        twin_map_value(bad)
    short = synthetic_twin_map(5, 2)
    short["moved"] = short["moved"][:3]
    with pytest.raises(MirrorError, match="one value per string"):
        twin_map_value(short)
    with pytest.raises(MirrorError):
        twin_map_value(["not", "a", "dict"])


def test_component_postprocesses_the_service_dict_and_loads_its_assets():
    tm = TwinMap(map_height=300, render=False)
    assert "pointScreenXY" in tm.js_on_load and ".tm-map" in tm.css_template
    assert "regl-scatterplot.min.js" in tm.head  # the vendored library, from this server
    assert "http" not in tm.head  # no CDN
    assert tm.props["map_height"] == 300
    v = tm.postprocess(synthetic_twin_map(10, 2))
    assert v["n"] == 10 and len(v["texts"]) == 10
    assert tm.postprocess(None) is None
    assert "${" not in tm.html_template and "`" not in tm.html_template + tm.css_template  # JS template literals
