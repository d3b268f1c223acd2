"""mirror.exports (Projector TSV, Parquet, neighbours CSV, the zip of all three), the model card (explorer.share.card),
the download names, and `python -m mirror export`, on synthetic vectors with known neighbours."""

from __future__ import annotations

import csv
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from mirror.errors import MirrorError
from mirror.exports import export_bundle

TEXTS = ["cat", "kitten", "dog", "puppy", "car", "bus", "tab\there", "two\nlines"]


def vectors(seed: int = 0, dim: int = 6) -> np.ndarray:
    """Pairs of near-identical unit rows (0-1, 2-3, ...): each string's nearest neighbour is its pair."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(len(TEXTS) // 2, dim))
    x = np.repeat(centres, 2, axis=0) + 0.01 * rng.normal(size=(len(TEXTS), dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


BASE, TUNED = vectors(0), vectors(1)
META = {"moved": [round(0.1 * i, 4) for i in range(len(TEXTS))]}
COORDS = {
    k: [float(i + j) for i in range(len(TEXTS))] for j, k in enumerate(["base_x", "base_y", "tuned_x", "tuned_y"])
}


def export(tmp_path: Path, fmt: str, **kw) -> Path:
    kw = {"rows": None, "metadata": META, "coords": COORDS, "prefix": "mirror-abc", **kw}
    return export_bundle(TEXTS, BASE, TUNED, tmp_path / "out", fmt=fmt, **kw)


def test_projector_tsv_shapes_and_safe_texts(tmp_path):
    path = export(tmp_path, "projector")
    assert path.name == "mirror-abc-projector.zip"
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        assert {
            f"mirror-abc/mirror-abc-{n}" for n in ("base-vectors.tsv", "tuned-vectors.tsv", "metadata.tsv")
        } <= names
        base = np.loadtxt(io.StringIO(zf.read("mirror-abc/mirror-abc-base-vectors.tsv").decode()), delimiter="\t")
        tuned = np.loadtxt(io.StringIO(zf.read("mirror-abc/mirror-abc-tuned-vectors.tsv").decode()), delimiter="\t")
        meta = zf.read("mirror-abc/mirror-abc-metadata.tsv").decode().splitlines()
    assert base.shape == tuned.shape == (len(TEXTS), 6)
    np.testing.assert_allclose(base, BASE, atol=1e-6)
    assert meta[0] == "text\tmoved" and len(meta) == len(TEXTS) + 1  # a header: two columns
    assert all(line.count("\t") == 1 for line in meta)
    assert meta[7] == "tab here\t0.6" and meta[8] == "two lines\t0.7"


def test_parquet_reads_back_with_pyarrow_and_pandas(tmp_path):
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = export(tmp_path, "parquet")
    assert path.name == "mirror-abc.parquet"
    table = pq.read_table(path)
    assert table.column_names == [
        "row", "text", "moved", "base_embedding", "tuned_embedding",
        "base_x", "base_y", "tuned_x", "tuned_y", "x", "y",
    ]  # fmt: skip
    assert table.schema.field("tuned_embedding").type == pa.list_(pa.float32())
    df = pd.read_parquet(path)
    assert df["text"].tolist() == TEXTS and df["moved"].tolist() == META["moved"]
    np.testing.assert_array_equal(np.stack(df["tuned_embedding"].to_numpy()), TUNED)
    np.testing.assert_array_equal(np.stack(df["base_embedding"].to_numpy()), BASE)
    assert df["x"].tolist() == COORDS["tuned_x"] and df["base_y"].tolist() == COORDS["base_y"]


def test_parquet_without_a_full_map_has_no_coordinates(tmp_path):
    import pandas as pd

    df = pd.read_parquet(export(tmp_path, "parquet", coords=None))
    assert "x" not in df.columns and "base_x" not in df.columns and len(df) == len(TEXTS)


def test_neighbours_csv_finds_each_strings_pair_first(tmp_path):
    path = export(tmp_path, "neighbours")
    rows = list(csv.DictReader(path.open(encoding="utf-8", newline="")))
    assert len(rows) == len(TEXTS) * 7  # k = min(10, n - 1) rows per string
    first = [r for r in rows if r["rank"] == "1"]
    assert [r["base_neighbour"] for r in first] == [TEXTS[i ^ 1] for i in range(len(TEXTS))]
    assert [r["tuned_neighbour"] for r in first] == [TEXTS[i ^ 1] for i in range(len(TEXTS))]
    assert all(r["string"] != r["base_neighbour"] for r in rows)  # never the string itself
    scores = [float(r["tuned_score"]) for r in rows if r["row"] == "0"]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0.99
    assert first[7]["string"] == "two\nlines"  # CSV quotes it: the text survives as it was


def test_a_selection_exports_only_those_rows_but_searches_all(tmp_path):
    import pandas as pd

    df = pd.read_parquet(export(tmp_path, "parquet", rows=[5, 2]))
    assert df["row"].tolist() == [5, 2] and df["text"].tolist() == ["bus", "dog"]
    rows = list(csv.DictReader(export(tmp_path, "neighbours", rows=[2]).open(encoding="utf-8")))
    assert {r["string"] for r in rows} == {"dog"} and rows[0]["base_neighbour"] == "puppy"
    with zipfile.ZipFile(export(tmp_path, "projector", rows=[0, 1, 2])) as zf:
        meta = zf.read("mirror-abc/mirror-abc-metadata.tsv").decode().splitlines()
        vecs = zf.read("mirror-abc/mirror-abc-tuned-vectors.tsv").decode().splitlines()
    assert len(meta) == 4 and len(vecs) == 3
    with pytest.raises(MirrorError, match="outside"):
        export(tmp_path, "parquet", rows=[99])


def test_all_is_one_zip_with_a_readme(tmp_path):
    path = export(tmp_path, "all")
    assert path.name == "mirror-abc-all.zip"
    with zipfile.ZipFile(path) as zf:
        names = sorted(n.split("/", 1)[1] for n in zf.namelist())
        readme = zf.read("mirror-abc/README.txt").decode()
    assert names == [
        "README.txt",
        "mirror-abc-base-vectors.tsv",
        "mirror-abc-metadata.tsv",
        "mirror-abc-neighbours.csv",
        "mirror-abc-tuned-vectors.tsv",
        "mirror-abc.parquet",
    ]
    assert "projector.tensorflow.org" in readme and "embedding-atlas mirror-abc.parquet" in readme
    assert "pd.read_parquet" in readme
    assert "--x x --y y" in readme  # a map was drawn: its coordinates are offered first


def test_the_readme_of_an_export_without_a_map_offers_only_what_it_holds(tmp_path):
    """The command line's export has no x, y: `embedding-atlas --x x --y y` would open an empty map."""
    with zipfile.ZipFile(export(tmp_path, "all", coords=None)) as zf:
        readme = zf.read("mirror-abc/README.txt").decode()
    assert "--x x" not in readme and "--text text --vector tuned_embedding" in readme
    assert "no map coordinates" in readme and "base_x" not in readme


