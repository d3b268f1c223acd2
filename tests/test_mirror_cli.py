"""The `python -m mirror` command line: train and eval, and exit code 2 with a clear message on bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mirror.__main__ import main
from tests.conftest import ROOT


@pytest.fixture
def words_file(tmp_path):
    path = tmp_path / "words.txt"
    path.write_text("cat\ndog\ncar\nbus\n\ncat\nred\nblue\n")
    return path


def test_train_writes_a_loadable_model_and_summary(tiny_bert, words_file, tmp_path, capsys):
    out = tmp_path / "tuned"
    code = main(
        [
            "train",
            str(words_file),
            "--out",
            str(out),
            "--model",
            str(tiny_bert),
            "--quiet",
            "--epochs",
            "3",
            "--pooling",
            "mean",
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "6 strings (8 lines, 1 empty dropped, 1 duplicates removed)" in text
    assert ", so the words preset" in text and "3/3 steps" in text
    meta = json.loads((out / "mirror_config.json").read_text())
    assert meta["config"]["epochs"] == 3 and meta["config"]["pooling"] == "mean" and meta["stats"]["steps"] == 3
    # the app's model card (the same builder), and every file with the usual permissions (safetensors wrote 0600)
    from mirror.card import model_card

    card = (out / "README.md").read_text()
    assert card == model_card(out) and "base_model" not in card.split("---")[1]  # a local base: no hub id
    assert "| epochs | 3 |" in card and "| steps | 3 of 3 |" in card
    umask = os.umask(0o022)
    os.umask(umask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in out.rglob("*")}
    assert modes["model.safetensors"] == 0o666 & ~umask, modes
    assert set(modes.values()) <= {0o666 & ~umask, 0o777 & ~umask}, modes
    assert out.stat().st_mode & 0o777 == 0o777 & ~umask


def test_eval_prints_spearman(tiny_bert, tmp_path, capsys):
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("# w1 w2 score\ncat dog 7\ncar bus 6\nred blue 5\ncat car 1\n")
    assert main(["eval", str(tiny_bert), str(pairs), "--json", "--device", "cpu"]) == 0
    result = json.loads(capsys.readouterr().out)[0]
    assert result["n"] == 4 and -1 <= result["spearman"] <= 1 and result["pooling"] == "cls"


def test_a_missing_model_folder_is_named_by_the_path_given(tmp_path, capsys):
    """Issue 52, Low row: `mirror eval /some/nonexist ...` named only `nonexist` (the server's rule, which never shows
    its paths); on the user's own machine the path is theirs."""
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("cat dog 7\ncar bus 6\nred blue 5\n")
    missing = tmp_path / "some" / "nonexist"
    for argv in (
        ["eval", str(missing), str(pairs)],
        ["check", str(missing)],
        ["export", str(missing), "--input", str(pairs), "--out", str(tmp_path / "x")],
    ):
        assert main(argv) == 2
        assert f"error: {missing}: no such model folder" in capsys.readouterr().err, argv


