"""Faults in the engine: a save that fails or is killed halfway leaves the previous model whole, and the first
models loaded in parallel threads do not race. Faults are injected by monkeypatching the one function that fails
(a weights writer), never by stubbing the code under test.

(The same faults inside the app, which must keep serving its previous run: tests/test_explorer_service.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys

from mirror.__main__ import main as mirror_main
from tests.conftest import ROOT, WORDS, digest, half_written_weights
from tests.upload_corpus import write


def test_a_crash_while_saving_keeps_the_old_model_folder(tiny_bert, tmp_path, capsys, monkeypatch):
    from mirror.encoder import load_encoder

    words = write(tmp_path, "w.txt", "\n".join(WORDS).encode())
    out = tmp_path / "tuned"
    argv = ["train", str(words), "--out", str(out), "--model", str(tiny_bert), "--quiet", "--max-steps", "1"]
    assert mirror_main(argv) == 0
    before, fingerprint = digest(out), load_encoder(out).fingerprint()
    half_written_weights(monkeypatch)
    assert mirror_main([*argv, "--seed", "7"]) == 2
    err = capsys.readouterr().err
    assert f"could not save the model to {out} (No space left on device); nothing was changed there" in err
    assert digest(out) == before and load_encoder(out).fingerprint() == fingerprint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tuned", "w.txt"]  # no temp folder left behind


KILLED_WHILE_SAVING = """
import os, sys
from pathlib import Path
from transformers import PreTrainedModel
from mirror.encoder import load_encoder, save_encoder

enc = load_encoder(sys.argv[1])
real = PreTrainedModel.save_pretrained
def save_pretrained(self, folder, *args, **kwargs):
    real(self, folder, *args, **kwargs)
    weights = Path(folder) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    os._exit(9)  # killed halfway: no exception handler, no cleanup
PreTrainedModel.save_pretrained = save_pretrained
save_encoder(enc, sys.argv[2])
"""


def test_a_process_killed_while_saving_leaves_the_old_model_loadable(tiny_bert, tmp_path):
    """Even a kill (no cleanup runs) leaves `out` whole: the new model is written to a temp folder and only
    renamed into place once complete, so a later load never sees the half-written one."""
    from mirror.encoder import load_encoder, save_encoder

    out = tmp_path / "model"
    save_encoder(load_encoder(tiny_bert), out)
    before, fingerprint = digest(out), load_encoder(out).fingerprint()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-c", KILLED_WHILE_SAVING, str(tiny_bert), str(out)],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert run.returncode == 9, run.stderr[-2000:]
    assert digest(out) == before and load_encoder(out).fingerprint() == fingerprint
    leftovers = [p for p in tmp_path.iterdir() if p.name != "model"]
    assert [p.name.startswith(".model.tmp-") for p in leftovers] == [True]  # dot-named, never loaded as `model`


RACE = """
import sys, threading
from mirror.encoder import load_encoder

errors = []
def load(model):
    try:
        load_encoder(model)
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=load, args=(m,)) for m in ["bundled", sys.argv[1], sys.argv[1], "bundled"]]
[t.start() for t in threads]
[t.join() for t in threads]
print(errors)
"""


def test_first_model_loads_in_parallel_threads_do_not_race(tiny_bert):
    """A fresh server warms its model up while the first requests load theirs: transformers' lazy import used to
    fail with "cannot import name 'AutoConfig'" in one of the threads."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-c", RACE, str(tiny_bert)], env=env, capture_output=True, text=True, timeout=180
    )
    assert run.returncode == 0 and run.stdout.strip() == "[]", run.stdout + run.stderr[-2000:]