def test_bad_inputs_are_refused(tmp_path):
    with pytest.raises(MirrorError, match="unknown export"):
        export(tmp_path, "xlsx")
    with pytest.raises(MirrorError, match="one row per string"):
        export_bundle(TEXTS, BASE[:3], TUNED, tmp_path, fmt="parquet")
    with pytest.raises(MirrorError, match="'moved' has 2 values"):
        export(tmp_path, "parquet", metadata={"moved": [0, 1]})


# ------------------------------------------------------------------------------ through the service


def test_run_explorer_export_serves_files_of_the_run(app, tuned):
    path = app.explore.export(tuned, "all")
    assert path.is_file() and tuned.run.folder in path.parents
    assert path.name == f"mirror-{tuned.run.folder.name[:12]}-all.zip"
    sel = app.explore.export(tuned, "parquet", [0, 3])
    import pandas as pd

    assert pd.read_parquet(sel)["row"].tolist() == [0, 3]


# ------------------------------------------------------------------------------ the model card and download names

FORGETTING = {
    "checks": [
        {"name": "SimLex-999", "what": "word similarity", "pairs": 500, "base": 44.6, "tuned": 53.6, "delta": 9.0,
         "ci": [6.1, 12.0], "verdict": "better", "worse": False},
        {"name": "Long texts", "what": "long texts", "pairs": 120, "base": 70.0, "tuned": 61.0, "delta": -9.0,
         "ci": [-12.5, -5.0], "verdict": "worse", "worse": True},
    ],
    "verdict": "Tuning made the model worse on 1 general check: Long texts.",
}  # fmt: skip