@pytest.mark.parametrize(
    "make,args,needle",
    [
        (lambda p: p.write_text(""), [], "need at least 2 distinct"),
        (lambda p: p.write_text("  \n\t\n"), [], "need at least 2 distinct"),
        (lambda p: p.write_text("solo\nsolo\n"), [], "need at least 2 distinct"),
        (lambda p: p.write_bytes("日本語\nテスト\n".encode("shift_jis")), [], "not UTF-8"),
        (lambda p: p.write_text("a\nb\n"), ["--epochs", "0"], "epochs must be >= 1"),
        (lambda p: p.write_text("a\nb\n"), ["--batch-size", "1"], "batch size must be >= 2"),
        (lambda p: p.write_text("a\nb\n"), ["--temperature", "0"], "temperature must be >= 0.001"),
        (lambda p: p.write_text("a\nb\n"), ["--temperature", "1e-30"], "temperature must be >= 0.001"),
        (lambda p: p.write_text("a\nb\n"), ["--lr", "inf"], "learning rate must be a finite number, got inf"),
        (lambda p: p.write_text("a\nb\n"), ["--lr", "nan"], "learning rate must be a finite number, got nan"),
        (lambda p: p.write_text("a\nb\n"), ["--lr", "1e30"], "learning rate must be <= 1, got 1e+30"),
        (lambda p: p.write_text("a\nb\n"), ["--seed", str(10**20)], "seed must be <= 4294967295"),
        (lambda p: p.write_text("a\nb\n"), ["--epochs", "1000000000"], "epochs must be <= 1000"),
        (lambda p: p.write_text("a\nb\n"), ["--max-length", "100000"], "max length must be <= 8192"),
        (lambda p: p.write_text("a\nb\n"), ["--model", "no-such-org/no-such-model"], "offline"),
        (lambda p: p.write_text("a\nb\n"), ["--model", "./missing/folder"], "no such model folder"),
        (lambda p: p.write_text("a\nb\n"), ["--model", "a" * 5000], "is not a model name"),
        (lambda p: p.write_text("a\nb\n"), ["--model", "org/na;me"], "is not a valid Hugging Face model id"),
    ],
)
def test_bad_input_exits_2_with_a_message(tiny_bert, tmp_path, capsys, make, args, needle):
    path = tmp_path / "in.txt"
    make(path)
    argv = ["train", str(path), "--out", str(tmp_path / "out"), "--quiet"]
    if "--model" not in args:
        argv += ["--model", str(tiny_bert)]
    assert main(argv + args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_unknown_pooling_is_rejected_by_argparse(words_file, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", str(words_file), "--out", str(tmp_path / "o"), "--pooling", "max"])
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_python_dash_m_mirror_runs_as_a_program(tiny_bert, words_file, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "mirror",
            "train",
            str(words_file),
            "--out",
            str(tmp_path / "m"),
            "--model",
            str(tiny_bert),
            "--max-steps",
            "1",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert "1/1 steps" in ok.stdout and "step" in ok.stderr  # summary on stdout, progress bar on stderr
    bad = subprocess.run(
        [sys.executable, "-m", "mirror", "train", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert bad.returncode == 2 and "error: " in bad.stderr and "no such file" in bad.stderr


def snapshot(folder) -> dict[str, bytes]:
    """Every file under `folder` and its bytes: to check a refused --out was left exactly as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda d: (d / "notes.md").write_text("my notes\n"), id="notes"),
        pytest.param(lambda d: (d / "meta.json").write_text("{}"), id="an-index"),
        pytest.param(lambda d: (d / "sub").mkdir() or (d / "sub" / "x.bin").write_bytes(b"\0\1"), id="a-subfolder"),
    ],
)
def test_train_refuses_an_out_folder_it_did_not_write_and_leaves_it_as_it_was(tiny_bert, words_file, tmp_path, make):
    out = tmp_path / "foreign"
    out.mkdir()
    make(out)
    before = snapshot(out)
    argv = ["train", str(words_file), "--out", str(out), "--model", str(tiny_bert), "--quiet", "--max-steps", "1"]
    result = subprocess.run(
        [sys.executable, "-m", "mirror", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"error: --out {out}: exists and is not a model folder written by mirror; choose a new or empty folder\n"
    )
    assert snapshot(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["foreign", "words.txt"]


def test_train_refuses_the_input_files_own_folder(tiny_bert, words_file, tmp_path, capsys):
    before = snapshot(tmp_path)
    argv = ["train", str(words_file), "--out", str(tmp_path), "--model", str(tiny_bert), "--quiet"]
    assert main(argv) == 2
    assert "is not a model folder written by mirror" in capsys.readouterr().err
    assert snapshot(tmp_path) == before and [p.name for p in tmp_path.iterdir()] == ["words.txt"]


def test_train_refuses_an_input_file_as_out(tiny_bert, words_file, tmp_path, capsys):
    before = words_file.read_bytes()
    assert main(["train", str(words_file), "--out", str(words_file), "--model", str(tiny_bert), "--quiet"]) == 2
    assert "exists and is not a folder" in capsys.readouterr().err and words_file.read_bytes() == before


def test_train_writes_into_an_empty_folder_and_replaces_its_own_model(tiny_bert, words_file, tmp_path, capsys):
    out = tmp_path / "m"
    out.mkdir()
    argv = ["train", str(words_file), "--out", str(out), "--model", str(tiny_bert), "--quiet", "--max-steps", "1"]
    assert main(argv) == 0
    first = json.loads((out / "mirror_config.json").read_text())
    assert main([*argv, "--seed", "7"]) == 0  # a folder mirror wrote: replaced
    second = json.loads((out / "mirror_config.json").read_text())
    assert (first["config"]["seed"], second["config"]["seed"]) == (42, 7)


def test_save_encoder_refuses_a_foreign_folder(tiny_bert, tmp_path):
    from mirror.encoder import load_encoder, save_encoder
    from mirror.errors import MirrorError

    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(MirrorError, match="is not a model folder written by mirror"):
        save_encoder(load_encoder(tiny_bert), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("flag,value", [("--seed", "1e20"), ("--epochs", "two"), ("--lr", "fast")])
def test_a_flag_value_of_the_wrong_type_is_exit_2_with_a_message(words_file, tmp_path, flag, value):
    result = subprocess.run(
        [sys.executable, "-m", "mirror", "train", str(words_file), "--out", str(tmp_path / "o"), flag, value],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"error: argument {flag}: invalid" in result.stderr and repr(value) in result.stderr
    assert not (tmp_path / "o").exists()


def test_a_run_whose_last_step_breaks_the_weights_exits_2_and_saves_nothing(
    tiny_bert, words_file, tmp_path, capsys, monkeypatch
):
    """`--lr inf` used to pass: the one step's loss is computed before the update, which then writes nan into
    every weight, and that model was saved. The range check now refuses it; with the check switched off, the
    check after the last step still does."""
    from mirror.config import MirrorConfig

    monkeypatch.setattr(MirrorConfig, "validated", lambda self: self)
    out = tmp_path / "out"
    argv = ["train", str(words_file), "--out", str(out), "--model", str(tiny_bert), "--quiet", "--lr", "inf"]
    assert main([*argv, "--max-steps", "1", "--precision", "fp32"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the loss became nan: the weights are no longer finite after step 1;"), err
    assert not out.exists()


def test_train_with_index_writes_the_apps_run_folder_and_it_answers_queries(tiny_bert, words_file, tmp_path, capsys):
    """`train --index` runs the web app's job (mirror.job): model/ plus an index per encoder."""
    from index.store import VectorIndex
    from mirror.encoder import load_encoder

    out = tmp_path / "run"
    args = ["train", str(words_file), "--out", str(out), "--model", str(tiny_bert), "--index", "--quiet"]
    assert main([*args, "--max-steps", "2", "--device", "cpu"]) == 0
    assert f"python -m index query {out / 'tuned_index'}" in capsys.readouterr().out
    tuned = load_encoder(out / "model")
    index = VectorIndex.load(out / "tuned_index", tuned, gpu=False)
    assert sorted(index.texts) == ["blue", "bus", "car", "cat", "dog", "red"]
    assert index.search(["cat"], 6)[0][0].text == "cat"
    base = VectorIndex.load(out / "base_index", load_encoder(str(tiny_bert)), gpu=False)
    assert len(base) == 6
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine")
    assert main(["train", str(words_file), "--out", str(notes), "--model", str(tiny_bert), "--index"]) == 2
    assert [p.name for p in notes.iterdir()] == ["todo.txt"]


def test_train_plan_prints_the_steps_the_run_takes_and_writes_nothing(tiny_bert, words_file, tmp_path, capsys):
    """Issue 59: `train --plan` prints the run's plan (mirror.plan.RunPlan) and exits 0 without training; without
    --plan, --out is still needed. A pairs file split for memory with held-out rows: tests/test_mirror_plan_steps.py."""
    out = tmp_path / "tuned"
    args = ["train", str(words_file), "--model", str(tiny_bert), "--quiet", "--device", "cpu", "--epochs", "3"]
    assert main(args) == 2
    assert "--out is required" in capsys.readouterr().err
    assert main([*args, "--out", str(out), "--plan"]) == 0
    shown = capsys.readouterr().out
    assert "plan: 3 steps: 3 epochs of 6 training strings" in shown and "memory: every batch fits" in shown
    assert "held out" not in shown and "time: not timed" in shown and not out.exists()
    assert main([*args, "--out", str(out)]) == 0
    assert "3/3 steps" in capsys.readouterr().out
