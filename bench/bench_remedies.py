"""Remedies against forgetting: train the bundled model with each remedy (mirror.config: distill, l2_base,
freeze_layers/freeze_embeddings, blend_alpha, join_views, max_steps, mix_general, lora_rank) for a preset, then score
every saved model FROM A FRESH LOAD of its folder: in-domain (sentences: STS-B dev; words: SimLex-999) and every
general check, each on its DEV half (to choose) and its CHECK half (to report), plus STS-B test (held out, where
../shared/data has it); with training time and peak memory (max RSS of the training process). WiSE-FT rows
("+blend"): a trained model that does not hold on dev (a general dev check more than half its margin below the base,
`holds`) is blended with its base at the α of ALPHAS that keeps the most in-domain dev score among those that hold.

    .venv/bin/python bench/bench_remedies.py --preset sentences                      # every remedy in REMEDIES
    .venv/bin/python bench/bench_remedies.py --preset sentences --remedy none --remedy distill10 --blend none
    .venv/bin/python bench/bench_remedies.py --preset words --remedy none --remedy distill10
    .venv/bin/python bench/bench_remedies.py --table                                 # RESULTS' table, from the caches

Models go to --models (default /work/models, or $MIRROR_BENCH_MODELS) as <preset>-<remedy>; a folder already there
is scored, not retrained (--retrain to redo it). Scores are cached in the folder (bench_scores.json). JSON in
bench/out/remedies-<preset>-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import ROOT, SHARED, data_path, print_table, write_json

from mirror.blend import blend_folder
from mirror.checks import CHECKS, check_items, compare, score, side
from mirror.encoder import load_encoder
from mirror.evaluate import bootstrap_spearman, interval, pair_cosines, read_pairs, spearman

_BASE_SIDES: dict[tuple[str, str], object] = {}  # (check, half): the base's side, scored once per process


def general_checks(base, tuned, half: str) -> list[dict]:
    """The rows of run_checks, each with its unrounded change too (`exact_delta`: what `holds` compares)."""
    rows = []
    for check in CHECKS:
        items = check_items(check, half)
        if (check.name, half) not in _BASE_SIDES:
            _BASE_SIDES[check.name, half] = side(base, check, items)
        base_side, tuned_side = _BASE_SIDES[check.name, half], side(tuned, check, items)
        row = compare(check, items, base_side, tuned_side)
        rows.append(row | {"exact_delta": score(items, tuned_side) - score(items, base_side)})
    return rows


def margin_of(name: str) -> float:
    return next(c.margin for c in CHECKS if c.name == name)


MODELS = Path(os.environ.get("MIRROR_BENCH_MODELS", "/work/models"))
# name: the MirrorConfig overrides on top of the preset, and what the remedy does
REMEDIES: dict[str, tuple[dict, str]] = {
    "none": ({}, "the preset as it was (c308252)"),
    "distill1": ({"distill": 1.0}, "λ 1 · mean(1 − cos) to the frozen base's embedding"),
    "distill10": ({"distill": 10.0}, "λ 10 · mean(1 − cos) to the frozen base's embedding"),
    "distill30": ({"distill": 30.0}, "λ 30 · mean(1 − cos) to the frozen base's embedding"),
    "l2sp": ({"l2_base": 1.0}, "λ 1 · Σ‖θ − θ_base‖² (L2-SP)"),
    "l2sp10": ({"l2_base": 10.0}, "λ 10 · Σ‖θ − θ_base‖² (L2-SP)"),
    "l2sp100": ({"l2_base": 100.0}, "λ 100 · Σ‖θ − θ_base‖² (L2-SP)"),
    "freeze3": ({"freeze_layers": 3, "freeze_embeddings": True}, "embeddings and the lower 3 of 6 layers frozen"),
    "freeze5": ({"freeze_layers": 5, "freeze_embeddings": True}, "embeddings and the lower 5 of 6 layers frozen"),
    "alpha0.5": ({"blend_alpha": 0.5}, "WiSE-FT α 0.5 after training (fixed)"),
    "distill10-freeze3": ({"distill": 10.0, "freeze_layers": 3, "freeze_embeddings": True}, "both"),
    "join2": ({"join_views": 2, "max_length": 100}, "longer views: 2 strings joined into one training string"),
    "join4": ({"join_views": 4, "max_length": 200}, "longer views: 4 strings joined into one training string"),
    # early stopping: training has no schedule (constant lr, seeded order), so the first N steps of a run are the run
    # stopped at step N; stopping on the general checks = the largest N that holds on dev
    **{f"stop{n}": ({"max_steps": n}, f"early stop: the first {n} steps") for n in (10, 20, 30, 40)},
    # general text (examples/general: Wikipedia sentences, words for a words run) as this share of every batch
    **{f"mix{p}": ({"mix_general": p / 100}, f"{p}% of every batch general text") for p in (10, 25, 50)},
    # LoRA: rank-r adapters on the attention layers, base frozen, merged at the end; adapters usually want a higher lr
    **{f"lora{r}": ({"lora_rank": r}, f"LoRA rank {r} on the attention layers") for r in (8, 16)},
    **{
        f"lora8-lr{lr:.0e}".replace("e-0", "e-"): ({"lora_rank": 8, "lr": lr}, f"LoRA rank 8, lr {lr:g}")
        for lr in (1e-4, 1e-3)
    },
}
ALPHAS = (0.25, 0.5, 0.75)  # the blends tried for a "+blend" row (α = 1 is the trained model's own row)
# preset: (training set, in-domain pairs set, the general check that is that same set, so not "general" here)
PRESETS = {"words": ("words", "simlex", "SimLex-999"), "sentences": ("sentences", "sts_dev", "STS-B dev")}
SCORES_FILE = "bench_scores.json"
TRAIN_FILE = "bench_train.json"


def train_one(preset: str, overrides: dict, out: Path) -> dict:
    """Train in a child process (`python -m mirror train`), so its peak RSS is the run's own; returns its timings."""
    flags = []
    # every remedy on top of the preset as it was at c308252 (no blend: the sentences preset blends at α 0.5 since)
    for key, value in {"blend_alpha": 1.0, **overrides}.items():
        flag = "--" + key.replace("_", "-")
        flags += [flag] if value is True else [flag, str(value)]
    cmd = [sys.executable, "-m", "mirror", "train", str(data_path(PRESETS[preset][0])), "--mode", preset]
    cmd += ["--out", str(out), "--quiet", *flags]
    code = (
        "import resource, runpy, sys, json, time; sys.argv = ['mirror', *sys.argv[1:]]; t = time.perf_counter()\n"
        "try:\n    runpy.run_module('mirror', run_name='__main__')\nexcept SystemExit as e:\n    rc = e.code\n"
        "else:\n    rc = 0\n"
        "print(json.dumps({'rc': rc, 'wall_s': time.perf_counter() - t, "
        "'peak_rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))"
    )
    print("train:", " ".join(cmd[1:]), flush=True)
    proc = subprocess.run([sys.executable, "-c", code, *cmd[3:]], cwd=ROOT, capture_output=True, text=True)
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "{}"
    info = json.loads(last) if last.startswith("{") else {}
    if proc.returncode or info.get("rc"):
        raise SystemExit(f"training failed: {proc.stderr[-2000:]}")
    stats = json.loads((out / "mirror_config.json").read_text())["stats"]
    info |= {"train_s": stats["seconds"], "steps": stats["steps"], "overrides": overrides}
    (out / TRAIN_FILE).write_text(json.dumps(info, indent=2))
    return info


