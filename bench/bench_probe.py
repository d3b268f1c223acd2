"""Does the estimate's speed probe slow down as a training step does when other work shares the CPU? (M-1 of issue
60's newcomer passes: plans of one file read 3, 6, 7 and 8 min on a shared machine.)

    .venv/bin/python bench/bench_probe.py [--hogs 0,1,2] [--repeats 3]

With 0, 1, 2 other CPU-bound processes running (each a 2-thread torch matmul loop, as another run would be), times
on the bundled model: the probe every plan takes (explorer.tune.estimate.speed_probe, a 16-string encode, the median
of its repeats), a larger encode (64 strings of ~32 tokens, as an index's batches are), and one training step of
the words preset's shape (64 strings at 16 tokens; the fastest of a short run's steady steps). Each is given as its
slowdown against no hog: the estimate scales a calibration's compute phases by the probe's, so where the two differ
the estimate is off by their ratio. JSON: bench/out/probe-<strings>-<words>.json
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics
import subprocess
import sys
import time
from typing import Any

from common import machine, print_table, write_json

HOG = "import torch\ntorch.set_num_threads(2)\na = torch.randn(600, 600)\nwhile True:\n    a @ a\n"


def timings(base: Any, repeats: int) -> dict[str, float]:
    from explorer.tune.estimate import speed_probe, synthetic_texts
    from mirror.config import MirrorConfig
    from mirror.train import mirror_tune

    def encode() -> float:
        texts = synthetic_texts(64, 29)
        t = time.perf_counter()
        base.encode(texts, batch_size=64)
        return time.perf_counter() - t

    def step() -> float:
        config = dataclasses.replace(
            MirrorConfig.preset("words"), batch_size=64, max_length=16, epochs=1, max_steps=4, log_every=1
        )
        marks = [time.perf_counter()]
        on_step = lambda *_: marks.append(time.perf_counter())  # noqa: E731
        mirror_tune(synthetic_texts(256, 8), config, on_step=on_step, encoder=copy.deepcopy(base))
        return min(b - a for a, b in zip(marks[1:], marks[2:], strict=False))  # the first step pays the warm-up

    return {
        "probe_s": statistics.median(speed_probe(base) for _ in range(repeats)),
        "encode_s": statistics.median(encode() for _ in range(repeats)),
        "step_s": min(step() for _ in range(max(1, repeats - 1))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hogs", default="0,1,2")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--probe-shape", default="", help="strings,words of the probe (default: the app's)")
    args = parser.parse_args()
    import explorer.tune.estimate as est
    import mirror  # noqa: F401  the thread policy before torch

    if args.probe_shape:
        est.PROBE_SHAPE = tuple(int(x) for x in args.probe_shape.split(","))
    from mirror.config import BUNDLED_MODEL
    from mirror.encoder import load_encoder

    base = load_encoder(BUNDLED_MODEL, device="cpu")
    rows: list[dict[str, Any]] = []
    for hogs in (int(h) for h in args.hogs.split(",")):
        procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(hogs)]
        try:
            time.sleep(3)  # the hogs running
            rows.append({"hogs": hogs, **timings(base, args.repeats)})
        finally:
            for p in procs:
                p.kill()
                p.wait()
        print(rows[-1], flush=True)
    quiet = rows[0]
    for row in rows:
        for key in ("probe", "encode", "step"):
            row[f"{key}_x"] = round(row[f"{key}_s"] / quiet[f"{key}_s"], 2)
            row[f"{key}_s"] = round(row[f"{key}_s"], 4)
        row["probe_over_step"] = round(row["probe_x"] / row["step_x"], 2)
    print_table(rows, ["hogs", "probe_s", "probe_x", "encode_s", "encode_x", "step_s", "step_x", "probe_over_step"])
    shape = "-".join(str(x) for x in est.PROBE_SHAPE)
    write_json(
        f"probe-{shape}.json", {"machine": machine(), "argv": sys.argv, "probe_shape": est.PROBE_SHAPE, "rows": rows}
    )


if __name__ == "__main__":
    main()
