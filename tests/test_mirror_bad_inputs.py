"""Bad input to the command lines: `python -m mirror train` on the upload corpus (tests/upload_corpus.py), size and
count limits, bad settings, and `python -m index` on bad queries and folders. Each ends with exit code 2 and one
line on stderr, and writes nothing; the odd-but-valid files train.

(The same corpus through the app: tests/test_app_ui.py and tests/test_explorer_inputs.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mirror.__main__ import main as mirror_main
from tests.conftest import ROOT, WORDS
from tests.upload_corpus import BAD_UPLOADS, GOOD_UPLOADS, LONG, write


@pytest.mark.parametrize("case", list(BAD_UPLOADS))
def test_bad_upload_exits_2_with_one_line_from_the_cli(tiny_bert, tmp_path, capsys, case):
    name, content, _, says = BAD_UPLOADS[case]
    out = tmp_path / "out"
    code = mirror_main(["train", str(write(tmp_path, name, content)), "--out", str(out), "--model", str(tiny_bert)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert says in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    "case", ["utf16-le-bom", "latin-1", "nul-and-control-chars", "emoji-cjk-rtl", "10000-char-line"]
)
def test_odd_but_valid_uploads_train_from_the_cli(tiny_bert, tmp_path, capsys, case):
    name, content, expected = GOOD_UPLOADS[case]
    out = tmp_path / "out"
    argv = ["train", str(write(tmp_path, name, content)), "--out", str(out), "--model", str(tiny_bert)]
    assert mirror_main([*argv, "--quiet", "--max-steps", "1", "--batch-size", "4", "--device", "cpu"]) == 0
    assert f"input: {len(expected)} strings" in capsys.readouterr().out
    assert (out / "model.safetensors").is_file() and json.loads((out / "mirror_config.json").read_text())["stats"]


def test_cli_size_and_count_limits_exit_2_and_are_off_by_default(tiny_bert, tmp_path, capsys):
    from index.__main__ import main as index_main

    big = write(tmp_path, "big.txt", "\n".join(f"word{i}" for i in range(300)).encode())  # 2,289 bytes
    out = tmp_path / "out"
    train = ["train", str(big), "--out", str(out), "--model", str(tiny_bert), "--quiet", "--device", "cpu"]
    build = ["build", "--encoder", str(tiny_bert), "--input", str(big), "--out", str(tmp_path / "idx"), "--quiet"]
    for main, argv in [(mirror_main, train), (index_main, build)]:
        for limit, says in [
            (["--max-strings", "299"], "big.txt: 300 distinct strings is over the limit of 299"),
            (["--max-mb", "0.001"], "big.txt: 2.3 KiB is over the limit of 1.0 KiB"),
            (["--max-mb", "0"], "--max-mb must be > 0"),
            (["--max-strings", "0"], "--max-strings must be >= 1"),
        ]:
            assert main([*argv, *limit]) == 2, limit
            err = capsys.readouterr().err
            assert err.startswith("error: ") and says in err and err.count("\n") == 1, err
        assert not out.exists() and not (tmp_path / "idx").exists()
    assert mirror_main([*train, "--max-steps", "1", "--batch-size", "8", "--max-strings", "300"]) == 0
    assert index_main(build) == 0  # no limit unless given
    assert (out / "model.safetensors").is_file() and (tmp_path / "idx").is_dir()


def test_the_cli_as_a_program_exits_2_with_one_line_for_a_bad_file(tmp_path):
    path = write(tmp_path, "deep.jsonl", BAD_UPLOADS["jsonl-nested-past-the-stack"][1])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "mirror", "train", str(path), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert run.returncode == 2 and run.stdout == "", run.stderr
    assert run.stderr == (
        "error: deep.jsonl: line 1 is not usable JSON (RecursionError: maximum recursion depth exceeded while "
        "decoding a JSON array from a unicode string)\n"
    )


def test_cli_bad_settings_exit_2_and_a_long_max_length_works(tiny_bert, tmp_path, capsys):
    words = write(tmp_path, "w.txt", f"{LONG}\ncat\ndog\n".encode())
    base = ["train", str(words), "--out", str(tmp_path / "o"), "--model", str(tiny_bert), "--quiet"]
    for flags, says in [
        (["--epochs", "-1"], "epochs must be >= 1"),
        (["--temperature", "nan"], "temperature must be a finite number, got nan"),
        (["--max-steps", "0"], "max steps must be >= 1"),
        (["--max-length", "100000"], "max length must be <= 8192, got 100000"),
        (["--model", "a" * 5000], "is not a model name: use 'bundled' or a Hugging Face id"),
        (["--model", "a" * 300], "cannot read this model folder (File name too long)"),  # too long for an id
        (["--model", "/" + "a" * 300], "cannot read this model folder (File name too long)"),
        (["--out", str(words)], "exists and is not a folder"),
        (["--out", "/proc/no-model-here"], "cannot create or write there"),
    ]:
        assert mirror_main(base + flags) == 2, flags
        err = capsys.readouterr().err
        assert err.startswith("error: ") and says in err and err.count("\n") == 1 and len(err) < 400, err
    with pytest.raises(SystemExit) as exc:
        mirror_main(base + ["--pooling", "max"])
    assert exc.value.code == 2 and "invalid choice: 'max'" in capsys.readouterr().err
    # a max length past the model's 128 positions (but within the engine's range) is capped, not an index error
    assert mirror_main(base + ["--max-length", "8192", "--max-steps", "1", "--batch-size", "3"]) == 0


def test_index_cli_bad_input(tiny_bert, tmp_path, capsys):
    from index.__main__ import main as index_main

    words = write(tmp_path, "w.txt", "\n".join(WORDS).encode())
    folder = tmp_path / "idx"
    assert (
        index_main(["build", "--encoder", str(tiny_bert), "--input", str(words), "--out", str(folder), "--quiet"]) == 0
    )
    capsys.readouterr()
    for argv, says in [
        (["query", str(folder), "  "], "query 1 is empty"),
        (["query", str(folder), "cat", "-k", "0"], "-k must be a positive integer"),
        (["query", str(tmp_path), "cat"], "not an index folder"),
        (["build", "--input", str(write(tmp_path, "e.txt", b"\n \n")), "--out", str(tmp_path / "x")], "no non-empty"),
        (["build", "--input", str(words), "--out", "/proc/no-index-here"], "cannot create or write there"),
    ]:
        assert index_main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and says in err and "Traceback" not in err, err
    # a 100k-character query is truncated by the tokenizer; an undecodable argv byte (a lone surrogate) is replaced
    assert index_main(["query", str(folder), "x" * 100_000, "caf\udce9", "-k", "2", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert [len(q["hits"]) for q in hits] == [2, 2]
