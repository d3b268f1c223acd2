"""Pairs (issue 50): tuning on a file's (string, partner) rows against mirror-only tuning and against the peer,
measured on held-out rows of the same file, with the general checks beside.

    .venv/bin/pip install -r bench/requirements.txt   # the peer (sentence-transformers' trainer) needs them
    .venv/bin/python bench/bench_pairs.py [--half dev|check] [--sets foldoc,stdlib] [--sweep [--variants 'τ 0.1,...']] [--peer] [--checks] [--alphas 0.25,0.5,0.75]

Data (each file's `half`: dev chooses, check is reported once), the strings the longer column as the app reads them
by default (mirror.data: the longest text column), the partner the other:
- foldoc: examples/pairs/foldoc.tsv, FOLDOC definitions (strings) and their terms (partners)
- stdlib: examples/domain/stdlib-docstrings.tsv, the rest of a docstring (strings) and its summary line (partners)
- wordnet: examples/pairs/wordnet.tsv, short pairs (issue 60): a WordNet lemma (strings) and its synset's first
  lemma (partners, repeated: a synset of four lemmas gives three rows one headword); the words preset. Rows sharing a
  partner are held out together and any of them counts as found (mirror.pairs.HeldOut)

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
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from common import EXAMPLES, peer_training_args, print_table, write_json

from mirror.config import MirrorConfig
from mirror.pairs import HeldOut, clean_pairs, figures, gain, holdout

SETS = {
    "foldoc": (EXAMPLES / "pairs" / "foldoc.tsv", "text", "term"),
    "stdlib": (EXAMPLES / "domain" / "stdlib-docstrings.tsv", "query", "summary"),
    "wordnet": (EXAMPLES / "pairs" / "wordnet.tsv", "word", "headword"),
}
HELD_FRACTION, HELD_MOST = 0.2, 600
SWEEP: list[tuple[str, dict[str, Any]]] = [  # what chose the default (a step of 200 pairs is seconds on a CPU)
    ("τ 0.1", {"temperature": 0.1}),
    ("partners unmasked", {"pair_mask": False}),
    ("blend α 0.5", {"blend_alpha": 0.5}),
    # keeping the pairs gain without forgetting: each trains unblended (--alphas then blends its weights with the base)
    ("unblended", {"blend_alpha": 1.0}),
    ("L2-SP 1", {"blend_alpha": 1.0, "l2_base": 1.0}),
    ("L2-SP 10", {"blend_alpha": 1.0, "l2_base": 10.0}),
    ("distill 10", {"blend_alpha": 1.0, "distill": 10.0}),
    ("general mix 0.25", {"blend_alpha": 1.0, "mix_general": 0.25}),
    ("lr 1e-5", {"blend_alpha": 1.0, "lr": 1e-5}),
    ("partner max 64", {"blend_alpha": 1.0, "pair_max_length": 64}),
    ("min steps 100", {"blend_alpha": 1.0, "min_steps": 100}),
    ("LoRA 8 lr 1e-3", {"blend_alpha": 1.0, "lora_rank": 8, "lr": 1e-3}),
    # short pairs (issue 60, words mode): the words preset's own τ, no distillation, a higher lr, fewer steps, each
    # unblended (a partner under mask_min_chars is never masked: pair_mask changes nothing there)
    ("words τ 0.1", {"blend_alpha": 1.0, "temperature": 0.1}),
    ("words τ 0.2", {"blend_alpha": 1.0, "temperature": 0.2}),
    ("words no distill", {"blend_alpha": 1.0, "distill": 0.0}),
    ("words no distill lr 5e-5", {"blend_alpha": 1.0, "distill": 0.0, "lr": 5e-5}),
    ("words min steps 25", {"blend_alpha": 1.0, "min_steps": 25}),
    # the peer's loss form (issue 60): MNRL's one direction (a partner against the batch's strings) in place of the
    # 2B-view InfoNCE, with and without the preset's distillation; and the preset with at least 100 steps
    ("one-way distill 10", {"blend_alpha": 1.0, "distill": 10.0, "pair_loss": "one-way"}),
    ("one-way no distill", {"blend_alpha": 1.0, "distill": 0.0, "pair_loss": "one-way"}),
    ("distill 10 min steps 100", {"blend_alpha": 1.0, "distill": 10.0, "min_steps": 100}),
    # the peer's settings in our trainer (a diagnostic): its loss form, no distillation, partners unmasked, batches not
    # bucketed by length (the peer's are random)
    (
        "peer-like",
        {"blend_alpha": 1.0, "distill": 0.0, "pair_loss": "one-way", "pair_mask": False, "bucket_by_length": False},
    ),
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


BASE_SIDES: dict[tuple[str, str, str], Any] = {}  # the base's side of each check, once a process (bases are one model)


def checks_of(base, tuned, half: str) -> dict[str, Any]:
    """The general checks on `half`: each check's change, and whether any is over half a margin below the base."""
    from mirror.checks import CHECKS, run_checks, side

    def base_side(model, check, items):
        key = (str(model.source), check.name, half)
        if key not in BASE_SIDES:
            BASE_SIDES[key] = side(model, check, items)
        return BASE_SIDES[key]

    rows = run_checks(base, tuned, half=half, base_side=base_side)
    margins = {c.name: c.margin for c in CHECKS}
    low = [r["name"] for r in rows if r["delta"] < -0.5 * margins.get(r["name"], 1.0)]
    return {"checks": {r["name"]: r["delta"] for r in rows}, "checks_ok": not low, "checks_low": ", ".join(low)}


