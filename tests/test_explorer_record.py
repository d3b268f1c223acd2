"""explorer.resources.record: a run's record is typed and serialised in one module. A run.json written before the record
was typed (ad4c457) reads back into every field and writes back the same `stats`; nothing in explorer/ or ui/ reads
a run's record by string keys (a renamed field is an AttributeError, never a blank cell)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from explorer.resources.record import Checks, Origin, RunRecord, Timing, flat, from_json, record_of, to_json
from mirror.pairs import PairGain

ROOT = Path(__file__).resolve().parent.parent
GAIN = {
    "rows": 20,
    "string_column": "summary",
    "partner_column": "name",
    "base": {"mrr10": 30.0, "r1": 20.0, "r10": 50.0},
    "tuned": {"mrr10": 45.0, "r1": 35.0, "r10": 70.0},
    "low": {"mrr10": 5.0, "r1": 2.0, "r10": 4.0},
    "high": {"mrr10": 25.0, "r1": 28.0, "r10": 36.0},
}
# run.json's stats as the app wrote them before (ad4c457): a pairs run served before its checks, with its timing
OLD_STATS = {
    "base_model": "bundled",
    "strings": 180,
    "steps": 50,
    "total_steps": 50,
    "seconds": 12.5,
    "device": "cpu",
    "cancelled": False,
    "first_loss": 2.1,
    "final_loss": 0.9,
    "notes": ["out of memory at step 1: continued with batch size 4"],
    "summary": "done: 50/50 steps on 180 strings in 12.5s on cpu; final loss 0.9000; pooling mean, mode sentences",
    "pooling": "mean",
    "mode": "sentences",
    "batch_sizes": [64, 64, 52],
    "epochs": 10,
    "min_steps": 50,
    "run_alpha": 1.0,
    "pairs": {
        "paired": 200,
        "empty": 3,
        "same": 1,
        "shared": 0,
        "columns": ["summary", "name"],
        "held_out": 20,
        "gain": {**GAIN, "verdict": "better", "sentence": PairGain.from_dict(GAIN).sentence()},
    },
    "served_seconds": 14.0,
    "wall_seconds": 21.3,
    "started_at": 1700000000.0,
    "finished_at": 1700000021.3,
    "forgetting": {
        "checks": [{"name": "SimLex-999", "base": 40.0, "tuned": 41.0, "delta": 1.0, "worse": False}],
        "verdict": "no worse",
        "seconds": 6.2,
        "own_long_texts": {"strings": 20, "min_tokens": 100, "overlap_at_10": 0.5},
    },
    "neighbours_changed": 0.31,
}


def test_an_old_run_json_reads_into_every_field_and_writes_back_the_same(tmp_path):
    data = {
        "folder": ".",
        "base_model": "bundled",
        "pooling": "mean",
        "corpus": "glossary.csv",
        "n_texts": 200,
        "texts_key": "0123456789abcdef",
        "stats": OLD_STATS,
        "losses": [2.1, 1.5, 0.9],
        "summary": OLD_STATS["summary"],
        "model_zip": "mirror-bundled-abc-model.zip",
        "index_zip": "mirror-bundled-abc-index.zip",
        "created": 1700000000.0,
        "checks_pending": False,
    }
    info = from_json(json.loads(json.dumps(data)), tmp_path)
    t, r = info.record.training, info.record
    assert (t.steps, t.total_steps, t.seconds, t.device, t.mode, t.epochs, t.run_alpha) == (
        50,
        50,
        12.5,
        "cpu",
        "sentences",
        10,
        1.0,
    )
    assert t.pairs.stats.paired == 200 and t.pairs.columns == ("summary", "name") and t.pairs.held_out == 20
    assert t.pairs.gain.verdict == "better" and t.pairs.gain.rows == 20
    assert r.timing == Timing(wall_seconds=21.3, started_at=1700000000.0, finished_at=1700000021.3, served_seconds=14.0)
    assert r.checks.verdict == "no worse" and r.checks.seconds == 6.2 and not r.checks.worse
    assert r.checks.own_long_texts["strings"] == 20 and r.neighbours_changed == 0.31
    assert r.origin == Origin("trained") and r.notes == OLD_STATS["notes"]
    assert info.model_zip == tmp_path / data["model_zip"] and info.losses == data["losses"]
    assert dict(info.stats) == OLD_STATS  # the API summary, the card and run.json say what they said
    assert to_json(info) == data
    with pytest.raises(TypeError):
        info.stats["steps"] = 3  # the flat view is read-only: the record is what changes


@pytest.mark.parametrize(
    "stats, origin",
    [
        ({"blend_alpha": 0.5, "blended_from": "a" * 32, "blend_seconds": 2.0}, Origin("blend", 0.5, "a" * 32)),
        ({"uploaded": "mine.zip", "load_seconds": 3.0}, Origin("uploaded", zip="mine.zip")),
        # a zip of a blend reads as that blend, and a blend made here of an uploaded run keeps the zip's name
        (
            {"uploaded": "b.zip", "blend_alpha": 0.5, "blended_from": "abcd1234"},
            Origin("uploaded", 0.5, "abcd1234", "b.zip"),
        ),
        (
            {"uploaded": "b.zip", "blend_alpha": 0.3, "blended_from": "c" * 32, "blend_seconds": 1.0},
            Origin("blend", 0.3, "c" * 32, "b.zip"),
        ),
    ],
)
def test_where_a_model_came_from_is_read_and_written_back(stats, origin):
    record = record_of(stats)
    assert record.origin == origin
    assert {k: v for k, v in flat(record).items() if k in stats} == stats


def test_checks_that_failed_were_skipped_or_never_ran_stay_told_apart():
    assert "forgetting" not in flat(RunRecord())  # not run (MIRROR_GENERAL_CHECKS=0, an uploaded zip)
    assert flat(RunRecord(checks=Checks(failed=True)))["forgetting"] is None
    skipped = {"skipped": "the server restarted while they ran"}
    assert flat(RunRecord(checks=Checks(skipped=skipped["skipped"])))["forgetting"] == skipped
    for value in (None, skipped):
        assert flat(record_of({"forgetting": value}))["forgetting"] == value


def test_nothing_in_the_app_reads_a_record_by_string_keys():
    """`run.stats` is the flat view for the formats outside the app (run.json, /train's summary, the model card):
    explorer/ and ui/ read `run.record`'s fields."""
    reads = re.compile(r"\.stats(\[|\.get\()")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for pkg in ("explorer", "ui")
        for path in sorted((ROOT / pkg).rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if reads.search(line) and "ev.stats" not in line  # the engine's events carry its own dict
    ]
    assert found == []


def test_a_runs_tuned_index_time_and_held_out_examples_are_typed_kept_and_said(tmp_path):
    """Issue 52 (main's 40d7943): mirror.job times the tuned index (what a blend of the run re-encodes: the
    Explore tab's blend slider says it) and keeps the first held-out rows of a pairs run (the Search tab offers one
    to try); typed fields of the record, in run.json's stats as the pipeline wrote them."""
    from explorer.resources.runfacts import pairs_about
    from ui import render
    from ui.render_pairs import search_by_partner

    examples = [["a name it never trained on", "its summary"], ["another", "one"]]
    stats = {**OLD_STATS, "tuned_index_seconds": 81.0, "pairs": {**OLD_STATS["pairs"], "examples": examples}}
    data = {"base_model": "bundled", "n_texts": 200, "stats": stats, "model_zip": "m.zip", "index_zip": "i.zip"}
    info = from_json({**data, "created": 1.0}, tmp_path)
    assert info.record.timing.tuned_index_seconds == 81.0
    assert info.record.training.pairs.examples == (("a name it never trained on", "its summary"), ("another", "one"))
    assert dict(info.stats) == stats  # written back as read
    assert (
        f"re-encodes your 200 strings with them (this run's took {render.fmt_seconds(81.0)} here; no retraining)"
        in render.blend_info(info)
    )
    assert "type a `name` to find its `summary`, e.g. a row it never trained on: *a name it never trained on*" in (
        search_by_partner(info)
    )
    assert pairs_about(info).startswith("Tuned on pairs: each summary with its name as its positive (200 strings")
    old = from_json({**data, "stats": OLD_STATS, "created": 1.0}, tmp_path)  # an older run: neither, and said so
    assert old.record.timing.tuned_index_seconds is None and old.record.training.pairs.examples == ()
    assert "this run's took" not in render.blend_info(old) and "e.g." not in search_by_partner(old)


def test_a_models_loss_terms_are_read_as_a_list_of_names_or_not_at_all():
    """An uploaded zip's mirror_config.json says what it likes: its `loss_terms` become the run table's label only as
    a list of names (a string would read "+ d + i + s", a number broke the run's page)."""
    from explorer.resources.record import training_of

    assert training_of({"loss_terms": ["distillation to the base λ 10"]}).loss_terms == [
        "distillation to the base λ 10"
    ]
    assert training_of({"loss_terms": []}).loss_terms == []
    for odd in ("distill", 3, {"a": 1}, None):
        assert training_of({"loss_terms": odd}).loss_terms is None
