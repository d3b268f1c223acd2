"""Pairs (issue 50): tuning on a file's (string, partner) rows against mirror-only tuning and against the peer,
measured on held-out rows of the same file, with the general checks beside.

    .venv/bin/pip install -r bench/requirements.txt   # the peer (sentence-transformers' trainer) needs them
    .venv/bin/python bench/bench_pairs.py [--half dev|check] [--sets foldoc,stdlib] [--sweep [--variants 'τ 0.1,...']] [--peer] [--checks] [--alphas 0.25,0.5,0.75]

Data (each file's `half`: dev chooses, check is reported once), the strings the longer column as the app reads them
by default (mirror.data: the longest text column), the partner the other:
- foldoc: examples/pairs/foldoc.tsv, FOLDOC definitions (strings) and their terms (partners)
- stdlib: examples/domain/stdlib-docstrings.tsv, the rest of a docstring (strings) and its summary line (partners)

Of each half a seeded 20% of the rows (at most 600) is held out of every training; the rest train. The figure:
each held-out row's string found among all the half's strings from its partner (mirror.pairs: MRR@10, recall@1/@10,
95% paired bootstrap intervals against the base). Runs:
- base: the bundled model, untuned
- mirror: the mirror-only default on the training rows' strings (what the app does without a partner column)
- pairs: the pairs default (MirrorConfig.preset(mode, pairs=True): mirror.config.PAIRS_ADJUSTMENTS)
- --sweep: the pairs default with one setting changed at a time (temperature, lr, min steps, partner masking,
  blend, partner max length): what chose the default, on the dev half
- --peer: sentence-transformers' trainer with MultipleNegativesRankingLoss (anchor: the partner, positive: the
  string, in-batch negatives) on the same training pairs, model, batch, epochs, lr and max length, timed in the
  same process
`--checks`: each run's general checks on the half's side of the bundled check sets (mirror.checks, as the defaults
were chosen: no check's dev half more than half a margin below the base). JSON: bench/out/pairs-<half>.json.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import tempfile
import time
from typing import Any

from common import EXAMPLES, peer_training_args, print_table, write_json

from mirror.config import MirrorConfig
from mirror.pairs import HeldOut, clean_pairs, figures, gain, holdout

SETS = {
    "foldoc": (EXAMPLES / "pairs" / "foldoc.tsv", "text", "term"),
    "stdlib": (EXAMPLES / "domain" / "stdlib-docstrings.tsv", "query", "summary"),
}
HELD_FRACTION, HELD_MOST = 0.2, 600
SWEEP: list[tuple[str, dict[str, Any]]] = [  # what chose the default (a step of 200 pairs is seconds on a CPU)
    ("τ 0.1", {"temperature": 0.1}),
    ("partners unmasked", {"pair_mask": False}),
    ("blend α 0.5", {"blend_alpha": 0.5}),
]


def read_set(name: str, half: str, limit: int | None) -> tuple[list[str], list[str | None]]:
    path, string_col, partner_col = SETS[name]
    with open(path, encoding="utf-8", newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["half"] == half]
    rows = rows[:limit] if limit else rows
    texts, partners, _, _ = clean_pairs([r[string_col] for r in rows], [r[partner_col] for r in rows])
    return texts, partners


def measured(held: HeldOut, base_ranks, encoder, label: str, train_s: float, extra: dict | None = None) -> dict:
    ranks = held.ranks(encoder)
    g = gain(base_ranks, ranks)
    row = {"run": label, "train_s": round(train_s, 1), **{k: round(v, 1) for k, v in figures(ranks).items()}}
    row["mrr10_gain"] = f"{g.tuned['mrr10'] - g.base['mrr10']:+.1f} [{g.low['mrr10']:+.1f}, {g.high['mrr10']:+.1f}]"
    return {**row, **(extra or {})}


def checks_of(base, tuned, half: str) -> dict[str, Any]:
    """The general checks on `half`: each check's change, and whether any is over half a margin below the base."""
    from mirror.checks import CHECKS, run_checks

    rows = run_checks(base, tuned, half=half)
    margins = {c.name: c.margin for c in CHECKS}
    low = [r["name"] for r in rows if r["delta"] < -0.5 * margins.get(r["name"], 1.0)]
    return {"checks": {r["name"]: r["delta"] for r in rows}, "checks_ok": not low, "checks_low": ", ".join(low)}