def run_ours(
    texts, partners, held: HeldOut, base_ranks, config: MirrorConfig, label: str, half: str, checks: bool,
    alphas: tuple[float, ...] = (), memory_mb: int | None = None,
) -> list[dict]:  # fmt: skip
    """The run's row, and one row per blend α of `alphas` of its tuned weights with the base (mirror.blend: no
    training again; only where the run itself is unblended)."""
    from mirror.blend import blend
    from mirror.encoder import load_encoder
    from mirror.train import mirror_tune

    train_texts, train_partners = held.training()
    started = time.perf_counter()
    budget = memory_mb * 2**20 if memory_mb else None  # pinned: the same batches split whatever else runs
    result = mirror_tune(train_texts, config, pairs=train_partners if config.pairs else None, memory_budget=budget)
    train_s = time.perf_counter() - started
    extra = {"steps": result.steps, "notes": list(result.notes)}
    base = load_encoder(config.model, device=str(result.encoder.device))
    if checks:
        extra |= checks_of(base, result.encoder, half)
    rows = [measured(held, base_ranks, result.encoder, label, train_s, extra)]
    for alpha in alphas if config.blend_alpha == 1.0 else ():
        blended = blend(base, result.encoder, alpha)
        more = {"steps": result.steps, **(checks_of(base, blended, half) if checks else {})}
        rows.append(measured(held, base_ranks, blended, f"{label}, blend α {alpha:g}", train_s, more))
    return rows


def run_peer(
    held: HeldOut, base_ranks, config: MirrorConfig, label: str, model_path: str, checks: bool, half: str
) -> dict:
    """The peer on the same training pairs, on `config.device` (bf16 on CUDA, as ours runs there)."""
    from mirror.encoder import load_encoder

    encoder, steps, train_s = train_peer(held, config, model_path)
    extra = {"steps": steps}
    if checks:
        extra |= checks_of(load_encoder(model_path, device=config.device), encoder, half)
    return measured(held, base_ranks, encoder, label, train_s, extra)


