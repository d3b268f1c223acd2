"""The bases the base-model box suggests: sizes read from configs (never weights or the network), and what a run of
the loaded strings costs here with each, scaled from this machine's estimate for the bundled model."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.architectures import build
from ui.plan_md import bases_md, plan_text

# Published sizes (model cards, papers) of the hub bases offered: KNOWN_CONFIGS must give these, in millions.
PUBLISHED_M = {
    "sentence-transformers/all-MiniLM-L6-v2": 22.7,
    "sentence-transformers/all-mpnet-base-v2": 109.5,
    "bert-base-uncased": 110,
    "bert-base-cased": 108.3,
    "roberta-base": 125,
    "distilbert-base-uncased": 66,
    "microsoft/deberta-v3-base": 184,  # 86M backbone + 98M embeddings
}


def test_sizes_come_from_configs_and_match_the_models(tmp_path):
    from explorer.tune.bases import KNOWN_CONFIGS, SUGGESTED, shape_of
    from mirror.config import BUNDLED_MODEL
    from mirror.encoder import load_encoder

    assert set(PUBLISHED_M) == set(KNOWN_CONFIGS) and all(shape_of(s.model) for s in SUGGESTED)
    for model, millions in PUBLISHED_M.items():
        assert shape_of(model).params / 1e6 == pytest.approx(millions, rel=0.01), model
    # a folder's size is its config's: the loaded weights have exactly that many
    for model in (BUNDLED_MODEL, str(build("mpnet", tmp_path / "mpnet")), str(build("modernbert", tmp_path / "mb"))):
        loaded = load_encoder(model).model
        assert shape_of(model).params == sum(p.numel() for p in loaded.parameters()), model
    assert shape_of("some-org/never-seen") is None and shape_of(str(tmp_path / "missing")) is None


def test_compute_per_token_prices_a_base_against_the_bundled_model():
    from explorer.tune.bases import relative_compute
    from explorer.tune.guess import model_cost_factor

    assert relative_compute("bundled") == 1.0
    assert relative_compute("bert-base-uncased") == pytest.approx(8.0)  # 2x the layers, each 4x the work
    assert relative_compute("distilbert-base-uncased") == pytest.approx(4.0)
    # its relative-position projections on top, and its eager attention's measured slowdown per multiply-add
    assert relative_compute("microsoft/deberta-v3-base") == pytest.approx(
        2 * 8.0 * (1 + 2 * 512 / (4 * 768 + 2 * 3072))
    )
    assert model_cost_factor("sentence-transformers/all-mpnet-base-v2") == pytest.approx(8.0)
    assert model_cost_factor("someone/roberta-large-thing") == 28.0  # no config at hand: the name's guess


def test_the_box_suggests_each_base_with_its_size_and_its_cost_here(app, monkeypatch):
    import explorer.tune.estimate as est_mod
    from explorer.tune.bases import SUGGESTED
    from explorer.tune.estimate import Calibration, Estimator, Fit
    from explorer.tune.inputs import build_config
    from ui.plan_md import short_seconds

    # this machine's costs, as a calibration would time them (fixed here: the test is about what is done with them)
    cal = Calibration(
        Fit(0.05, 1e-4), Fit(0.01, 1e-5), 0.5, load_s=2.0, save_s=1.0, zip_s=1.0, seconds=0.1, where="CPU"
    )
    monkeypatch.setattr(est_mod, "calibrate", lambda *args, **kwargs: cal)
    app.estimator = Estimator(app.settings.work_dir / ".estimate")  # not this process's calibrations
    empty = bases_md(app.planner.bases(None, "auto", {}))
    assert "load some strings to see" in empty and "**all-MiniLM-L6-v2 (bundled)** · 22.7M |" in empty
    assert "Hub ids need internet" in empty and "MIRROR_MODEL_ROOTS" in empty
    s = app.session()
    app.loader.load_example(s, "small")
    rough = bases_md(app.planner.bases(s, "auto", {}))  # the bundled model not timed yet: never timed for this table
    assert "a rough guess so far" in rough and app.estimator.calibrations == {}
    plan_text(app, s, "bundled", "auto", {})  # the plan shown for the bundled model calibrates it
    md = bases_md(app.planner.bases(s, "auto", {}))
    rows = {row.split("**")[1]: row.split("|") for row in md.splitlines() if row.startswith("| **")}
    assert list(rows) == [b.name for b in SUGGESTED] and "(calibrated here)" in md
    assert all(f"`{b.model}`" in md for b in SUGGESTED)  # what to pick in the box
    est, _ = app.planner.estimate_of(s, build_config(s.texts, "bundled", "auto", {})[0])
    assert rows["all-MiniLM-L6-v2 (bundled)"][3].strip() == f"~{short_seconds(est.total)}"
    io = sum(est.phase(p) for p in ("load", "save", "downloads"))  # loading and writing: not compute
    mpnet = io + 8 * (est.total - io)  # every compute phase 8x: 2x the layers, each 4x the work
    assert rows["all-mpnet-base-v2"][3].strip() == f"~{short_seconds(mpnet)}"
    assert "109M, 418 MB download" in rows["bert-base-uncased"][1]


def test_a_server_without_the_hub_says_so(tmp_path):
    from explorer import MirrorApp, Settings

    app = MirrorApp(Settings(work_dir=tmp_path / "w", allow_hub=False, warm_up=False))
    md = bases_md(app.planner.bases(None, "auto", {}))
    assert "loads no hub models (MIRROR_ALLOW_HUB=0)" in md and "MIRROR_MODEL_ROOTS" not in md


def test_a_folder_outside_the_roots_is_refused_before_its_config_is_read(app, tmp_path, monkeypatch):
    """The rough guess reads a model's config: a server checks the name against its policy first."""
    import explorer.tune.bases as bases

    read = []
    monkeypatch.setattr(bases, "_read_config", lambda folder: read.append(folder))
    s = app.session()
    app.loader.load_pasted(s, "cat\ndog\nbus")
    shown = plan_text(app, s, str(build("bert", tmp_path / "elsewhere")), "auto", {})
    assert "only accepted under the allowed directories" in shown and read == []
    assert Path(tmp_path / "elsewhere").is_dir()
