"""Quality: Spearman on SimLex-999 / WS353 (words preset on the 10k most frequent words) and STS-B
dev/test (sentences preset on the STS-B train sentences), base model (CLS and mean) vs tuned.

    .venv/bin/python bench/bench_quality.py                 # both presets, default settings
    .venv/bin/python bench/bench_quality.py --only words --set epochs=3 --set temperature=0.3
    .venv/bin/python bench/bench_quality.py --paper         # add rows with the paper's exact settings
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from common import data_path, print_table, write_json

from mirror import MirrorConfig, read_texts
from mirror.config import PRESETS
from mirror.encoder import load_encoder
from mirror.evaluate import evaluate_pairs, read_pairs
from mirror.train import mirror_tune

SETS = {"words": ("simlex", "ws353"), "sentences": ("sts_dev", "sts_test")}  # corpus (data set): its gold sets


def evaluate(encoder, gold: dict[str, list]) -> dict[str, float]:
    scores = {}
    for name, pairs in gold.items():
        scores[name] = evaluate_pairs(encoder, pairs).spearman
        if name in ("simlex", "ws353"):  # half the pairs as a dev split for choosing defaults
            scores[name + "_dev"] = evaluate_pairs(encoder, pairs[::2]).spearman
    return scores


def parse_overrides(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        for cast in (int, float):
            try:
                value = cast(value)
                break
            except ValueError:
                continue
        out[key] = value
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=list(SETS), action="append")
    parser.add_argument("--set", action="append", default=[], help="config override, e.g. epochs=3")
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--no-base", action="store_true", help="skip the base-model rows")
    parser.add_argument("--paper", action="store_true", help="also tune with the paper's exact preset")
    args = parser.parse_args()
    overrides = parse_overrides(args.set)
    rows = []
    for mode in args.only or list(SETS):
        corpus = data_path(mode)
        gold = {name: read_pairs(data_path(name)) for name in SETS[mode]}
        if not args.no_base:
            for pooling in ("cls", "mean"):
                base = load_encoder(args.model, pooling=pooling)
                rows.append({"run": f"base ({pooling})", "mode": mode, **evaluate(base, gold)})
        runs = [("default", MirrorConfig.preset(mode, model=args.model, **overrides))]
        if args.paper:
            paper = dataclasses.replace(PRESETS[mode], model=args.model, **overrides).validated()
            runs.append(("paper", paper))
        for name, config in runs:
            result = mirror_tune(read_texts(corpus), config)
            c = result.config
            label = f"tuned {name} ({c.pooling}, τ {c.temperature}, lr {c.lr:g})" + (f" {args.set}" if args.set else "")
            rows.append(
                {
                    "run": label,
                    "mode": mode,
                    "steps": result.steps,
                    "train_s": result.seconds,
                    **evaluate(result.encoder, gold),
                }
            )
            print(result.summary(), flush=True)
    columns = ["run", "mode", "steps", "train_s", "simlex", "ws353", "simlex_dev", "ws353_dev", "sts_dev", "sts_test"]
    print_table(rows, columns)
    write_json(f"quality-{int(time.time())}.json", {"overrides": overrides, "rows": rows})


if __name__ == "__main__":
    main()