def train_peer(held: HeldOut, config: MirrorConfig, model_path: str) -> tuple[Any, int, float]:
    """The peer's encoder trained on `held`'s training pairs (anchor: the partner, positive: the string, in-batch
    negatives) with `config`'s batch, epochs, lr, max length and temperature, its steps and its training's seconds."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from mirror.encoder import load_encoder

    train_texts, train_partners = held.training()
    pairs = [(p, t) for t, p in zip(train_texts, train_partners, strict=True) if p is not None]
    device = config.device
    model = SentenceTransformer(model_path, device=device)
    inference_length = model.max_seq_length
    model.max_seq_length = max(config.max_length, config.pair_max_length)  # trains at our runs' bound
    dataset = Dataset.from_dict({"anchor": [p for p, _ in pairs], "positive": [t for _, t in pairs]})
    epochs = config.epochs_for(len(train_texts))
    with tempfile.TemporaryDirectory() as out:
        limit = {"max_steps": config.max_steps} if config.max_steps else {}
        args = peer_training_args(dataclasses.replace(config, epochs=epochs), out, device, device == "cuda", **limit)
        loss = MultipleNegativesRankingLoss(model, scale=1.0 / config.temperature)
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
        started = time.perf_counter()
        state = trainer.train()
        train_s = time.perf_counter() - started
        # it reads as the base does (and as our tuned models do: mirror keeps the base's inference length). Saved at
        # its training bound (128), it cut every longer text and scored Long documents and Short articles as if it
        # forgot them: the untuned base cut at 128 tokens scores Short articles' dev half -5.8 (RESULTS "A general
        # anchor", the peer's truncation)
        model.max_seq_length = inference_length
        model.save(out + "/m")
        encoder = load_encoder(out + "/m", device=device)
    return encoder, state.global_step, train_s


def choose(rows: list[dict], sets: list[str]) -> dict[str, Any] | None:
    """The pairs run (a sweep row or a blend of one) with the most mean in-domain MRR@10 gain over `sets` among those
    whose general checks' dev halves hold on every set (none more than half a margin below the base): the rule the
    other presets were chosen by. Its label, the sweep variant and blend α that make it, and every candidate's
    figures."""
    base = {r["set"]: r["mrr10"] for r in rows if r["run"] == "base"}
    by_run: dict[str, dict[str, dict]] = {}
    for r in rows:
        if r["run"].startswith("pairs") and "checks_ok" in r:
            by_run.setdefault(r["run"], {})[r["set"]] = r
    candidates = []
    for run, per_set in by_run.items():
        if set(per_set) != set(sets):
            continue
        gains = [per_set[s]["mrr10"] - base[s] for s in sets]
        candidates.append(
            {
                "run": run,
                "mean_gain": round(sum(gains) / len(gains), 2),
                "ok": all(per_set[s]["checks_ok"] for s in sets),
                "low": "; ".join(f"{s}: {per_set[s]['checks_low']}" for s in sets if per_set[s]["checks_low"]),
            }
        )
    candidates.sort(key=lambda c: -c["mean_gain"])
    held = [c for c in candidates if c["ok"]]
    if not held:
        return None
    run = held[0]["run"]
    variant, _, alpha = run.removeprefix("pairs, ").partition(", blend α ")
    return {
        "run": run,
        "variant": None if run.startswith("pairs default") else variant,
        "alpha": float(alpha) if alpha else None,
        "candidates": candidates,
    }


def choose_per_run(rows: list[dict], sets: list[str]) -> list[dict[str, Any]]:
    """Each sweep variant as a run now serves it (issue 60's blend chosen per run: mirror.choose): on each set
    alone, the α (1 and the blends recorded) with the most in-domain gain whose general checks' dev halves hold on
    that set; the variants by mean gain over `sets` of those choices (None where no α held on a set). A recipe chosen
    under one fixed α, chosen again under the per-run choice, from a JSON written with --sweep --checks --alphas."""
    base = {r["set"]: r["mrr10"] for r in rows if r["run"] == "base"}
    picks: dict[str, dict[str, tuple[float, float]]] = {}
    for r in rows:
        if not r["run"].startswith("pairs, ") or "checks_ok" not in r or "mrr10" not in r:
            continue
        variant, _, alpha = r["run"].removeprefix("pairs, ").partition(", blend α ")
        gain = round(r["mrr10"] - base[r["set"]], 1)
        if r["checks_ok"] and gain > picks.setdefault(variant, {}).get(r["set"], (-1e9, 0.0))[0]:
            picks[variant][r["set"]] = (gain, float(alpha) if alpha else 1.0)
        picks.setdefault(variant, {})
    out = []
    for variant, per_set in picks.items():
        chosen = [per_set.get(s) for s in sets]
        mean = round(sum(c[0] for c in chosen) / len(sets), 2) if all(chosen) else None
        row: dict[str, Any] = {"variant": variant, "mean_gain": mean}
        row |= {s: f"{c[0]:+.1f} at α {c[1]:g}" if c else "no α held" for s, c in zip(sets, chosen, strict=True)}
        out.append(row)
    return sorted(out, key=lambda r: -1e9 if r["mean_gain"] is None else -r["mean_gain"])


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
    parser.add_argument(
        "--memory-mb",
        type=int,
        help="each of our runs' memory budget (default: read from the machine when it starts, so what else runs "
        "decides which batches split)",
    )
    parser.add_argument(
        "--no-default", action="store_true", help="skip the pairs preset's own run (a sweep's rows only)"
    )
    parser.add_argument("--limit", type=int, help="rows of each half (a quick look)")
    parser.add_argument("--model", default="bundled", help="the base: 'bundled' or a sentence-transformers folder")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (ours and the peer)")
    parser.add_argument("--max-steps", type=int, help="stop every run after this many steps (a smoke run)")
    parser.add_argument("--seed", type=int, help="the training seed of every run (default: the presets' 42)")
    parser.add_argument(
        "--choose", action="store_true", help="pick the pairs run by the presets' rule (needs --checks)"
    )
    parser.add_argument("--from-choice", help="a JSON this bench wrote with --choose: run its chosen sweep row and α")
    parser.add_argument(
        "--per-run-choice",
        help="a JSON this bench wrote with --sweep --checks --alphas: its variants chosen again, "
        "each served at the α its own run would choose on each set (no training)",
    )
    args = parser.parse_args()
    if args.per_run_choice:
        recorded = json.loads(Path(args.per_run_choice).read_text())
        sets = list(recorded["sets"])
        table = choose_per_run([r for s in sets for r in recorded["sets"][s]["rows"]], sets)
        print_table(table, ["variant", *sets, "mean_gain"])
        write_json("pairs-per-run-choice.json", {"from": args.per_run_choice, "sets": sets, "variants": table})
        return
    from mirror.config import detect_mode
    from mirror.encoder import bundled_model_path, load_encoder

    if args.from_choice:
        # none held the rule: the default alone
        chosen = json.loads(Path(args.from_choice).read_text())["chosen"] or {"run": "pairs default", "variant": None}
        args.sweep, args.variants = bool(chosen["variant"]), chosen["variant"] or ""
        args.alphas = str(chosen.get("alpha") or "")
        print(f"the chosen pairs run: {chosen['run']}", flush=True)
    model_path = str(bundled_model_path()) if args.model == "bundled" else args.model
    common = {"model": args.model, "device": args.device, "max_steps": args.max_steps, "seed": args.seed}
    out: dict[str, Any] = {}
    rows_all = []
    for name in args.sets.split(","):
        texts, partners = read_set(name, args.half, args.limit)
        held = HeldOut(texts, partners, holdout(partners, HELD_FRACTION, HELD_MOST, seed=7), SETS[name][1:])
        mode, _ = detect_mode(held.training()[0])
        base = load_encoder(args.model, device=args.device)
        base_ranks = held.ranks(base)
        rows = [{"set": name, "run": "base", **{k: round(v, 1) for k, v in figures(base_ranks).items()}}]
        print(f"{name} {args.half}: {len(texts):,} strings, {len(held.rows)} held out, {mode} preset", flush=True)
        plain = MirrorConfig.preset(mode, **common)
        paired = MirrorConfig.preset(mode, pairs=True, **common)
        runs: list[tuple[str, MirrorConfig]] = [] if args.no_mirror else [("mirror (no partners)", plain)]
        runs += [] if args.no_default else [("pairs default", paired)]
        if args.sweep:
            wanted = set(args.variants.split(",")) if args.variants else {label for label, _ in SWEEP}
            runs += [(f"pairs, {v}", dataclasses.replace(paired, **change)) for v, change in SWEEP if v in wanted]
        alphas = tuple(float(a) for a in args.alphas.split(",") if a.strip())
        for label, config in runs:
            try:
                done = run_ours(
                    texts, partners, held, base_ranks, config, label, args.half, args.checks, alphas, args.memory_mb
                )
            except Exception as e:  # one variant's failure (a remedy on a new device) leaves the others measured
                done = [{"run": label, "error": f"{type(e).__name__}: {e}"}]
            for row in done:
                rows.append({"set": name, **row})
                print(f"  {rows[-1]}", flush=True)
        if args.peer:
            peer = run_peer(held, base_ranks, paired, "peer: ST trainer + MNRL", model_path, args.checks, args.half)
            rows.append({"set": name, **peer})
            print(f"  {rows[-1]}", flush=True)
            for ours in [r for r in rows if r["run"].startswith("pairs") and "blend α" not in r["run"]]:
                if "train_s" in ours:
                    ratio = round(ours["train_s"] / peer["train_s"], 2)
                    rows.append({"set": name, "run": f"{ours['run']} / peer train time", "train_s": ratio})
        out[name] = {"strings": len(texts), "held_out": len(held.rows), "mode": mode, "rows": rows}
        rows_all += rows
    print_table(
        rows_all,
        ["set", "run", "steps", "train_s", "mrr10", "r1", "r10", "mrr10_gain", "checks_ok", "checks_low", "error"],
    )
    payload: dict[str, Any] = {"args": vars(args), "sets": out}
    if args.choose:
        payload["chosen"] = choose(rows_all, args.sets.split(","))
        print_table(payload["chosen"]["candidates"] if payload["chosen"] else [], ["run", "mean_gain", "ok", "low"])
        print(f"chosen: {payload['chosen'] and payload['chosen']['run']}", flush=True)
    payload["config"] = dataclasses.asdict(MirrorConfig.preset("sentences", pairs=True))
    payload["config_words"] = dataclasses.asdict(MirrorConfig.preset("words", pairs=True))
    write_json(f"pairs-{args.half}{'' if args.seed is None else f'-seed{args.seed}'}.json", payload)


if __name__ == "__main__":
    main()