def run_ours(
    texts, partners, held: HeldOut, base_ranks, config: MirrorConfig, label: str, half: str, checks: bool,
    alphas: tuple[float, ...] = (),
) -> list[dict]:  # fmt: skip
    """The run's row, and one row per blend α of `alphas` of its tuned weights with the base (mirror.blend: no
    training again; only where the run itself is unblended)."""
    from mirror.blend import blend
    from mirror.encoder import load_encoder
    from mirror.train import mirror_tune

    train_texts, train_partners = held.training()
    started = time.perf_counter()
    result = mirror_tune(train_texts, config, pairs=train_partners if config.pairs else None)
    train_s = time.perf_counter() - started
    extra = {"steps": result.steps}
    base = load_encoder(config.model)
    if checks:
        extra |= checks_of(base, result.encoder, half)
    rows = [measured(held, base_ranks, result.encoder, label, train_s, extra)]
    for alpha in alphas if config.blend_alpha == 1.0 else ():
        blended = blend(base, result.encoder, alpha)
        more = {"steps": result.steps, **(checks_of(base, blended, half) if checks else {})}
        rows.append(measured(held, base_ranks, blended, f"{label}, blend α {alpha:g}", train_s, more))
    return rows


def run_peer(held: HeldOut, base_ranks, config: MirrorConfig, label: str) -> dict:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from mirror.encoder import bundled_model_path, load_encoder

    train_texts, train_partners = held.training()
    pairs = [(p, t) for t, p in zip(train_texts, train_partners, strict=True) if p is not None]
    model = SentenceTransformer(str(bundled_model_path()), device="cpu")
    model.max_seq_length = max(config.max_length, config.pair_max_length)
    dataset = Dataset.from_dict({"anchor": [p for p, _ in pairs], "positive": [t for _, t in pairs]})
    epochs = config.epochs_for(len(train_texts))
    with tempfile.TemporaryDirectory() as out:
        args = peer_training_args(dataclasses.replace(config, epochs=epochs), out, "cpu", False)
        loss = MultipleNegativesRankingLoss(model, scale=1.0 / config.temperature)
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
        started = time.perf_counter()
        state = trainer.train()
        train_s = time.perf_counter() - started
        model.save(out + "/m")
        encoder = load_encoder(out + "/m")
    return measured(held, base_ranks, encoder, label, train_s, {"steps": state.global_step})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", choices=["dev", "check"], default="dev")
    parser.add_argument("--sets", default="foldoc,stdlib")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--variants", help="the sweep's rows to run, by label (comma-separated; default: all)")
    parser.add_argument("--peer", action="store_true")
    parser.add_argument("--checks", action="store_true")
    parser.add_argument("--alphas", default="", help="also each unblended run's tuned weights blended at these α")
    parser.add_argument("--no-mirror", action="store_true", help="skip the mirror-only run")
    parser.add_argument("--limit", type=int, help="rows of each half (a quick look)")
    args = parser.parse_args()
    from mirror.config import detect_mode
    from mirror.encoder import load_encoder

    out: dict[str, Any] = {}
    rows_all = []
    for name in args.sets.split(","):
        texts, partners = read_set(name, args.half, args.limit)
        held = HeldOut(texts, partners, holdout(partners, HELD_FRACTION, HELD_MOST, seed=7), SETS[name][1:])
        mode, _ = detect_mode(held.training()[0])
        base = load_encoder("bundled")
        base_ranks = held.ranks(base)
        rows = [{"set": name, "run": "base", **{k: round(v, 1) for k, v in figures(base_ranks).items()}}]
        print(f"{name} {args.half}: {len(texts):,} strings, {len(held.rows)} held out, {mode} preset", flush=True)
        plain = MirrorConfig.preset(mode, model="bundled", device="cpu")
        paired = MirrorConfig.preset(mode, model="bundled", device="cpu", pairs=True)
        runs: list[tuple[str, MirrorConfig]] = [] if args.no_mirror else [("mirror (no partners)", plain)]
        runs.append(("pairs default", paired))
        if args.sweep:
            wanted = set(args.variants.split(",")) if args.variants else {label for label, _ in SWEEP}
            runs += [(f"pairs, {v}", dataclasses.replace(paired, **change)) for v, change in SWEEP if v in wanted]
        alphas = tuple(float(a) for a in args.alphas.split(",") if a.strip())
        for label, config in runs:
            for row in run_ours(texts, partners, held, base_ranks, config, label, args.half, args.checks, alphas):
                rows.append({"set": name, **row})
                print(f"  {rows[-1]}", flush=True)
        if args.peer:
            rows.append({"set": name, **run_peer(held, base_ranks, paired, "peer: ST trainer + MNRL")})
            print(f"  {rows[-1]}", flush=True)
            ours = next(r for r in rows if r["run"] == "pairs default")
            rows.append(
                {
                    "set": name,
                    "run": "ours / peer train time",
                    "train_s": round(ours["train_s"] / rows[-1]["train_s"], 2),
                }
            )
        out[name] = {"strings": len(texts), "held_out": len(held.rows), "mode": mode, "rows": rows}
        rows_all += rows
    print_table(
        rows_all, ["set", "run", "steps", "train_s", "mrr10", "r1", "r10", "mrr10_gain", "checks_ok", "checks_low"]
    )
    write_json(
        f"pairs-{args.half}.json",
        {"args": vars(args), "sets": out, "config": dataclasses.asdict(MirrorConfig.preset("sentences", pairs=True))},
    )


if __name__ == "__main__":
    main()
