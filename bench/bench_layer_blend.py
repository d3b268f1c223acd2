"""Is one α for every weight the best blend? (issue 60: in-domain below the peer under the checks' rule.)

    .venv/bin/python bench/bench_layer_blend.py [--sets stdlib,foldoc] [--half dev] [--limit 1000] [--seed 0] [--memory-mb 12000]

A pairs run's blend (mirror.choose) sets every weight to (1 - α)·base + α·tuned with one α from mirror.choose.ALPHAS.
This bench trains the pairs preset once per set (unblended, as a run does before it chooses), then measures blends
that need no training again:
- uniform α on a finer grid than the app's four (1, 0.875, ..., 0.25);
- a profile over depth: α rising or falling linearly from the embeddings (depth 0) to the last layer (depth 1; the
  pooler with it), and the embeddings kept at the base with the layers at one α.
Each blend is measured as a run's choice sees it and as a report would: of the set half's rows a seeded 20% (at most
600) never trains; half of those are the *choice* rows (held-out MRR@10 a run chooses on), half the *report* rows; the
general checks' dev halves with their noise (the rule the app serves by: mirror.choose.within_rule), and their check
halves (reported: a check past half its margin below the base). Then each family of blends serves the one a run would
(the most choice-row gain within the rule on the dev halves) and the table reports its report-row gain and check
halves. `--freeze-top N` trains with the top N layers frozen (a bench-only variant: where the blends say forgetting
sits, the lower layers learn the pairs alone); `--hard-batches SHARE` trains with batches of a seed row and its
nearest rows by the base (that share of each batch; bench-only: topic-aware batches, harder negatives);
`--families uniform` measures the uniform blends only, `--families app` the app's four α. `--variants` trains more
than the preset on each set ("preset;general_anchor=10;peer": MirrorConfig fields over the preset, or the peer,
sentence-transformers' trainer with MultipleNegativesRankingLoss on the same rows, blended with the base as ours).
JSON: bench/out/layer-blend-<half>[-top<N>-frozen][-hard<SHARE>][-seed<seed>].json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_pairs
from common import print_table, write_json

from mirror.config import MirrorConfig
from mirror.pairs import HeldOut, figures, gain, holdout

UNIFORM = (1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25)
APP_GRID = (1.0, 0.75, 0.5, 0.25)  # mirror.choose.ALPHAS when this bench was written
LINES = ((0.0, 1.0), (0.5, 1.0), (0.25, 0.75), (1.0, 0.0), (1.0, 0.5), (0.75, 0.25))
EMBEDDINGS_AT_BASE = (1.0, 0.75)


def profiles() -> list[tuple[str, str, Callable[[float], float]]]:
    """(family, label, α of depth) for every blend measured; depth 0 the embeddings, 1 the last layer."""
    out: list[tuple[str, str, Callable[[float], float]]] = []
    for a in UNIFORM:
        out.append(("uniform", f"α {a:g}", lambda d, a=a: a))
    for lo, hi in LINES:
        family = "rising" if hi > lo else "falling"
        out.append((family, f"α {lo:g}→{hi:g}", lambda d, lo=lo, hi=hi: lo + (hi - lo) * d))
    for a in EMBEDDINGS_AT_BASE:
        out.append(("embeddings at base", f"emb 0, layers {a:g}", lambda d, a=a: 0.0 if d == 0.0 else a))
    return out


def depth_of(key: str, layers: int) -> float:
    """0 for the embeddings, (i + 1) / layers for encoder layer i, 1 for anything after (the pooler)."""
    if key.startswith("embeddings."):
        return 0.0
    from mirror.lora import LAYER

    found = LAYER.search(key)
    return (int(found.group(1)) + 1) / layers if found else 1.0


def set_profile(work: Any, trained: dict, base_state: dict, alpha_of: Callable[[float], float]) -> None:
    import torch

    layers = int(work.model.config.num_hidden_layers)
    mixed = {}
    for key, w in trained.items():
        if not w.is_floating_point():
            mixed[key] = w
            continue
        a = float(alpha_of(depth_of(key, layers)))
        mixed[key] = base_state[key] * (1.0 - a) + w * a
    with work.changing_weights(), torch.no_grad():
        work.model.load_state_dict(mixed)


def freeze_top(n: int) -> None:
    """A bench-only variant (not a MirrorConfig field): the top `n` transformer layers keep the base's weights while
    the rest trains (mirror.train's set_trainable wrapped), the mirror image of `freeze_layers`; where the blends
    say forgetting sits (the top layers), the lower layers then learn the pairs alone."""
    import mirror.train
    from mirror.lora import LAYER
    from mirror.trainable import set_trainable

    def wrapped(model: Any, config: Any) -> None:
        set_trainable(model, config)
        layers = int(model.config.num_hidden_layers)
        for name, param in model.named_parameters():
            found = LAYER.search(name)
            if found is not None and int(found.group(1)) >= layers - n:
                param.requires_grad_(False)

    mirror.train.set_trainable = wrapped


def hard_batches(vectors: Any, share: float) -> None:
    """A bench-only variant (not a MirrorConfig field): each batch is a seed row and, for `share` of the batch, its
    nearest rows by the base encoder (`vectors`: unit rows, one a training row, in mirror_tune's order), the rest
    drawn at random, so that a step's negatives are the rows most like its positives (topic-aware batches, as TAS-B
    samples them); the seeds are drawn from the run's seeded stream, rows sharing a partner are kept apart
    (mirror.plan.separate) as always. mirror.plan.plan_batches replaced: the plan and the run draw the same."""
    import numpy as np

    import mirror.plan

    def batches(n, batch_size, rng, min_size=2, lengths=None, groups=None):
        if n != len(vectors):
            raise RuntimeError(f"hard batches: {n} training rows, {len(vectors)} vectors")
        left = list(range(n))
        rng.shuffle(left)
        free = np.ones(n, dtype=bool)
        out = []
        for seed in left:
            if not free[seed]:
                continue
            free[seed] = False
            near = max(0, min(batch_size - 1, round(share * batch_size) - 1))
            idx = np.flatnonzero(free)
            batch = [seed]
            if near and len(idx):
                sims = vectors[idx] @ vectors[seed]
                take = idx[np.argsort(-sims)[:near]]
                batch += [int(i) for i in take]
                free[take] = False
            rest = [i for i in left if free[i]][: batch_size - len(batch)]
            batch += rest
            free[rest] = False
            out.append(batch)
        if len(out) > 1 and len(out[-1]) < min_size:
            out[-2].extend(out.pop())
        rng.shuffle(out)
        return out if groups is None else mirror.plan.separate(out, groups, None, min_size)

    mirror.plan.plan_batches = batches


def one(
    name: str,
    half: str,
    limit: int | None,
    seed: int,
    memory_mb: int | None,
    max_steps: int | None = None,
    check_halves: bool = True,
    families: tuple[str, ...] = (),
    hard: float = 0.0,
    device: str = "cpu",
    variant: str = "",
    model: str = "bundled",
) -> list[dict[str, Any]]:
    from mirror.checks import CHECKS
    from mirror.choose import check_changes, within_rule
    from mirror.config import detect_mode
    from mirror.encoder import load_encoder
    from mirror.train import mirror_tune

    texts, partners = bench_pairs.read_set(name, half, limit)
    held = HeldOut(texts, partners, holdout(partners, bench_pairs.HELD_FRACTION, bench_pairs.HELD_MOST, seed=7))
    rows = list(held.rows)
    random.Random(seed).shuffle(rows)
    choice = HeldOut(texts, partners, sorted(rows[: len(rows) // 2]))
    report = HeldOut(texts, partners, sorted(rows[len(rows) // 2 :]))
    mode, _ = detect_mode(held.training()[0])
    config = dataclasses.replace(
        MirrorConfig.preset(mode, pairs=True, seed=seed, device=device, max_steps=max_steps, model=model),
        blend_alpha=1.0,
        **overrides(variant),
    )
    base = load_encoder(config.model, device=device)
    base_choice, base_report = choice.ranks(base), report.ranks(base)
    train_texts, train_partners = held.training()
    if hard:
        hard_batches(base.encode(train_texts, normalize=True), hard)
    started = time.perf_counter()
    budget = memory_mb * 2**20 if memory_mb else None
    if variant == "peer":
        from mirror.encoder import bundled_model_path

        path = str(bundled_model_path()) if model == "bundled" else model
        work, steps, seconds = bench_pairs.train_peer(held, config, path)
    else:
        result = mirror_tune(train_texts, config, pairs=train_partners, memory_budget=budget)
        work, steps, seconds = result.encoder, result.steps, time.perf_counter() - started
    train_s = round(seconds, 1)
    run = variant or "preset"
    print(f"{name} {half} ({run}): {len(texts):,} strings, {len(rows)} held out, {steps} steps in {train_s} s")
    trained = {k: v.detach().clone() for k, v in work.model.state_dict().items()}
    base_state = {k: v.detach().to(trained[k].dtype) for k, v in base.model.state_dict().items()}
    margins = {c.name: c.margin for c in CHECKS}
    kept_dev, kept_check = KEPT["dev"], KEPT["check"]
    out = []
    for family, label, alpha_of in profiles():
        if families and family not in families and not (family == "uniform" and "app" in families):
            continue
        if "app" in families and family == "uniform" and alpha_of(1.0) not in APP_GRID:
            continue  # the app's four α only
        set_profile(work, trained, base_state, alpha_of)
        chosen_ranks, report_ranks = choice.ranks(work), report.ranks(work)
        dev, dev_noise = check_changes(base, work, CHECKS, kept_dev)
        check = check_changes(base, work, CHECKS, kept_check, "check")[0] if check_halves else {}
        g = gain(base_report, report_ranks)
        row = {
            "set": name,
            "half": half,
            "seed": seed,
            "variant": run,
            "steps": steps,
            "train_s": train_s,
            "family": family,
            "blend": label,
            "choice_gain": round(figures(chosen_ranks)["mrr10"] - figures(base_choice)["mrr10"], 2),
            "report_gain": round(g.tuned["mrr10"] - g.base["mrr10"], 2),
            "report_ci": [round(g.low["mrr10"], 1), round(g.high["mrr10"], 1)],
            "dev_within": within_rule(dev, CHECKS, dev_noise),
            "dev_within_strict": within_rule(dev, CHECKS),
            "dev": dev,
            "dev_noise": dev_noise,
            "check": check,
            "check_past": ", ".join(k for k, v in check.items() if v < -0.5 * margins[k]),
        }
        out.append(row)
        print(
            f"  {label:>20}: choice {row['choice_gain']:+.1f}, report {row['report_gain']:+.1f}, "
            f"dev within {row['dev_within']}, check past: {row['check_past'] or 'none'}",
            flush=True,
        )
    return out


KEPT: dict[str, dict] = {"dev": {}, "check": {}}  # the base's side of each check, once a process (one base)


def overrides(variant: str) -> dict[str, Any]:
    """A variant's MirrorConfig fields: "preset" or "" none, "peer" none (the peer trains with its own trainer),
    else "field=value,field=value" (numbers as floats, ints where the field is one)."""
    if variant in ("", "preset", "peer"):
        return {}
    defaults = MirrorConfig()
    out: dict[str, Any] = {}
    for part in variant.split(","):
        key, _, raw = part.partition("=")
        key = key.strip()
        kind = type(getattr(defaults, key))
        out[key] = raw.strip() if kind is str else (raw.strip() == "true" if kind is bool else kind(float(raw)))
    return out


def served(rows: list[dict[str, Any]], keep: Callable[[dict[str, Any]], bool], rule: str = "dev_within") -> dict:
    """The blend a run would serve among `rows` that `keep` admits: the most choice-row gain within the rule (a tie:
    the first listed); none within: the lowest uniform α, as mirror.choose serves."""
    pool = [r for r in rows if keep(r)]
    within = [r for r in pool if r[rule]]
    if within:
        return max(within, key=lambda r: r["choice_gain"])
    return min((r for r in pool if r["family"] == "uniform"), key=lambda r: float(r["blend"].split()[1]))


FAMILIES: dict[str, Callable[[dict[str, Any]], bool]] = {
    "app grid (4 α)": lambda r: r["family"] == "uniform" and float(r["blend"].split()[1]) in APP_GRID,
    "uniform (7 α)": lambda r: r["family"] == "uniform",
    "uniform + rising": lambda r: r["family"] in ("uniform", "rising"),
    "uniform + falling": lambda r: r["family"] in ("uniform", "falling"),
    "uniform + embeddings at base": lambda r: r["family"] in ("uniform", "embeddings at base"),
    "all profiles": lambda r: True,
}


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    table = []
    for key in sorted({(r["set"], r["half"], r["seed"], r.get("variant", "preset")) for r in rows}):
        mine = [r for r in rows if (r["set"], r["half"], r["seed"], r.get("variant", "preset")) == key]
        shown: list[list[dict[str, Any]]] = []
        for family, keep in FAMILIES.items():
            pool = [r for r in mine if keep(r)]
            if pool in shown:
                continue  # the same blends as a family above (its own were not measured)
            shown.append(pool)
            r = served(mine, keep)
            table.append(
                {
                    "set": key[0],
                    "seed": key[2],
                    "variant": key[3],
                    "family": family,
                    "served": r["blend"],
                    "choice_gain": r["choice_gain"],
                    "report_gain": r["report_gain"],
                    "check_past": r["check_past"] or "none",
                }
            )
    return table


def cut_base(tokens: int, model: str, device: str) -> list[dict[str, Any]]:
    """Each general check's change (± its standard error) of the untuned base reading every text cut at `tokens`,
    against the base reading its own inference length: what a model saved with a shorter `max_seq_length` loses on
    the checks without any training (the peer's truncation, bench/RESULTS.md "A general anchor")."""
    from mirror.checks import CHECKS
    from mirror.choose import check_changes
    from mirror.encoder import load_encoder

    base, cut = load_encoder(model, device=device), load_encoder(model, device=device)
    cut.max_seq_length = tokens
    rows = []
    for half in ("dev", "check"):
        change, noise = check_changes(base, cut, CHECKS, {}, half)
        rows.append({"half": half, **{k: f"{v:+.2f} ± {noise[k]:.2f}" for k, v in change.items()}})
    write_json(f"cut-base-{tokens}.json", {"tokens": tokens, "rows": rows})
    return rows


def retried(rows: list[dict[str, Any]], first: str = "preset", second: str = "general_anchor=30") -> list[dict]:
    """The run the app makes with `retry_anchor` (mirror.job._train_again), from two variants' rows on the same set,
    half and seed (the app's four α): `first` served as mirror.choose serves it; where its checks held it below its
    best α (Choice.bound), the `second` training (the anchored one) served instead if mirror.choose.better_of says
    so. One row per set, half and seed where the first ran (and the second, where the first was held down)."""
    from mirror.choose import Candidate, Choice, better_of

    def as_choice(mine: list[dict[str, Any]]) -> tuple[Choice, dict[str, Any]]:
        grid = [r for r in mine if FAMILIES["app grid (4 α)"](r)]
        r = served(grid, lambda r: True)
        alpha = lambda r: float(r["blend"].split()[1])  # noqa: E731
        candidates = tuple(Candidate(alpha(c), c["choice_gain"], within=c["dev_within"]) for c in grid)
        return Choice(alpha(r), 0.0, candidates, 0, 0, ""), r

    out = []
    for key in sorted({(r["set"], r["half"], r["seed"]) for r in rows}):
        by = {v: [r for r in rows if (r["set"], r["half"], r["seed"]) == key and r.get("variant") == v]
              for v in (first, second)}  # fmt: skip
        if not by[first]:
            continue
        choice, r = as_choice(by[first])
        trained = 1
        if choice.bound:
            if not by[second]:
                continue  # held down, and the anchored training was not run here
            trained = 2
            again, r2 = as_choice(by[second])
            r = r2 if better_of(choice, again) else r
        out.append(
            {
                "set": key[0],
                "half": key[1],
                "seed": key[2],
                "trainings": trained,
                "served": f"{r['variant']} {r['blend']}",
                "choice_gain": r["choice_gain"],
                "report_gain": r["report_gain"],
                "report_ci": r["report_ci"],
                "check_past": r["check_past"] or "none",
            }
        )
    return out


def best_variant(rows: list[dict[str, Any]], exclude: list[str]) -> str:
    """The variant whose blend a run serves (the app's four α) gains the most, in the mean over its sets of the
    choice and report rows' gains (both rows of a dev half: more rows, less noise); a tie, the first run."""
    gains: dict[str, list[float]] = {}
    for r in summary(rows):
        if r["family"] == "app grid (4 α)" and r["variant"] not in exclude:
            gains.setdefault(r["variant"], []).append((r["choice_gain"] + r["report_gain"]) / 2)
    order = list(dict.fromkeys(r.get("variant", "preset") for r in rows))
    return max(gains, key=lambda v: (sum(gains[v]) / len(gains[v]), -order.index(v)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="stdlib,foldoc")
    parser.add_argument("--half", choices=["dev", "check"], default="dev")
    parser.add_argument("--limit", type=int, default=1000, help="rows of each half (bench_blend_choice's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory-mb", type=int, default=12000, help="the run's memory budget (pinned: same splits)")
    parser.add_argument("--max-steps", type=int, help="stop training after this many steps (a smoke run)")
    parser.add_argument("--families", default="", help="only these blend families (comma-separated: uniform, ...)")
    parser.add_argument("--freeze-top", type=int, default=0, help="train with the top N layers frozen (bench-only)")
    parser.add_argument(
        "--hard-batches", type=float, default=0.0, help="share of each batch from a seed row's nearest (bench-only)"
    )
    parser.add_argument("--no-check-halves", action="store_true", help="the checks' dev halves only (a dev look)")
    parser.add_argument("--device", default="cpu", help="where to train and measure (cuda on a GPU)")
    parser.add_argument("--model", default="bundled", help="the base (a folder; default the bundled model)")
    parser.add_argument(
        "--variants",
        default="preset",
        help="runs per set, ';'-separated: preset, peer (sentence-transformers' trainer + MNRL, then blended as ours), "
        "or MirrorConfig fields over the preset ('general_anchor=10' or 'distill=0,general_anchor=30')",
    )
    parser.add_argument("--out", default="", help="the JSON's name under bench/out/ (default: from the options)")
    parser.add_argument(
        "--best-variant", help="a JSON this bench wrote: print the variant served the most gain (no run)"
    )
    parser.add_argument("--exclude", default="", help="with --best-variant: variants not to pick (';'-separated)")
    parser.add_argument(
        "--retried",
        nargs="+",
        help="JSONs this bench wrote: no run; the app's second training where the checks hold a blend down (--first "
        "served, --second where they do and it gains more: mirror.job's retry_anchor), per set, half and seed",
    )
    parser.add_argument("--first", default="preset", help="with --retried: the first training's variant")
    parser.add_argument("--second", default="general_anchor=30", help="with --retried: the anchored training's")
    parser.add_argument(
        "--cut-base", type=int, help="no run: the general checks of the base read at this many tokens against it"
    )
    args = parser.parse_args()
    if args.cut_base:
        table = cut_base(args.cut_base, args.model, args.device)
        print_table(table, list(table[0]))
        return
    if args.retried:
        rows = [r for f in args.retried for r in json.loads(Path(f).read_text())["rows"]]
        table = retried(rows, args.first, args.second)
        print_table(table, list(table[0]) if table else ["set"])
        write_json(args.out or "retried.json", {"rows": table, "args": vars(args)})
        return
    if args.best_variant:
        print(best_variant(json.loads(Path(args.best_variant).read_text())["rows"], args.exclude.split(";")))
        return
    bench_pairs.SETS.setdefault("go", (bench_pairs.EXAMPLES / "pairs" / "gene-ontology.tsv", "text", "term"))
    if args.freeze_top:
        freeze_top(args.freeze_top)
    rows: list[dict[str, Any]] = []
    top = f"-top{args.freeze_top}-frozen" if args.freeze_top else ""
    top += f"-hard{args.hard_batches:g}" if args.hard_batches else ""
    name = args.out or f"layer-blend-{args.half}{top}{f'-seed{args.seed}' if args.seed else ''}.json"
    for set_name in args.sets.split(","):
        for variant in [v.strip() for v in args.variants.split(";") if v.strip()]:
            rows += one(
                set_name,
                args.half,
                args.limit or None,
                args.seed,
                args.memory_mb,
                args.max_steps,
                not args.no_check_halves,
                tuple(f for f in args.families.split(",") if f),
                args.hard_batches,
                args.device,
                variant,
                args.model,
            )
            write_json(name, {"rows": rows, "args": vars(args), "partial": True})
    columns = ["set", "variant", "blend", "choice_gain", "report_gain", "dev_within", "dev_within_strict", "check_past"]
    print_table(rows, columns)
    table = summary(rows)
    print_table(table, ["set", "seed", "variant", "family", "served", "choice_gain", "report_gain", "check_past"])
    write_json(name, {"rows": rows, "summary": table, "args": vars(args)})


if __name__ == "__main__":
    main()