def saved_folder(tmp_path: Path, model: str = "bundled", **extra) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    config = {"mode": "words", "model": model, "pooling": "mean", "temperature": 0.2, "lr": 2e-5, "batch_size": 200}
    stats = {"strings": 411, "steps": 6, "total_steps": 6, "seconds": 2.61, "device": "cpu", "first_loss": 5.1,
             "final_loss": 1.9243}  # fmt: skip
    (folder / "mirror_config.json").write_text(json.dumps({"config": config, "stats": stats, **extra}))
    return folder


def front_matter(card: str) -> dict:
    import yaml

    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_the_card_names_base_settings_data_and_the_forgetting_table(tmp_path):
    from explorer.share.card import model_card, write_card

    folder = saved_folder(tmp_path)
    card = model_card(folder, {"forgetting": FORGETTING, "blend_alpha": 0.5}, repo_id="me/words")
    meta = front_matter(card)
    assert meta["library_name"] == "sentence-transformers" and meta["pipeline_tag"] == "sentence-similarity"
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert meta["tags"] == ["sentence-transformers", "sentence-similarity", "mirror-bert"]
    assert "Liu et al." in card and "| temperature τ | 0.2 |" in card and "| batch size (strings) | 200 |" in card
    assert "| strings | 411 |" in card and "2.6 s on cpu" in card and "5.1 → 1.924" in card
    assert "| SimLex-999 | word similarity | Spearman ×100 | 500 | 44.6 | 53.6 | +9.0 [+6.1, +12.0] | better |" in card
    assert "| Long texts |" in card and "| worse |" in card and FORGETTING["verdict"] in card
    assert "α = 0.5" in card and 'SentenceTransformer("me/words")' in card
    path = write_card(folder, {"forgetting": FORGETTING})
    assert path == folder / "README.md" and "## Did tuning forget anything?" in path.read_text()


def test_a_card_without_checks_and_a_local_base_shows_no_server_path(tmp_path):
    from explorer.share.card import model_card

    card = model_card(saved_folder(tmp_path, model="/srv/secret/models/my-bert"))
    assert "base_model" not in front_matter(card) and "/srv/secret" not in card and "`my-bert`" in card
    assert "forget" not in card and "α" not in card


@pytest.mark.checks
def test_a_tuned_runs_zips_carry_the_card_and_are_named_for_base_and_run(app, tuned):
    run = tuned.run
    short = Path(run.base_model).name
    assert run.model_zip.name == f"mirror-{short}-{run.folder.name[:12]}-model.zip"
    assert run.index_zip.name == f"mirror-{short}-{run.folder.name[:12]}-index.zip"
    with zipfile.ZipFile(run.model_zip) as zf:
        card = zf.read("mirror-model/README.md").decode()
        assert "mirror-model/modules.json" in zf.namelist()
    assert "library_name: sentence-transformers" in card and f"| strings | {run.n_texts} |" in card
    # the general checks ran before the downloads were made: the card in the zip has their table
    assert run.stats["forgetting"] and "## Did tuning forget anything?" in card and "SimLex-999" in card
    assert "| Long documents |" in card and "graded nDCG@10" in card  # the real-documents check is in it too
    with zipfile.ZipFile(run.index_zip) as zf:
        assert all(n.startswith("mirror-index/") for n in zf.namelist())


