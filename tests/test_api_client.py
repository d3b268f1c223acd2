"""The named API endpoints (/train, /search) driven with gradio_client against `python app.py` in a subprocess."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tests.server import ROOT

WORDS = (ROOT / "examples" / "small_words.txt").read_text().split()[:50]
FAST = {"max_steps": 2, "batch_size": 16}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(bundled_server) -> str:
    return bundled_server  # the browser test's server (conftest): runs and clients here are their own sessions


@pytest.fixture(scope="module")
def client(server):
    from gradio_client import Client

    return Client(server, verbose=False)


def test_api_lists_the_named_endpoints(client):
    info = client.view_api(return_format="dict", print_info=False)
    assert {"/train", "/search"} <= set(info["named_endpoints"])
    params = [p["parameter_name"] for p in info["named_endpoints"]["/train"]["parameters"]]
    assert params == ["texts", "file", "column", "model", "mode", "settings", "pair_column"]  # pair_column: issue 50


def test_train_then_search_then_a_failed_run_keeps_the_model(client, server, tmp_path):
    summary, model_zip, index_zip = client.predict(texts="\n".join(WORDS), settings=FAST, api_name="/train")
    assert summary["steps"] == 2 and summary["strings"] == 50 and summary["base_model"] == "bundled"
    assert summary["mode"] == "words" and len(summary["losses"]) == 2 and not summary["cancelled"]
    with zipfile.ZipFile(model_zip) as zf:
        assert "mirror-model/modules.json" in zf.namelist()
    with zipfile.ZipFile(index_zip) as zf:
        assert "mirror-index/texts.json" in zf.namelist()

    results = client.predict(queries="kitten\npuppy", k=3, api_name="/search")
    assert [r["query"] for r in results] == ["kitten", "puppy"]
    for r in results:
        assert len(r["tuned"]) == len(r["base"]) == 3
        assert {"rank", "text", "score", "only_here"} <= set(r["tuned"][0])
        assert all(h["text"] in WORDS for h in r["tuned"] + r["base"])

    # bad input: a clear error, and the model trained above is still served
    with pytest.raises(Exception, match="learning rate must be > 0"):
        client.predict(texts="\n".join(WORDS), settings={**FAST, "lr": -1}, api_name="/train")
    with pytest.raises(Exception, match="unknown setting 'learning_rate'"):
        client.predict(texts="\n".join(WORDS), settings={"learning_rate": 1}, api_name="/train")
    with pytest.raises(Exception, match="k must be between 1 and 50"):
        client.predict(queries="kitten", k=500, api_name="/search")
    assert client.predict(queries="kitten", k=2, api_name="/search")[0]["tuned"]

    # another client is another session: it sees no model
    from gradio_client import Client

    other = Client(server, verbose=False)
    with pytest.raises(Exception, match="Nothing to search yet"):
        other.predict(queries="kitten", k=2, api_name="/search")


def test_train_from_an_uploaded_csv_with_a_column(client, tmp_path):
    from gradio_client import handle_file

    table = tmp_path / "terms.csv"
    table.write_text("id,term\n" + "".join(f"{i},{w}\n" for i, w in enumerate(WORDS[:30])))
    summary, _, _ = client.predict(file=handle_file(str(table)), column="term", settings=FAST, api_name="/train")
    assert summary["strings"] == 30 and summary["steps"] == 2
    hits = client.predict(queries=WORDS[0], k=1, api_name="/search")[0]["tuned"]
    assert hits[0]["text"] == WORDS[0]
    bad = tmp_path / "notes.pdf"
    bad.write_bytes(b"%PDF-1.4")
    with pytest.raises(Exception, match="unsupported file type"):
        client.predict(file=handle_file(str(bad)), settings=FAST, api_name="/train")
    assert Path(table).exists()


def test_the_explore_endpoints_on_this_clients_run_and_on_a_kept_run(server, tmp_path):
    import pandas as pd
    from gradio_client import Client

    client = Client(server, verbose=False)
    info = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert {"/map", "/export", "/moved", "/neighbours", "/health", "/push"} <= set(info)
    assert [p["parameter_name"] for p in info["/export"]["parameters"]] == ["fmt", "rows", "run"]
    summary, _, _ = client.predict(texts="\n".join(WORDS), settings=FAST, api_name="/train")
    parquet = client.predict(fmt="parquet", api_name="/export")
    df = pd.read_parquet(parquet)
    assert len(df) == 50 and {"text", "moved", "base_embedding", "tuned_embedding"} <= set(df.columns)
    with zipfile.ZipFile(client.predict(fmt="all", rows=[0, 1, 2], api_name="/export")) as zf:
        assert any(n.endswith("README.txt") for n in zf.namelist())
    rows = client.predict(filter="", limit=5, api_name="/moved")
    assert len(rows) == 5 and rows[0]["moved"] >= rows[-1]["moved"]
    assert client.predict(text=WORDS[0], k=3, api_name="/neighbours")[0]["query"] == WORDS[0]
    assert client.predict(api_name="/health")
    # the map: a seeded sample of 40 of the 50 strings (PCA under 50: no UMAP compile here), both maps, and says so
    twin = client.predict(n=40, queries="kitten", api_name="/map")
    assert (twin["n_shown"], twin["n_total"], len(twin["base"]), len(twin["tuned"])) == (40, 50, 40, 40)
    assert len(set(twin["ids"])) == 40 and set(twin["texts"]) <= set(WORDS) and "sample of 40" in twin["note"]
    assert twin["queries"][0]["text"] == "kitten" and len(twin["queries"][0]["tuned"]) == 2
    assert twin["caption"].startswith("Run `") and "run" not in twin  # named by the UI; the run itself stays
    with pytest.raises(Exception, match="between 10 and"):
        client.predict(n=5, api_name="/map")

    other = Client(server, verbose=False)  # another client: the kept run by its id
    assert len(other.predict(filter="", limit=3, run=summary["run_id"], api_name="/moved")) == 3
    with pytest.raises(Exception, match="paste a Hugging Face access token"):
        other.predict(repo="me/x", token="", run=summary["run_id"], api_name="/push")
