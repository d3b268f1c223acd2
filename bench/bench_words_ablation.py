"""Words-preset ablations behind the "Choosing the defaults" table (bench/RESULTS.md): one tuning run on the
10k words with config overrides, optionally with frozen parameters, then the base→tuned weight line.

    .venv/bin/python bench/bench_words_ablation.py --alphas 0.5,0.75,1.25,1.5,2      # weight interpolation
    .venv/bin/python bench/bench_words_ablation.py --set mask_min_chars=5 --set mask_span=2
    .venv/bin/python bench/bench_words_ablation.py --freeze embeddings.
    .venv/bin/python bench/bench_words_ablation.py --linear-decay --set lr=4e-5      # lr decayed to 0

Prints one JSON line per model: SimLex-999 / WS353 Spearman ×100, whole and even-pair dev halves.
"""

from __future__ import annotations

import argparse
import json

import torch
from bench_quality import parse_overrides
from common import SIMLEX, WORDS, WS353

import mirror.train as train
from mirror import MirrorConfig, read_texts
from mirror.encoder import Encoder, load_encoder
from mirror.evaluate import evaluate_pairs, read_pairs

GOLD = {"simlex": read_pairs(SIMLEX), "ws353": read_pairs(WS353)}


def scores(encoder: Encoder) -> dict[str, float]:
    encoder.model.eval()
    out = {}
    for name, pairs in GOLD.items():
        out[name] = round(100 * evaluate_pairs(encoder, pairs).spearman, 1)
        out[name + "_dev"] = round(100 * evaluate_pairs(encoder, pairs[::2]).spearman, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--set", action="append", default=[], help="config override, e.g. temperature=0.15")
    parser.add_argument("--freeze", action="append", default=[], help="parameter name prefix kept frozen")
    parser.add_argument("--alphas", default="", help="also score base + α·(tuned − base) for these α")
    parser.add_argument("--linear-decay", action="store_true", help="lr decays linearly to 0 over the run")
    args = parser.parse_args()
    config = MirrorConfig.preset("words", **parse_overrides(args.set))
    if args.linear_decay:  # mirror_tune keeps lr constant (the paper's recipe): scale it inside AdamW.step
        total = config.max_steps or config.epochs * -(-len(read_texts(WORDS)) // config.batch_size)
        step, done = torch.optim.AdamW.step, [0]

        def decayed(self, *a, **k):
            for group in self.param_groups:
                group["lr"] = config.lr * max(0.0, 1 - done[0] / total)
            done[0] += 1
            return step(self, *a, **k)

        torch.optim.AdamW.step = decayed
    if args.freeze:  # mirror_tune loads its own encoder: freeze on the way out of the loader
        load = train.load_encoder

        def load_frozen(*a, **k) -> Encoder:
            encoder = load(*a, **k)
            for name, param in encoder.model.named_parameters():
                param.requires_grad_(not name.startswith(tuple(args.freeze)))
            return encoder

        train.load_encoder = load_frozen
    result = train.mirror_tune(read_texts(WORDS), config)
    print(
        json.dumps(
            {
                "set": args.set,
                "freeze": args.freeze,
                "decay": args.linear_decay,
                "seconds": round(result.seconds, 1),
                **scores(result.encoder),
            }
        )
    )
    if args.alphas:
        base = load_encoder(config.model, pooling=result.encoder.pooling)
        start = {k: v.clone() for k, v in base.model.state_dict().items()}
        tuned = result.encoder.model.state_dict()
        for alpha in (float(a) for a in args.alphas.split(",")):
            with torch.no_grad():
                base.model.load_state_dict(
                    {
                        k: start[k] + alpha * (tuned[k] - start[k]) if start[k].is_floating_point() else start[k]
                        for k in start
                    }
                )
            print(json.dumps({"set": args.set, "alpha": alpha, **scores(base)}))


if __name__ == "__main__":
    main()
