"""`python -m index build|query`: outputs, JSON, and exit code 2 with a clear message on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import faiss
import pytest

from index.__main__ import main

faiss.omp_set_num_threads(1)

WORDS = ["cat", "dog", "car", "bus", "red", "blue", "big", "small"]


@pytest.fixture(scope="module")
def built(tiny_bert, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    words = folder / "words.txt"
    words.write_text("\n".join(WORDS + ["", "cat"]) + "\n")  # an empty line and a duplicate to clean
    out = folder / "idx"
    assert main(["build", "--encoder", str(tiny_bert), "--input", str(words), "--out", str(out), "--quiet"]) == 0
    return out


def test_build_writes_an_index_of_the_cleaned_strings(built):
    meta = json.loads((built / "meta.json").read_text())
    assert json.loads((built / "texts.json").read_text()) == WORDS
    assert meta["count"] == len(WORDS) and meta["index"]["type"] == "flat"


def test_build_reads_a_csv_column_and_takes_overrides(tiny_bert, tmp_path, capsys):
    table = tmp_path / "items.csv"
    table.write_text("id,name\n" + "".join(f"{i},item {i}\n" for i in range(100)))
    out = tmp_path / "idx"

    code = main(["build", "--encoder", str(tiny_bert), "--input", str(table), "--column", "name", "--out", str(out),
                 "--type", "ivf", "--nlist", "2", "--nprobe", "1", "--quiet"])  # fmt: skip

    assert code == 0, capsys.readouterr().err
    meta = json.loads((out / "meta.json").read_text())
    assert meta["count"] == 100 and meta["index"] | {"type": "ivf", "nlist": 2, "nprobe": 1} == meta["index"]
    assert "saved:" in capsys.readouterr().out


def test_query_json(built, capsys):
    assert main(["query", str(built), "cat", "big bus", "-k", "3", "--json"]) == 0

    payload = json.loads(capsys.readouterr().out)
    assert [p["query"] for p in payload] == ["cat", "big bus"]
    for p in payload:
        assert [h["rank"] for h in p["hits"]] == [1, 2, 3]
        assert all(WORDS[h["id"]] == h["text"] for h in p["hits"])
        scores = [h["score"] for h in p["hits"]]
        assert scores == sorted(scores, reverse=True)


def test_query_text_output_and_k_above_size(built, capsys):
    assert main(["query", str(built), "dog", "-k", "50"]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "query: dog"
    assert len(lines) == 1 + len(WORDS)  # every indexed string, once
    assert sorted(line.split()[-1] for line in lines[1:]) == sorted(WORDS)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["query", "{idx}", ""], "query 1 is empty"),
        (["query", "{idx}", "cat", "-k", "0"], "-k must be a positive integer"),
        (["query", "{tmp}", "cat"], "not an index folder"),
        (["query", "{idx}", "cat", "--nprobe", "3"], "nprobe applies to an IVF index"),
        (["query", "{idx}", "cat", "--encoder", "{roberta}"], "built with the encoder"),
        (["build", "--encoder", "{bert}", "--input", "{tmp}/missing.txt", "--out", "{tmp}/o"], "no such file"),
        (["build", "--encoder", "{bert}", "--input", "{tmp}/blank.txt", "--out", "{tmp}/o"], "no non-empty strings"),
        (["build", "--encoder", "{bert}", "--input", "{tmp}/data.bin", "--out", "{tmp}/o"], "unsupported file type"),
        (["build", "--encoder", "{tmp}/nope", "--input", "{tmp}/ok.txt", "--out", "{tmp}/o"], "no such model folder"),
        (["build", "--encoder", "{bert}", "--input", "{tmp}/ok.txt", "--out", "{tmp}"], "not an index folder"),
        (
            ["build", "--encoder", "{bert}", "--input", "{tmp}/ok.txt", "--out", "{tmp}/o", "--batch-size", "0"],
            "batch size",
        ),
        (
            ["build", "--encoder", "{bert}", "--input", "{tmp}/ok.txt", "--out", "{tmp}/o", "--nlist", "-2"],
            "nlist must be",
        ),
    ],
)
def test_bad_input_exits_2_with_a_message(argv, message, built, tiny_bert, tiny_roberta, tmp_path, capsys):
    (tmp_path / "blank.txt").write_text("\n  \n")
    (tmp_path / "data.bin").write_bytes(b"\x00\x01")
    (tmp_path / "ok.txt").write_text("cat\ndog\n")
    fill = {"idx": built, "tmp": tmp_path, "bert": tiny_bert, "roberta": tiny_roberta}

    code = main([a.format(**fill) for a in argv])

    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("error: ") and message in err
    assert "Traceback" not in err


def test_module_entry_point_runs(built):
    """`python -m index` is wired to main() (the only subprocess test: it costs an interpreter start)."""
    done = subprocess.run([sys.executable, "-m", "index", "query", str(built), ""], capture_output=True, text=True)
    assert done.returncode == 2 and "error: query 1 is empty" in done.stderr


# ---------------------------------------------------------------- the encoder's name in meta.json (issue 15)


def test_the_apps_zips_unpacked_side_by_side_query_without_encoder(app, tiny_bert, tmp_path, capsys):
    """The run's index zip names its model as `../mirror-model`: unzip both zips into one folder and
    `python -m index query mirror-index word` finds the tuned encoder; a changed model is refused (exit 2)."""
    import os
    import zipfile

    from tests.conftest import WORDS as TUNED_ON
    from tests.conftest import tuned_session

    run = tuned_session(app, tiny_bert).run
    out = tmp_path / "downloads"
    for zipped in (run.model_zip, run.index_zip):
        with zipfile.ZipFile(zipped) as zf:
            zf.extractall(out)
    meta = json.loads((out / "mirror-index" / "meta.json").read_text())
    encoder = meta["encoder"]
    assert encoder["path"] == "../mirror-model" and "absolute" not in encoder  # no server path in a download
    assert encoder["source"] == "../mirror-model"  # not "bundled", nor the server's path
    assert str(run.folder) not in (out / "mirror-index" / "meta.json").read_text()
    served = json.loads((run.folder / "tuned_index" / "meta.json").read_text())["encoder"]
    assert served["path"] == "../model" and served["fingerprint"] == encoder["fingerprint"]

    done = subprocess.run(
        [sys.executable, "-m", "index", "query", "mirror-index", "word", "-k", "3", "--json"],
        cwd=out,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert done.returncode == 0, done.stderr
    hits = json.loads(done.stdout)[0]["hits"]
    assert len(hits) == 3 and {h["text"] for h in hits} <= set(TUNED_ON)

    assert main(["query", str(out / "mirror-index"), "word", "-k", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3

    # the zip's README.txt: its sentence-transformers + FAISS snippet, run as written, finds the same hits
    readme = (out / "mirror-index" / "README.txt").read_text()
    block = readme.split("FAISS alone")[1].split("\n\n")[0].splitlines()[1:]
    snippet = "\n".join(line[4:] for line in block).replace('"your query"', '"word"').replace(", 10)", ", 3)")
    snippet = snippet.replace("print(", "print(json.dumps(") + ")"
    done = subprocess.run([sys.executable, "-c", snippet], cwd=out, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    plain = json.loads(done.stdout)
    assert [t for t, _ in plain] == [h["text"] for h in hits]
    assert max(abs(s - h["score"]) for (_, s), h in zip(plain, hits, strict=True)) < 1e-4

    weights = out / "mirror-model" / "model.safetensors"  # tamper: other weights under the same name
    from mirror.encoder import load_encoder, save_encoder

    other = load_encoder(tiny_bert)
    save_encoder(other, tmp_path / "other")
    weights.write_bytes((tmp_path / "other" / "model.safetensors").read_bytes())
    assert main(["query", str(out / "mirror-index"), "word"]) == 2
    err = capsys.readouterr().err
    assert "fingerprint" in err and "not comparable" in err and "Traceback" not in err


def test_the_index_zip_follows_the_folder_an_uploaded_model_zip_unpacks_to(tmp_path):
    import zipfile

    from explorer.share.uploads import model_folder_in_zip

    for names, folder in (
        (["mirror-model/config.json", "mirror-model/1_Pooling/config.json"], "mirror-model"),
        (["my model/modules.json", "my model/config.json"], "my model"),
        (["config.json", "model.safetensors"], "."),  # the model's files at the zip's top
    ):
        path = tmp_path / "m.zip"
        with zipfile.ZipFile(path, "w") as zf:
            for name in names:
                zf.writestr(name, "{}")
        assert model_folder_in_zip(path) == folder