def in_domain(base, tuned, pairs) -> dict:
    """Spearman ×100 of base and tuned on in-domain pairs, the change's paired bootstrap 95% interval."""
    gold = [p[2] for p in pairs]
    cb, ct = pair_cosines(base, pairs), pair_cosines(tuned, pairs)
    boot = bootstrap_spearman(gold, cb, ct, n_resamples=500, seed=0)
    ci = interval(100 * (boot[:, 1] - boot[:, 0]))
    b, t = 100 * spearman(cb, gold), 100 * spearman(ct, gold)
    return {"base": round(b, 1), "tuned": round(t, 1), "delta": round(t - b, 1), "ci": [round(c, 1) for c in ci]}


def scores(preset: str, base, folder: Path) -> dict:
    """Every score of the model saved in `folder`, loaded afresh (cached in the folder, keyed by the checks' names)."""
    cache = folder / SCORES_FILE
    names = [c.name for c in CHECKS]
    if cache.is_file():
        cached = json.loads(cache.read_text())
        if cached.get("checks") == names and cached.get("v") == 3:
            return cached
    tuned = load_encoder(folder)  # a fresh load of what was saved, never the training process's encoder
    _, proxy, _ = PRESETS[preset]
    pairs = read_pairs(data_path(proxy))
    started = time.perf_counter()
    out: dict = {"checks": names, "v": 3}
    for half, picked in (("dev", pairs[0::2]), ("check", pairs[1::2])):
        out[half] = {"in_domain": in_domain(base, tuned, picked), "general": general_checks(base, tuned, half)}
    test = SHARED / "stsb" / "sts-test.csv"
    if test.is_file():
        out["sts_test"] = in_domain(base, tuned, read_pairs(test))
    out["score_s"] = round(time.perf_counter() - started, 1)
    cache.write_text(json.dumps(out, indent=2))
    return out


