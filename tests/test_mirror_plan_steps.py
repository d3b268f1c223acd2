"""Issue 59, "the plan is not the run": one plan (mirror.plan.RunPlan) counts a run's steps, and `python -m mirror train
--plan`, the app's estimate and the run itself agree on a pairs file whose long rows split their batches to fit the
memory budget and whose held-out rows never train."""

from __future__ import annotations

import json
import random
import re

import pytest

from mirror import MirrorConfig
from mirror.__main__ import main
from mirror.encoder import load_encoder
from mirror.pairs import clean_pairs
from mirror.plan import step_budget
from tests.conftest import LETTERS, VOCAB_WORDS

MB = 1024**2
# the CLI's flags and the config they make: the sentences preset for pairs, 2 epochs of batches of 16
FLAGS = ["--device", "cpu", "--precision", "fp32", "--batch-size", "16", "--epochs", "2", "--min-steps", "0"]
FLAGS += ["--mode", "sentences"]
SETTINGS = {"device": "cpu", "precision": "fp32", "batch_size": 16, "epochs": 2, "min_steps": 0}


def rows() -> tuple[list[str], list[str]]:
    """96 names, each with a short partner, every fifth a long one (~180 tokens: cut at the pairs' max length)."""
    rng = random.Random(3)
    names = [f"{a} {b} {c}" for a in VOCAB_WORDS[:8] for b in VOCAB_WORDS[4:10] for c in ("cat", "dog")]
    partners = [
        " ".join(rng.choice(LETTERS[:26]) * 3 for _ in range(60)) if i % 5 == 0 else " ".join(reversed(n.split()))
        for i, n in enumerate(names)
    ]
    return names, partners


@pytest.fixture
def pairs_csv(tmp_path):
    names, partners = rows()
    path = tmp_path / "glossary.csv"
    path.write_text("name,text\n" + "\n".join(f"{n},{p}" for n, p in zip(names, partners, strict=True)) + "\n")
    return path


def config_of(tiny_bert) -> MirrorConfig:
    return MirrorConfig.preset("sentences", model=str(tiny_bert), pairs=True, **SETTINGS)


def budget_mb(tiny_bert) -> int:
    """A budget (MB) that holds 6 strings padded to 128 tokens in a step, not 16: batches with a long partner split."""
    config = config_of(tiny_bert)
    plan = step_budget(load_encoder(tiny_bert), config, 1 << 40, paired=True)
    mb = (plan.static + plan.cost(6, 128)) // MB + 1
    assert plan.static + plan.cost(16, 128) > mb * MB
    return mb


def test_the_plan_s_steps_are_the_run_s_on_pairs_split_for_memory_with_held_out_rows(tiny_bert, pairs_csv, capsys):
    mb = budget_mb(tiny_bert)
    args = ["train", str(pairs_csv), "--column", "name", "--pair-column", "text", "--model", str(tiny_bert), *FLAGS]
    args += ["--memory-mb", str(mb), "--quiet"]
    assert main([*args, "--plan"]) == 0  # no --out: a plan writes nothing
    shown = capsys.readouterr().out
    planned = int(re.search(r"^plan: (\d+) steps: 2 epochs of 76 training strings", shown, re.M).group(1))
    assert "; 20 rows held out of training" in shown
    split = int(re.search(r"^memory: (\d+) batches of long strings split to fit the", shown, re.M).group(1))
    assert split > 0 and "time: not timed" in shown
    out = pairs_csv.parent / "model"
    assert not out.exists()

    assert main([*args, "--out", str(out)]) == 0  # the run itself
    ran = capsys.readouterr().out
    stats = json.loads((out / "mirror_config.json").read_text())["stats"]
    assert stats["pairs"]["held_out"] == 20 and stats["strings"] == 76
    assert planned == stats["steps"] == stats["total_steps"]
    assert planned > 2 * 5  # 76 strings in batches of 16: 5 a epoch before any split
    assert f"note: {split} batches of long strings were split to fit" in ran


def test_the_app_s_estimate_plans_the_steps_the_app_s_run_takes(tiny_bert, tmp_path, monkeypatch):
    """The estimate is given the session's strings, held-out rows and all (their second views: each partner, or the
    string): it plans without the held-out rows, and splits what the run splits."""
    from explorer.tune import estimate as est_mod
    from explorer.tune.estimate import Calibration, Estimator, Fit
    from index.store import FolderIndexes
    from mirror.job import Finished, tune_and_index

    names, partners = rows()
    texts, kept, _, _ = clean_pairs(names, partners)  # the session's strings and partners
    config, budget = config_of(tiny_bert), budget_mb(tiny_bert) * MB
    free = Calibration(Fit(0.01, 0.0), Fit(0.01, 0.0), 0.0, 0.0, 0.0, 0.0, 0.0, "test")
    monkeypatch.setattr(Estimator, "calibration", lambda self, *a, **k: (free, False))
    monkeypatch.setattr(est_mod, "checks_price", lambda *a: 0.0)
    base = load_encoder(tiny_bert, device="cpu")
    second = [t if p is None else p for t, p in zip(texts, kept, strict=True)]
    est = Estimator(tmp_path / "scratch").estimate(
        texts, "key", config, "cpu", 1, base, budget, check_encoders=0, train_texts=second
    )
    events: list = []
    tune_and_index(
        texts, config, tmp_path / "run", indexes=FolderIndexes(), emit=events.append, memory=budget, pairs=kept
    )
    stats = next(e for e in events if isinstance(e, Finished)).stats
    assert stats["pairs"]["held_out"] == 20 and any("split to fit" in n for n in stats["notes"])
    assert est.steps == stats["steps"] == stats["total_steps"]


def test_a_pairs_plan_schedules_its_epochs_on_the_rows_that_train(tiny_bert, tmp_path):
    """A newcomer's second visitor saw "50 steps … 2 epochs of 25" (the rough guess while another run trained) for a
    run of 69 (3 epochs of 23), and a calibrated plan said "5 epochs" of a run of 6: the epochs a small upload trains
    (min_steps) were scheduled on every row, held-out ones too. The page's config and its rough guess schedule them
    on the rows that train, as the run does."""
    from explorer.tune.guess import rough_estimate
    from explorer.tune.inputs import build_config, trained_rows
    from index.store import FolderIndexes
    from mirror.job import Finished, tune_and_index

    names, partners = rows()
    texts, kept, _, _ = clean_pairs(names, partners)
    overrides = {**SETTINGS, "epochs": 1, "min_steps": 50}  # 76 rows train: 5 steps an epoch, 10 epochs
    config, _ = build_config(texts, str(tiny_bert), "sentences", overrides, pairs=True, partners=kept)
    assert trained_rows(texts, config, kept) == 76 and config.epochs == 10  # (on all 96 rows: 9 epochs of 6)
    rough = rough_estimate(texts, config, "cpu", 1, trained_rows(texts, config, kept))
    events: list = []
    tune_and_index(texts, config, tmp_path / "run", indexes=FolderIndexes(), emit=events.append, pairs=kept)
    stats = next(e for e in events if isinstance(e, Finished)).stats
    assert stats["epochs"] == config.epochs and rough.steps == stats["total_steps"] == 50
