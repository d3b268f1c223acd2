"""Forgetting check and blend: tune the bundled model with each preset (default settings), blend it with its base at
α in {0, 0.25, 0.5, 0.75, 1} and score every blend on the DEV half of the general checks (explorer.compare.forgetting) and
on an in-domain proxy (words: SimLex-999 dev half; sentences: STS-B dev half, all 750 pairs). The default α is the
one keeping the most in-domain gain with no general check more than MARGIN points below the base on dev; the
CHECK half (the pairs the app reports after each run) is then shown before and after that blend.

    .venv/bin/python bench/bench_forgetting.py                  # both presets (~15 min on 2 busy CPU cores)
    .venv/bin/python bench/bench_forgetting.py --limit 400      # smoke: 400 training strings per preset
    .venv/bin/python bench/bench_forgetting.py --only sentences --set temperature=0.04 --set lr=2e-5  # the paper's
"""

from __future__ import annotations

import argparse
import time

from common import data_path, print_table, write_json

from explorer.compare.forgetting import CHECKS, MARGIN, forgetting_check
from mirror import MirrorConfig, read_texts
from mirror.blend import blend
from mirror.encoder import load_encoder
from mirror.evaluate import evaluate_pairs, read_pairs
from mirror.train import mirror_tune

ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
# preset: (training data set, its in-domain proxy: a data set, and the pairs of it used: the dev half = even pairs)
PRESETS = {"words": ("words", "simlex"), "sentences": ("sentences", "sts_dev")}
# the general check that is the in-domain proxy's own set (reported, but not counted as "general" for that preset)
OWN_CHECK = {"words": "SimLex-999", "sentences": "STS-B dev"}


def in_domain(encoder, pairs) -> float:
    return 100 * evaluate_pairs(encoder, pairs).spearman


def choose(rows: list[dict], preset: str) -> float:
    """The α with the most in-domain gain among those whose out-of-domain dev checks all stay within MARGIN of the
    base (α = 0, the base itself, always qualifies)."""
    allowed = [r for r in rows if r["min_general_delta"] >= -MARGIN]
    return max(allowed, key=lambda r: (round(r["in_domain"], 1), -r["alpha"]))["alpha"]


def run_preset(preset: str, base, limit: int | None, overrides: dict) -> dict:
    corpus, proxy = PRESETS[preset]
    texts = read_texts(data_path(corpus))
    if limit:
        texts = texts[:limit]
    config = MirrorConfig.preset(preset, model="bundled", **overrides)
    started = time.perf_counter()
    tuned = mirror_tune(texts, config)
    train_s = round(time.perf_counter() - started, 1)
    print(tuned.summary(), flush=True)
    proxy_pairs = read_pairs(data_path(proxy))[0::2]  # the dev half, as check_pairs(half="dev") but uncapped
    own = OWN_CHECK[preset]
    rows, blends = [], {}
    for alpha in ALPHAS:
        enc = blend(base, tuned.encoder, alpha)
        blends[alpha] = enc
        t0 = time.perf_counter()
        dev = forgetting_check(base, enc, half="dev")
        seconds = round(time.perf_counter() - t0, 1)
        general = [c for c in dev["checks"] if c["name"] != own]
        row = {
            "preset": preset,
            "alpha": alpha,
            "in_domain": round(in_domain(enc, proxy_pairs), 1),
            **{c["name"]: c["tuned"] for c in dev["checks"]},
            "min_general_delta": min(c["delta"] for c in general),
            "worse_flags": [c["name"] for c in dev["checks"] if c["worse"]],
            "check_s": seconds,
        }
        rows.append(row)
        print(row, flush=True)
    base_row = {"preset": preset, "alpha": "base", **{c["name"]: c["base"] for c in dev["checks"]}}
    base_row["in_domain"] = round(in_domain(base, proxy_pairs), 1)
    chosen = choose(rows, preset)
    t0 = time.perf_counter()
    check_tuned = forgetting_check(base, tuned.encoder, half="check")
    check_seconds = round(time.perf_counter() - t0, 1)
    check_blend = forgetting_check(base, blends[chosen], half="check")
    check_rows = [
        {"check": a["name"], "pairs": a["items"], "base": a["base"], "tuned": a["tuned"], "delta": a["delta"],
         "ci": a["ci"], "worse": a["worse"], f"blend α={chosen:g}": b["tuned"], "blend delta": b["delta"],
         "blend worse": b["worse"]}
        for a, b in zip(check_tuned["checks"], check_blend["checks"], strict=True)
    ]  # fmt: skip
    return {
        "preset": preset,
        "overrides": overrides,
        "train_strings": len(texts),
        "train_s": train_s,
        "steps": tuned.steps,
        "proxy": f"{proxy} dev half ({len(proxy_pairs)} pairs)",
        "base_dev": base_row,
        "dev": rows,
        "chosen_alpha": chosen,
        "check": check_rows,
        "check_verdict_tuned": check_tuned["verdict"],
        "check_verdict_blend": check_blend["verdict"],
        "forgetting_check_s": check_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=list(PRESETS), action="append")
    parser.add_argument("--limit", type=int, help="train on the first N strings only (a quick smoke run)")
    parser.add_argument("--set", action="append", default=[], help="config override, e.g. temperature=0.04")
    args = parser.parse_args()
    overrides = {k: float(v) for k, _, v in (item.partition("=") for item in args.set)}
    base = load_encoder("bundled")
    results = [run_preset(p, base, args.limit, overrides) for p in args.only or list(PRESETS)]
    names = [c.name for c in CHECKS]
    for r in results:
        print(f"\n## {r['preset']}: dev half, Spearman x100 (in-domain: {r['proxy']}); chosen α = {r['chosen_alpha']}")
        print_table([r["base_dev"], *r["dev"]], ["alpha", "in_domain", *names, "min_general_delta", "worse_flags"])
        print(f"\n## {r['preset']}: check half (what the app shows), tuned and blend α={r['chosen_alpha']:g}")
        print_table(r["check"], list(r["check"][0]))
        print(f"forgetting check: {r['forgetting_check_s']} s; tuned verdict: {r['check_verdict_tuned']}")
    write_json(f"forgetting-{int(time.time())}.json", {"margin": MARGIN, "alphas": ALPHAS, "results": results})


if __name__ == "__main__":
    main()