# ------------------------------------------------------------------------------ the API handlers (ui/api.py)


def test_explore_api_handlers_on_the_clients_run_and_on_a_kept_run(app, tuned):
    import gradio as gr

    import app as mx

    fns = {f.name: f.fn for f in mx.build_demo(app).fns.values()}
    path, same = fns["api_export"]("parquet", [0, 2], "", tuned)
    import pandas as pd

    assert same is tuned and pd.read_parquet(path)["row"].tolist() == [0, 2]
    rows, _ = fns["api_moved"]("", 3, "", tuned)
    assert len(rows) == 3 and {"text", "moved", "gained", "lost"} <= set(rows[0])
    found, _ = fns["api_neighbours"]("cat", 3, "", tuned)
    assert found[0]["query"] == "cat" and all(h["text"] != "cat" for h in found[0]["tuned"])
    health, _ = fns["api_health"]("", tuned)
    assert json.dumps(health, default=float)

    # another client (no run of its own) reaches the kept run by its id; its session still serves nothing
    other = app.session()
    rows, same = fns["api_moved"]("ca", 500, tuned.run.folder.name, other)
    assert same is other and other.run is None and all("ca" in r["text"] for r in rows) and rows
    path, _ = fns["api_export"]("neighbours", None, tuned.run.folder.name, other)
    assert Path(path).name.endswith("-neighbours.csv")
    with pytest.raises(gr.Error, match="unknown export 'xlsx'"):
        fns["api_export"]("xlsx", None, "", tuned)
    with pytest.raises(gr.Error, match="not a run id"):
        fns["api_health"]("../../etc", other)
    with pytest.raises(gr.Error, match="Nothing to explore yet"):
        fns["api_health"]("", app.session())
    with pytest.raises(gr.Error, match="paste a Hugging Face access token"):
        fns["api_push"]("me/x", "", True, "", tuned)


# ------------------------------------------------------------------------------ python -m mirror export


