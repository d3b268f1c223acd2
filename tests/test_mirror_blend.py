"""Blending a tuned model with its base (mirror.blend) and `python -m mirror blend`, on the tiny random BERT."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from mirror import MirrorConfig
from mirror.__main__ import main
from mirror.blend import blend, blend_folder, check_alpha, recorded_blend
from mirror.config import SENTENCE_ENCODER_ADJUSTMENTS
from mirror.encoder import load_encoder, load_sentence_transformer
from mirror.errors import MirrorError
from mirror.train import mirror_tune, save_result
from tests.conftest import TINY, WORDS

PROBE = ["cat", "dog on a bus", "the big red car is small"]


@pytest.fixture(scope="module")
def tuned_dir(tiny_bert, tmp_path_factory):
    """The tiny BERT tuned a few steps on WORDS (large lr: the weights really move), saved as mirror saves it."""
    config = MirrorConfig.preset("words", model=str(tiny_bert), pooling="mean", **{**TINY, "max_steps": 3})
    return save_result(mirror_tune(WORDS, config), tmp_path_factory.mktemp("blend") / "tuned")


@pytest.fixture(scope="module")
def pair(tiny_bert, tuned_dir):
    return load_encoder(tiny_bert, pooling="mean"), load_encoder(tuned_dir)


def weights(encoder) -> dict[str, torch.Tensor]:
    return encoder.model.state_dict()


def test_alpha_zero_is_the_base_and_alpha_one_the_tuned_model_exactly(pair):
    base, tuned = pair
    for alpha, same in ((0.0, base), (1.0, tuned)):
        mixed = blend(base, tuned, alpha)
        theirs = weights(same)
        assert all(torch.equal(w, theirs[k]) for k, w in weights(mixed).items())
        assert np.array_equal(mixed.encode(PROBE), same.encode(PROBE))
        assert mixed.info["blend"]["alpha"] == alpha and mixed.pooling == tuned.pooling
    assert not np.array_equal(base.encode(PROBE), tuned.encode(PROBE))  # the tuning moved the weights


def test_half_blend_is_the_mean_of_the_weights_and_lies_between(pair):
    base, tuned = pair
    mixed = blend(base, tuned, 0.5)
    wb, wt = weights(base), weights(tuned)
    for key, w in weights(mixed).items():
        if w.is_floating_point():
            torch.testing.assert_close(w, (wb[key] + wt[key]) / 2)
        else:
            assert torch.equal(w, wt[key])
    eb, et, em = base.encode(PROBE), tuned.encode(PROBE), mixed.encode(PROBE)
    assert not np.array_equal(em, eb) and not np.array_equal(em, et)
    d_base, d_tuned, d_ends = (np.linalg.norm(a - b) for a, b in ((em, eb), (em, et), (eb, et)))
    assert d_base < d_ends and d_tuned < d_ends
    assert all(torch.equal(w, wt[k]) for k, w in weights(tuned).items())  # the tuned model is left as it was


def test_blend_refuses_a_model_of_another_architecture(tiny_roberta, pair):
    _, tuned = pair
    with pytest.raises(MirrorError, match="not the same architecture"):
        blend(load_encoder(tiny_roberta, pooling="mean"), tuned, 0.5)


@pytest.mark.parametrize("bad", [-0.1, 1.5, "half", None, float("nan"), float("inf")])
def test_check_alpha_refuses_values_outside_zero_to_one(bad):
    with pytest.raises(MirrorError, match="α"):
        check_alpha(bad)


def test_check_alpha_takes_numbers_and_numeric_strings():
    assert check_alpha("0.25") == 0.25 and check_alpha(1) == 1.0 and check_alpha(0) == 0.0


def test_blend_folder_saves_a_folder_plain_sentence_transformers_loads(pair, tuned_dir, tmp_path):
    base, tuned = pair
    out = blend_folder(None, tuned_dir, 0.5, tmp_path / "blend")  # the base the tuned folder names
    saved = json.loads((out / "mirror_config.json").read_text())
    assert saved["blend"]["alpha"] == 0.5 and saved["config"]["model"] == tuned.base_model
    ours = load_encoder(out).encode(PROBE, precision="fp32")  # sentence-transformers encodes in fp32
    np.testing.assert_allclose(ours, blend(base, tuned, 0.5).encode(PROBE, precision="fp32"), atol=1e-6)
    st = load_sentence_transformer(out).encode(PROBE, normalize_embeddings=True)
    np.testing.assert_allclose(st, ours, atol=1e-5)


def test_blend_folder_with_an_explicit_base_encoder(pair, tuned_dir, tmp_path):
    base, tuned = pair
    out = blend_folder(base, tuned_dir, 0.0, tmp_path / "b0")
    assert np.array_equal(load_encoder(out).encode(PROBE), base.encode(PROBE))


def test_blend_folder_asks_for_the_base_when_the_folder_names_none(tuned_dir, tmp_path):
    import shutil

    copy = shutil.copytree(tuned_dir, tmp_path / "nameless")
    (copy / "mirror_config.json").write_text("{}")
    with pytest.raises(MirrorError, match="give --base"):
        blend_folder(None, copy, 0.5, tmp_path / "out")


def test_a_saved_blend_records_what_it_blends_and_a_model_as_trained_records_none(pair, tiny_bert, tuned_dir, tmp_path):
    """A model zip of a blend read as a tuned model once loaded again: the folder now records the blend (α and the
    run it blends), which `recorded_blend` reads back; a model as trained, the sentences preset's own blend after
    training included (its config's blend_alpha), is no blend."""
    base, tuned = pair
    assert recorded_blend(tuned.info) is None
    out = blend_folder(base, tuned_dir, 0.25, tmp_path / "blend", of="a" * 32)
    assert recorded_blend(load_encoder(out).info) == (0.25, "a" * 32)
    assert recorded_blend(load_encoder(blend_folder(base, tuned_dir, 0.5, tmp_path / "b2")).info) == (0.5, "")
    blended = SENTENCE_ENCODER_ADJUSTMENTS["sentences"]["blend_alpha"]  # what the preset does on a sentence encoder
    config = MirrorConfig.preset("sentences", model=str(tiny_bert), pooling="mean", blend_alpha=blended, **TINY)
    preset = load_encoder(save_result(mirror_tune(WORDS, config), tmp_path / "preset"))
    assert preset.info["config"]["blend_alpha"] == config.blend_alpha and recorded_blend(preset.info) is None
    assert recorded_blend({"blend": {"alpha": 7}}) is None and recorded_blend({"blend": "x"}) is None


def test_a_blend_of_a_saved_blend_is_alpha_of_the_tuned_weights(pair, tuned_dir, tmp_path):
    """Blending a loaded blend (a reused zip's model) at α gave α·α0 of the tuned weights, while the slider and the
    record said α: it is now α of the tuned weights the first blend was made from."""
    base, tuned = pair
    saved = load_encoder(blend_folder(base, tuned_dir, 0.25, tmp_path / "quarter", of="parent"))
    again = blend(base, saved, 0.5)
    direct = weights(blend(base, tuned, 0.5))
    for key, w in weights(again).items():
        torch.testing.assert_close(w, direct[key], atol=1e-5, rtol=1e-4)
    assert recorded_blend(again.info) == (0.5, "parent")  # still of the run the first blend was made from
    for alpha, same in ((0.25, saved), (0.0, base)):
        theirs = weights(same)
        assert all(torch.equal(w, theirs[k]) for k, w in weights(blend(base, saved, alpha)).items())
    nothing = load_encoder(blend_folder(base, tuned_dir, 0.0, tmp_path / "zero"))
    with pytest.raises(MirrorError, match="tuned weights cannot be recovered"):
        blend(base, nothing, 0.5)


# ------------------------------------------------------------------------------------------------------ CLI


def test_cli_blend_writes_the_blend_and_says_where(tuned_dir, tiny_bert, tmp_path, capsys):
    out = tmp_path / "cli-blend"
    assert main(["blend", str(tuned_dir), "--alpha", "0.25", "--out", str(out), "--base", str(tiny_bert)]) == 0
    assert "saved:" in capsys.readouterr().out
    assert json.loads((out / "mirror_config.json").read_text())["blend"]["alpha"] == 0.25
    assert main(["blend", str(tuned_dir), "--alpha", "0.75", "--out", str(out)]) == 0  # a mirror folder: replaced
    assert json.loads((out / "mirror_config.json").read_text())["blend"]["alpha"] == 0.75


@pytest.mark.parametrize(
    "case, message",
    [
        ("alpha", "α"),
        ("missing", "not an existing folder"),
        ("not-mirror", "not a model folder written by mirror"),
        ("out", "exists and is not a model folder written by mirror"),
    ],
)
def test_cli_blend_errors_exit_2_before_any_work(case, message, tuned_dir, tmp_path, capsys):
    tuned, alpha, out = str(tuned_dir), "0.5", tmp_path / "out"
    if case == "alpha":
        alpha = "1.5"
    elif case == "missing":
        tuned = str(tmp_path / "no-such-run")
    elif case == "not-mirror":
        (tmp_path / "plain").mkdir()
        tuned = str(tmp_path / "plain")
    else:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    assert main(["blend", tuned, "--alpha", alpha, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    if case == "out":
        assert (out / "notes.txt").read_text() == "mine" and sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    else:
        assert not out.exists()


def test_cli_check_of_a_blend_folder_says_it_is_a_blend(pair, tuned_dir, tmp_path, capsys, monkeypatch):
    """`python -m mirror check` on a blend's folder headed its numbers "tuned: <folder>" like a model as trained."""
    from mirror import checks

    row = {"name": "Toy", "what": "pairs", "metric": "m", "items": 4, "unit": "pairs", "base": 50.0, "tuned": 50.0}
    row |= {"delta": 0.0, "ci": [-1.0, 1.0], "verdict": "same"}
    monkeypatch.setattr(checks, "run_checks", lambda base, tuned, half="check": [row])  # the header, not the checks
    out = blend_folder(pair[0], tuned_dir, 0.25, tmp_path / "quarter")
    assert main(["check", str(out), "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert f"tuned: {out} (a blend: alpha=0.25 of the tuned weights)" in printed
    assert printed.splitlines()[-1] == "General checks: the blend is no worse than the base on any of them."
    worse = row | {"tuned": 40.0, "delta": -10.0, "ci": [-12.0, -8.0], "verdict": "worse"}
    monkeypatch.setattr(checks, "run_checks", lambda base, tuned, half="check": [worse])
    assert main(["check", str(out), "--device", "cpu"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]  # a blend is not told to blend: a lower α keeps more of the base
    assert last.startswith("The blend is worse than the base on 1 general check: Toy") and "A lower α" in last
    assert "blend at α" not in last
    assert main(["check", str(tuned_dir), "--device", "cpu"]) == 0
    assert f"tuned: {tuned_dir}   (check half)" in capsys.readouterr().out


def test_cli_blend_alpha_is_of_the_tuned_weights_also_for_a_folder_train_blended(tiny_bert, tmp_path):
    """`train` blends its weights with the base after training (the presets' blend_alpha: 0.75 for words on a
    sentence encoder), and its folder says so in its config; `blend --alpha` is α of the tuned weights as trained
    there too, as the app's Blend is: α 1 gives the weights as trained, the folder's own α gives the folder back."""
    config = MirrorConfig.preset("words", model=str(tiny_bert), pooling="mean", **{**TINY, "max_steps": 3, "seed": 5})
    trained = save_result(mirror_tune(WORDS, dataclasses.replace(config, blend_alpha=1.0)), tmp_path / "trained")
    own = save_result(mirror_tune(WORDS, dataclasses.replace(config, blend_alpha=0.75)), tmp_path / "own")
    assert json.loads((own / "mirror_config.json").read_text())["config"]["blend_alpha"] == 0.75
    for alpha, like in (("1", trained), ("0.75", own)):
        out = tmp_path / f"cli-{alpha}"
        assert main(["blend", str(own), "--alpha", alpha, "--out", str(out), "--base", str(tiny_bert)]) == 0
        got, want = weights(load_encoder(out)), weights(load_encoder(like))
        assert all(torch.allclose(got[k], want[k], atol=1e-4) for k in want if want[k].is_floating_point()), alpha
    assert not all(
        torch.equal(a, b)
        for a, b in zip(weights(load_encoder(own)).values(), weights(load_encoder(trained)).values(), strict=True)
    )
