"""fp32 against bf16 on this CPU (issue 54, item 3): what `precision="auto"` picks here for the bundled model, the
probe's own figures (mirror.precision: a few batches of each format, once per machine and model), and what each
format costs the work itself: encoding words and sentences, and training steps, alternating the formats in one
process (twice each, the quicker kept).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_precision.py [--words 5000] [--sentences 2000] [--steps 10]

On a CPU without native bf16 "auto" is fp32 and no probe runs (bf16 is emulated there: shown for the record).
JSON: bench/out/precision.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch
from common import data_path, machine, print_table, write_json

import mirror.precision as precision
from mirror.config import MirrorConfig
from mirror.encoder import load_encoder
from mirror.train import mirror_tune


def best_of(fn, repeats: int = 2) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=5000)
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    words = data_path("words").read_text(encoding="utf-8").split()[: args.words]
    sentences = data_path("sentences").read_text(encoding="utf-8").splitlines()[: args.sentences]
    enc = load_encoder("bundled")
    device = torch.device("cpu")
    native = precision.cpu_has_native_bf16()
    auto = {kind: precision.resolve_precision(device, "auto", enc.model, kind) for kind in ("encode", "train")}
    rows = []
    for label, fn in (
        (f"encode {len(words):,} words", lambda p: enc.encode(words, precision=p)),
        (f"encode {len(sentences):,} sentences", lambda p: enc.encode(sentences, precision=p)),
        (
            f"train {args.steps} steps of 200 words",
            lambda p: mirror_tune(
                words[:2000],
                dataclasses.replace(
                    MirrorConfig.preset("words", model="bundled", device="cpu"), max_steps=args.steps, precision=p
                ),
            ),
        ),
    ):
        fp32, bf16 = [], []
        for _ in range(2):  # alternating
            fp32.append(best_of(lambda fn=fn: fn("fp32"), 1))
            bf16.append(best_of(lambda fn=fn: fn("bf16"), 1))
        kind = "train" if label.startswith("train") else "encode"
        picked = "bf16" if auto[kind] is torch.bfloat16 else "fp32"
        rows.append(
            {
                "work": label,
                "fp32_s": round(min(fp32), 2),
                "bf16_s": round(min(bf16), 2),
                "bf16/fp32": round(min(bf16) / min(fp32), 2),
                "auto picks": picked,
            }
        )
        print(rows[-1], flush=True)
    probes = [
        {"what": f"{k[0]} probe", **{n: round(v, 4) for n, v in f.items()}} for k, f in precision.MEASURED.items()
    ]
    print(f"\nCPU: {precision.machine_key()}; native bf16: {native}")
    print_table(rows, ["work", "fp32_s", "bf16_s", "bf16/fp32", "auto picks"])
    if probes:
        print_table(probes, ["what", "fp32", "bf16", "bf16_chosen"])
    write_json(
        "precision.json",
        {"machine": machine(), "cpu": precision.machine_key(), "native_bf16": native, "rows": rows, "probes": probes},
    )


if __name__ == "__main__":
    main()