def test_the_cli_exports_a_tuned_folder_against_the_base_it_names(tuned, tiny_bert, tmp_path, capsys):
    from mirror.__main__ import main

    strings = tmp_path / "strings.txt"
    strings.write_text("cat\ndog\ncar\nbus\nred\nblue\n")
    model = tuned.run.folder / "model"
    assert main(["export", str(model), "--input", str(strings), "--format", "all", "--out", str(tmp_path / "x")]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.parent == tmp_path / "x" and path.name.endswith("-model-all.zip")
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        meta = next(zf.read(n).decode() for n in names if n.endswith("-metadata.tsv")).splitlines()
    assert len(names) == 6 and meta[0] == "text\tmoved" and len(meta) == 7
    out = tmp_path / "y"
    assert main(["export", str(model), "--input", str(strings), "--format", "parquet", "--out", str(out)]) == 0
    assert [p.suffix for p in out.iterdir()] == [".parquet"]

    # a plain (untuned) folder names no base: error, exit 2
    assert main(["export", str(tiny_bert), "--input", str(strings), "--out", str(tmp_path / "z")]) == 2
    err = capsys.readouterr().err
    assert "\nerror: " in "\n" + err and "give --base" in err and str(tmp_path) not in err
    with pytest.raises(SystemExit) as exit_:  # argparse's own refusal: exit 2 too
        main(["export", str(model), "--input", str(strings), "--format", "xlsx", "--out", str(out)])
    assert exit_.value.code == 2


# Attack review, disk: repeated exports (from the run's session or from anyone holding its link) used to write a new
# timestamped folder each time, kept for the run's TTL and charged to nobody.
def test_a_repeated_export_is_one_file_whoever_asks(app, tuned):
    import dataclasses

    from explorer.resources.accounts import disk_usage

    folder = tuned.run.folder
    by_link = dataclasses.replace(app.session(), run=app.runs.load(folder.name))  # as ui.api.explore_call makes it
    before = disk_usage(folder)
    first = app.explore.export(tuned, "all")
    one = disk_usage(folder) - before
    assert one > 0 and not [p for p in first.parent.iterdir() if p != first]  # the zip only, not its loose files too
    paths = {app.explore.export(s, "all") for s in [by_link, tuned] * 4}
    assert paths == {first} and disk_usage(folder) - before == one
    assert len(list((folder / "exports").iterdir())) == 1
    assert app.explore.export(by_link, "all", [0, 2]) != first  # another selection is another file


def test_a_runs_exports_stay_within_its_budget_oldest_first(app, tuned):
    import dataclasses

    from explorer.resources.accounts import disk_usage

    folder = tuned.run.folder
    first = app.explore.export(tuned, "parquet", [0])
    size = disk_usage(first.parent)
    held = app.accounts.usage().by_visitor[tuned.owner.visitor]  # the visitor's runs and sessions, this export too
    app.settings = dataclasses.replace(app.settings, visitor_disk_bytes=held + size)  # room for 2
    made = [first] + [app.explore.export(tuned, "parquet", [i]) for i in (1, 2, 3)]
    kept = sorted(p.name for p in (folder / "exports").iterdir())
    assert not made[0].exists() and not made[1].exists() and made[3].exists()  # the oldest went first
    assert len(kept) <= 2 and app.accounts.usage().by_visitor[tuned.owner.visitor] <= app.settings.visitor_disk_bytes
    app.settings = dataclasses.replace(app.settings, visitor_disk_bytes=held - size)
    with pytest.raises(MirrorError, match="past"):  # one that cannot fit even alone is refused, nothing left
        app.explore.export(tuned, "all")
    assert not [p for p in (folder / "exports").iterdir() if p.name.startswith("all-")]


def test_a_full_disk_removes_exports_before_it_refuses_and_never_a_run(app, tuned):
    import dataclasses

    app.explore.export(tuned, "all")
    app.explore.export(tuned, "parquet")
    exports_dir = tuned.run.folder / "exports"
    assert len(list(exports_dir.iterdir())) == 2
    app.settings = dataclasses.replace(app.settings, disk_bytes=1)  # far over: the writer is refused
    with pytest.raises(MirrorError, match="MIRROR_DISK_MB"):
        app.check_disk(app.session())
    assert list(exports_dir.iterdir()) == [] and (tuned.run.folder / "run.json").is_file()  # exports can be made again
    assert app.searcher.search(tuned, "cat", 2)[0]["tuned"]


def test_an_export_of_a_run_opened_by_its_link_goes_to_the_openers_own_folder(app, tuned):
    """Issue 37: a link gives read access only; what its opener writes is theirs, not the run's."""
    import dataclasses

    from explorer.resources.accounts import Owner, disk_usage

    folder = tuned.run.folder
    before = disk_usage(folder)
    stranger = app.sessions.get(None, Owner("stranger", "10.9.9.9"))
    app.saved.open_run(stranger, folder.name)
    path = app.explore.export(stranger, "parquet")
    moved = app.explore.moved_csv(stranger, "")
    assert path.is_relative_to(stranger.folder) and moved.is_relative_to(stranger.folder)
    assert disk_usage(folder) == before and not (folder / "exports").exists()
    assert app.accounts.usage().by_visitor["stranger"] >= disk_usage(path)
    # within the stranger's own budget, its older exports of the run go first
    held = app.accounts.usage().by_visitor["stranger"]
    app.settings = dataclasses.replace(app.settings, visitor_disk_bytes=held - 1)  # full: room is made first
    newer = app.explore.export(stranger, "parquet", [0, 1])
    assert newer.is_file() and not path.exists() and moved.exists()  # the oldest (the first parquet) went