def general_deltas(score: dict, half: str, own: str) -> dict[str, float]:
    return {c["name"]: c.get("exact_delta", c["delta"]) for c in score[half]["general"] if c["name"] != own}


def holds(score: dict, own: str) -> bool:
    """No general DEV check more than half its margin below the base (the unrounded change): "at or above the base",
    with the checks' noise.
    Half, not the whole margin: the long-document check sees a muted loss (the sentences default: -1.8 here, -11 on
    the issue's held-out news set), so a drop it can only just see is not waved through."""
    return all(d >= -margin_of(n) / 2 for n, d in general_deltas(score, "dev", own).items())


def best_blend(preset: str, base, folder: Path) -> tuple[float, Path, dict]:
    """1.0 when the model in `folder` holds on dev (`holds`); else blend it at each α in ALPHAS (saved, then scored
    from a fresh load) and pick the α with the most in-domain DEV score whose general DEV checks all hold (1.0 when
    none does)."""
    own = PRESETS[preset][2]
    tried = {1.0: (folder, scores(preset, base, folder))}
    if holds(tried[1.0][1], own):  # the run alone does not forget: no blend (no change without a measured need)
        return 1.0, folder, {1.0: tried[1.0][1]["dev"]}
    for alpha in ALPHAS:
        out = folder.parent / f"{folder.name}+blend{alpha:g}"
        if not (out / "mirror_config.json").is_file():
            blend_folder(base, folder, alpha, out)
        tried[alpha] = (out, scores(preset, base, out))
    ok = {a: s for a, (_, s) in tried.items() if holds(s, own)}
    pool = ok or {1.0: tried[1.0][1]}
    alpha = max(pool, key=lambda a: (pool[a]["dev"]["in_domain"]["tuned"], a))
    return alpha, tried[alpha][0], {a: s["dev"] for a, (_, s) in tried.items()}


def row(name: str, what: str, score: dict, train: dict, own: str) -> dict:
    """One line of the table: in-domain dev and check half, each general check's check-half change and interval."""
    r = {
        "remedy": name,
        "what": what,
        "in-domain dev": score["dev"]["in_domain"]["tuned"],
        "in-domain check": f"{score['check']['in_domain']['tuned']} ({score['check']['in_domain']['delta']:+})",
    }
    if "sts_test" in score:
        r["STS-B test"] = f"{score['sts_test']['tuned']} ({score['sts_test']['delta']:+})"
    for c in score["check"]["general"]:
        ci = f" [{c['ci'][0]:+}, {c['ci'][1]:+}]" if c.get("ci") else ""
        r[c["name"] + (" (in-domain)" if c["name"] == own else "")] = f"{c['tuned']} ({c['delta']:+}{ci})" + (
            " WORSE" if c["worse"] else ""
        )
    r["min general dev Δ"] = min(general_deltas(score, "dev", own).values())
    r["holds on dev"] = holds(score, own)
    r["train s"] = train.get("train_s", "")
    r["peak MB"] = round(train["peak_rss_mb"]) if train.get("peak_rss_mb") else ""
    return r


