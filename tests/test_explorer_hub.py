"""explorer.share.hub against a fake Hub on 127.0.0.1 (tests/fake_hub.py): push a model with its card, a refused token,
nothing listening, bad ids and sizes; read a dataset column (Parquet, CSV, splits, limits)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from explorer.share import hub
from mirror.errors import MirrorError
from tests.fake_hub import FakeHub

TOKEN = "hf_goodtoken123"


@pytest.fixture
def online(monkeypatch):
    """huggingface_hub allowed to make requests (the suite runs with HF_HUB_OFFLINE=1)."""
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def fake(online, monkeypatch):
    with FakeHub(tokens={TOKEN}) as fake:
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        yield fake


def model_folder(tmp_path: Path) -> Path:
    """A folder shaped like a saved tuned model (the files a push looks for and some weights)."""
    folder = tmp_path / "model"
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "modules.json").write_text("[]")
    (folder / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 8)
    config = {"config": {"model": "bundled", "mode": "words", "temperature": 0.2}, "stats": {"strings": 14}}
    (folder / "mirror_config.json").write_text(json.dumps(config))
    return folder


def test_push_creates_a_private_repo_with_the_files_and_the_card(fake, tmp_path):
    folder = model_folder(tmp_path)
    url = hub.push_model(folder, "me/my-words", TOKEN, private=True, max_bytes=10**6)
    assert url == f"{fake.url}/me/my-words"
    repo = fake.repos["me/my-words"]
    assert repo["private"] and repo["visibility"] == "private" and repo["type"] == "model"
    files = repo["files"]
    assert set(files) == {
        "README.md",
        "modules.json",
        "1_Pooling/config.json",
        "model.safetensors",
        "mirror_config.json",
    }
    assert files["model.safetensors"] == (folder / "model.safetensors").read_bytes()
    card = files["README.md"].decode()
    assert (
        "library_name: sentence-transformers" in card and "base_model: sentence-transformers/all-MiniLM-L6-v2" in card
    )
    assert 'SentenceTransformer("me/my-words")' in card  # the usage snippet names the repository
    assert (folder / "README.md").is_file()  # the card was written into the folder first
    writes = [r for r in fake.requests if r["method"] == "POST" and "validate-yaml" not in r["path"]]
    assert writes and all(r["authorization"] == f"Bearer {TOKEN}" for r in writes)

    hub.push_model(folder, "me/public-one", TOKEN, private=False, max_bytes=10**6)
    assert fake.repos["me/public-one"]["visibility"] == "public"
    hub.push_model(folder, "me/my-words", TOKEN, private=True, max_bytes=10**6)  # again: one more commit, no error
    assert len(fake.repos["me/my-words"]["commits"]) == 2


def test_a_refused_token_is_a_clear_error_without_the_token(fake, tmp_path):
    with pytest.raises(MirrorError, match="refused the token") as err:
        hub.push_model(model_folder(tmp_path), "me/x", "hf_wrong_secret", max_bytes=10**6)
    assert "hf_wrong_secret" not in str(err.value) and "me/x" not in fake.repos


def test_nothing_listening_is_could_not_reach(online, monkeypatch, tmp_path):
    from tests.server import free_port

    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(MirrorError, match="could not reach the Hugging Face Hub") as err:
        hub.push_model(model_folder(tmp_path), "me/x", TOKEN, max_bytes=10**6)
    assert TOKEN not in str(err.value) and str(tmp_path) not in str(err.value)
    with pytest.raises(MirrorError, match="could not reach the Hugging Face Hub"):
        hub.load_hub_dataset("me/words", "text", max_rows=10, max_bytes=10**6)


def test_offline_mode_is_could_not_reach(monkeypatch, tmp_path):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(MirrorError, match="could not reach the Hugging Face Hub: this server has no internet access"):
        hub.push_model(model_folder(tmp_path), "me/x", TOKEN, max_bytes=10**6)


@pytest.mark.parametrize(
    ("repo", "token", "message"),
    [
        ("", TOKEN, "name the repository"),
        ("../etc/passwd", TOKEN, "not a valid Hub repository id"),
        ("https://evil.example/x", TOKEN, "not a valid Hub repository id"),
        ("me/x", "", "paste a Hugging Face access token"),
        ("me/x", "hf_ two words", "does not look like"),
    ],
)
def test_bad_ids_and_tokens_are_refused_before_any_request(fake, tmp_path, repo, token, message):
    with pytest.raises(MirrorError, match=message):
        hub.push_model(model_folder(tmp_path), repo, token, max_bytes=10**6)
    assert fake.requests == []


def test_an_oversized_or_missing_model_is_refused(fake, tmp_path):
    with pytest.raises(MirrorError, match="pushes models up to"):
        hub.push_model(model_folder(tmp_path), "me/x", TOKEN, max_bytes=100)
    with pytest.raises(MirrorError, match="no tuned model to push"):
        hub.push_model(tmp_path / "nothing", "me/x", TOKEN, max_bytes=10**6)
    assert fake.requests == []


# ------------------------------------------------------------------------------ datasets


def parquet_bytes(**columns) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf)
    return buf.getvalue()


def test_a_dataset_column_is_read_through_the_fake(fake):
    fake.datasets["me/words"] = {
        "README.md": b"# words",
        "data/train-00000-of-00002.parquet": parquet_bytes(text=["cat", "dog", None], label=[1, 2, 3]),
        "data/train-00001-of-00002.parquet": parquet_bytes(text=["car", "bus", "sun"], label=[4, 5, 6]),
        "data/test-00000-of-00001.parquet": parquet_bytes(text=["moon"], label=[7]),
    }
    raw, notes = hub.load_hub_dataset("me/words", "text", max_rows=100, max_bytes=10**6)
    assert raw == ["cat", "dog", "car", "bus", "sun"] and notes == []
    raw, _ = hub.load_hub_dataset("me/words", "text", "test", max_rows=100, max_bytes=10**6)
    assert raw == ["moon"]
    raw, notes = hub.load_hub_dataset("me/words", "text", max_rows=2, max_bytes=10**6)
    assert raw == ["cat", "dog"] and any("1 of 2 data files" in n for n in notes)
    with pytest.raises(MirrorError, match="no column 'sentence'; its columns: text, label"):
        hub.load_hub_dataset("me/words", "sentence", max_rows=100, max_bytes=10**6)
    with pytest.raises(MirrorError, match="no data files for the split 'dev'; its splits: test, train"):
        hub.load_hub_dataset("me/words", "text", "dev", max_rows=100, max_bytes=10**6)
    with pytest.raises(MirrorError, match="reads up to"):
        hub.load_hub_dataset("me/words", "text", max_rows=100, max_bytes=100)
    with pytest.raises(MirrorError, match="the dataset me/none was not found on the Hugging Face Hub"):
        hub.load_hub_dataset("me/none", "text", max_rows=100, max_bytes=10**6)
    reads = [r for r in fake.requests if r["method"] == "GET"]
    assert reads and all(r["authorization"] is None for r in reads)  # anonymous: never a server's token


def test_csv_and_jsonl_datasets_reuse_the_upload_reader(fake):
    fake.datasets["me/csv"] = {"train.csv": b"id,sentence\n1,a cat sat\n2,a dog ran\n"}
    fake.datasets["me/jsonl"] = {"data/train.jsonl": b'{"text": "one"}\n{"text": "two"}\n'}
    assert hub.load_hub_dataset("me/csv", "sentence", max_rows=9, max_bytes=10**6)[0] == ["a cat sat", "a dog ran"]
    assert hub.load_hub_dataset("me/jsonl", "text", max_rows=9, max_bytes=10**6)[0] == ["one", "two"]


def test_the_service_loads_a_dataset_into_the_session(fake, app):
    fake.datasets["me/words"] = {"data/train-0.parquet": parquet_bytes(text=["cat", "dog", "car"])}
    s = app.session()
    info = app.loader.load_hub_dataset(s, "me/words", "text")
    assert info["strings"] == 3 and s.texts == ["cat", "dog", "car"] and info["source"] == "me/words · text"


def test_the_served_run_is_pushed_with_its_card(fake, app, tuned):
    url = app.explore.push(tuned, "me/tuned-run", TOKEN, private=True)
    files = fake.repos["me/tuned-run"]["files"]
    assert url.endswith("/me/tuned-run") and "model.safetensors" in files and "mirror_config.json" in files
    card = files["README.md"].decode()
    assert f"| strings | {tuned.run.n_texts} |" in card and "base_model" not in card  # a local base: no hub id
    import dataclasses

    app.settings = dataclasses.replace(app.settings, allow_hub=False)
    with pytest.raises(MirrorError, match="MIRROR_ALLOW_HUB is off"):
        app.explore.push(tuned, "me/tuned-run", TOKEN)


def test_weights_go_through_lfs_when_the_hub_asks_for_it(online, monkeypatch, tmp_path):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)  # the fake speaks LFS's basic transfer, not Xet
    with FakeHub(tokens={TOKEN}, lfs_suffixes=(".safetensors",)) as fake:
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        folder = model_folder(tmp_path)
        hub.push_model(folder, "me/lfs", TOKEN, max_bytes=10**6)
        files = fake.repos["me/lfs"]["files"]
    assert files["model.safetensors"] == (folder / "model.safetensors").read_bytes() and len(fake.lfs) == 1
    assert any(r["path"] == "/me/lfs.git/info/lfs/objects/batch" for r in fake.requests)
    assert [r["authorization"] for r in fake.requests if r["method"] == "PUT"] == [None]  # storage never sees it
    assert "README.md" in files


def test_a_parquet_column_that_inflates_too_far_is_refused(fake):
    fake.datasets["me/bomb"] = {"train.parquet": parquet_bytes(text=["a" * 10_000] * 200)}  # 2 MB of one letter
    assert len(fake.datasets["me/bomb"]["train.parquet"]) < 5_000
    with pytest.raises(MirrorError, match="holds over .* of text"):
        hub.load_hub_dataset("me/bomb", "text", max_rows=1000, max_bytes=50_000)
