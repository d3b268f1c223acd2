"""Precision chosen by measurement (issue 54, item 3): on a CPU with native bf16, "auto" runs a model in bf16 only where
this machine measured bf16 faster for it (encoding and training apart), once per machine and model shape, kept in a
file; elsewhere fp32, measuring nothing. The measure leaves the model, its gradients and the RNG as found, and what
`auto` encodes and trains is exactly what the chosen format gives."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

import mirror.precision as precision
from mirror.config import MirrorConfig
from mirror.encoder import load_encoder
from mirror.train import mirror_tune

CPU = torch.device("cpu")
TEXTS = ["alpha beta", "gamma", "delta epsilon zeta", "eta", "theta iota kappa lambda"]


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """No measurement made yet in this process, and the machine's file in tmp_path."""
    monkeypatch.setattr(precision, "MEASURED", {})
    monkeypatch.setenv("MIRROR_CACHE_DIR", str(tmp_path))
    return tmp_path / "precision.json"


@pytest.fixture
def measured(monkeypatch, fresh):
    """A CPU with native bf16 whose measurements say: bf16 encodes faster, trains slower. The calls, counted."""
    calls: list[str] = []

    def fake(model, kind):
        calls.append(kind)
        faster = kind == "encode"
        return {"fp32": 1.0, "bf16": 0.5 if faster else 1.2, "bf16_chosen": float(faster)}

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setattr(precision, "_measure", fake)
    return calls


def test_without_native_bf16_auto_is_fp32_and_nothing_is_measured(monkeypatch, fresh, tiny_bert):
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    model = load_encoder(tiny_bert).model
    assert precision.resolve_precision(CPU, "auto", model, "encode") is None
    assert precision.resolve_precision(CPU, "auto", model, "train") is None
    assert precision.resolve_precision(CPU, "bf16", model) is torch.bfloat16  # asked for by name: no measure
    assert precision.MEASURED == {} and not fresh.exists()


def test_native_bf16_is_used_only_where_measured_faster_once_per_machine_and_model(measured, fresh, tiny_bert):
    model = load_encoder(tiny_bert).model
    assert precision.resolve_precision(CPU, "auto", model, "encode") is torch.bfloat16
    assert precision.resolve_precision(CPU, "auto", model, "train") is None
    for _ in range(3):
        precision.resolve_precision(CPU, "auto", model, "encode")
        precision.resolve_precision(CPU, "auto", load_encoder(tiny_bert).model, "train")  # another copy: same shape
    assert measured == ["encode", "train"]
    kept = json.loads(fresh.read_text())
    assert len(kept) == 2 and all(precision.machine_key() in name for name in kept)
    assert sorted(v["bf16_chosen"] for v in kept.values()) == [0.0, 1.0]

    precision.MEASURED.clear()  # a new process on this machine: the file answers, nothing is measured again
    assert precision.resolve_precision(CPU, "auto", model, "encode") is torch.bfloat16
    assert precision.resolve_precision(CPU, "auto", model, "train") is None
    assert measured == ["encode", "train"]


def test_auto_encodes_and_trains_exactly_as_the_chosen_format(measured, tiny_bert):
    enc = load_encoder(tiny_bert)
    np.testing.assert_array_equal(enc.encode(TEXTS), enc.encode(TEXTS, precision="bf16"))  # encode: bf16 measured
    assert not np.array_equal(enc.encode(TEXTS), enc.encode(TEXTS, precision="fp32"))

    config = MirrorConfig.preset("words", model=str(tiny_bert), device="cpu", batch_size=4, max_steps=2, seed=3)
    auto = mirror_tune(TEXTS, config)
    fp32 = mirror_tune(TEXTS, dataclasses.replace(config, precision="fp32"))
    assert "fp32" in auto.device  # train: bf16 measured slower
    for a, b in zip(auto.encoder.model.parameters(), fp32.encoder.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["encode", "train"])
def test_the_measure_leaves_the_model_its_gradients_and_the_rng_as_found(kind, tiny_bert):
    model = load_encoder(tiny_bert).model
    model.train(kind == "encode")  # the other mode than the measure's
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    rng = torch.get_rng_state()
    figures = precision._measure(model, kind)
    assert model.training == (kind == "encode")
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(weights[n], p) for n, p in model.named_parameters())
    assert 0 < figures["fp32"] < 60 and 0 < figures["bf16"] < 60
    assert figures["bf16_chosen"] == float(figures["bf16"] <= precision.BF16_MARGIN * figures["fp32"])


@pytest.mark.parametrize(("fp32_s", "bf16_s", "chosen"), [(1.0, 0.5, 1.0), (1.0, 0.95, 0.0), (1.0, 1.4, 0.0)])
def test_bf16_must_win_by_the_margin(tiny_bert, fp32_s, bf16_s, chosen):
    """The clock says each fp32 pass took `fp32_s` and each bf16 pass `bf16_s`: a near tie keeps fp32."""
    now = [0.0]
    durations = iter([fp32_s, bf16_s] * precision.PROBE_REPEATS)
    starts: list[bool] = []

    def clock() -> float:  # called at each timed pass's start and end, fp32 and bf16 alternating
        if starts and starts[-1]:
            now[0] += next(durations)
        starts.append(not (starts and starts[-1]))
        return now[0]

    figures = precision._measure(load_encoder(tiny_bert).model, "encode", clock=clock)
    assert figures == pytest.approx({"fp32": fp32_s, "bf16": bf16_s, "bf16_chosen": chosen})


def test_a_file_of_another_shape_is_measured_again_and_rewritten(measured, fresh, tiny_bert):
    """Issue 58 (Low): a precision.json holding valid JSON of another shape (`[1, 2]`) failed every run with an
    AttributeError and was never rewritten."""
    fresh.write_text("[1, 2]")
    model = load_encoder(tiny_bert).model
    assert precision.resolve_precision(CPU, "auto", model, "encode") is torch.bfloat16
    kept = json.loads(fresh.read_text())
    assert isinstance(kept, dict) and len(kept) == 1 and measured == ["encode"]


def test_processes_measuring_at_once_each_keep_their_measurement(fresh):
    """Three processes measuring at once kept 1 of 3 entries (each wrote the file it read before measuring)."""
    import threading

    entries = {f"machine {i}": {"fp32": 1.0, "bf16": 2.0, "bf16_chosen": 0.0} for i in range(3)}
    start = threading.Barrier(3)

    def keep(name: str) -> None:
        start.wait()
        precision._keep(fresh, name, entries[name])

    threads = [threading.Thread(target=keep, args=(name,)) for name in entries]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert json.loads(fresh.read_text()) == entries