def table(models: Path) -> None:
    """RESULTS.md's one table, from the scores cached in the model folders (no model is loaded): every preset and
    remedy (and blend) scored so far, check half, Spearman ×100 (long documents: nDCG@10 ×100)."""
    names, kept = [c.name for c in CHECKS], {}
    print(
        "| preset | remedy | in-domain dev | in-domain check | STS-B test | "
        + " | ".join(names)
        + " | lowest general dev Δ | train s | peak MB |"
    )
    print("|---|---|---:|---:|---:|" + "---:|" * len(names) + "---:|---:|---:|")
    for preset, (_, _, own) in PRESETS.items():
        for folder in sorted(models.glob(f"{preset}-*")):
            cache = folder / SCORES_FILE
            if not cache.is_file() or json.loads(cache.read_text()).get("checks") != names:
                continue
            score = json.loads(cache.read_text())
            train = json.loads((folder / TRAIN_FILE).read_text()) if (folder / TRAIN_FILE).is_file() else {}
            if not train and "+blend" not in folder.name:
                train = {"train_s": json.loads((folder / "mirror_config.json").read_text())["stats"]["seconds"]}
            r = row(folder.name.removeprefix(f"{preset}-"), "", score, train, own)
            kept[f"{preset}/{r['remedy']}"] = {"train": train, "scores": score}
            cells = [r["in-domain dev"], r["in-domain check"], r.get("STS-B test", "")]
            cells += [r[n + (" (in-domain)" if n == own else "")] for n in names]
            cells += [f"{r['min general dev Δ']:+.2f}" + ("" if r["holds on dev"] else " ✗")]
            cells += [round(r["train s"]) if r["train s"] else "", r["peak MB"]]
            print(f"| {preset} | {r['remedy']} | " + " | ".join(str(c) for c in cells) + " |")
    write_json("remedies.json", {"margins": {c.name: c.margin for c in CHECKS}, "models": kept})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", choices=list(PRESETS))
    parser.add_argument("--remedy", action="append", choices=list(REMEDIES), help="(default: all)")
    parser.add_argument("--blend", action="append", default=[], help="also a WiSE-FT row chosen on dev for these")
    parser.add_argument("--models", type=Path, default=MODELS)
    parser.add_argument("--retrain", action="store_true")
    parser.add_argument("--table", action="store_true", help="print RESULTS' table from the cached scores and stop")
    args = parser.parse_args()
    if args.table:
        return table(args.models)
    if not args.preset:
        parser.error("--preset is required (or --table)")
    base = load_encoder("bundled")
    own = PRESETS[args.preset][2]
    rows, results = [], {}
    for name in args.remedy or list(REMEDIES):
        overrides, what = REMEDIES[name]
        folder = args.models / f"{args.preset}-{name}"
        if args.retrain and folder.exists():
            shutil.rmtree(folder)
        if not (folder / "mirror_config.json").is_file():
            train_one(args.preset, overrides, folder)
        if (folder / TRAIN_FILE).is_file():
            train = json.loads((folder / TRAIN_FILE).read_text())
        else:  # trained elsewhere (e.g. copied from a plain `mirror train`): its time, no memory figure
            train = {"train_s": json.loads((folder / "mirror_config.json").read_text())["stats"]["seconds"]}
        score = scores(args.preset, base, folder)
        results[name] = {"overrides": overrides, "train": train, "scores": score}
        rows.append(row(name, what, score, train, own))
        print(rows[-1], flush=True)
        if name in args.blend:
            alpha, path, tried = best_blend(args.preset, base, folder)
            blended = scores(args.preset, base, path)
            results[f"{name}+blend"] = {"alpha": alpha, "dev_by_alpha": tried, "scores": blended}
            rows.append(row(f"{name}+blend", f"WiSE-FT α {alpha:g} chosen on dev", blended, train, own))
            print(rows[-1], flush=True)
    base_dev = results[next(iter(results))]["scores"]
    print(f"\n## {args.preset}: Spearman ×100, check half (Δ vs base [95% interval]); in-domain dev chose")
    print(
        f"base: in-domain dev {base_dev['dev']['in_domain']['base']}, check {base_dev['check']['in_domain']['base']}; "
        + "; ".join(f"{c['name']} {c['base']}" for c in base_dev["check"]["general"])
        + (f"; STS-B test {base_dev['sts_test']['base']}" if "sts_test" in base_dev else "")
    )
    print_table(rows, [k for k in rows[0] if k != "what"])
    stamp = int(time.time())
    margins = {c.name: margin_of(c.name) for c in CHECKS}
    write_json(f"remedies-{args.preset}-{stamp}.json", {"preset": args.preset, "margins": margins, "results": results})


if __name__ == "__main__":
    main()
