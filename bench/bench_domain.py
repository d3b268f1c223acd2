"""The domain dev set: tune on a user's upload, then search it with queries never trained on (issue 40).

Sets:
- `stdlib`: examples/domain/stdlib-docstrings.tsv (scripts/make_stdlib_docs.py): the upload is the docstrings' summaries
  of one half (dev chooses, check reports once), the queries the rest of each docstring. Scored: MRR@10, recall@1,
  recall@10 of each query's own summary among the upload, base vs tuned, with a paired bootstrap 95% interval over
  queries; the label-free structure figure (the share of each summary's 10 nearest summaries in its own package).
- `sts`: the STS-B training sentences (examples/stsb_train_sentences.txt, a seeded sample of --size) as the upload,
  STS-B dev's half (even pairs: dev, odd: check) as the in-domain score (Spearman ×100).
Both also say how visible the run is: the share of queries (stdlib) whose tuned top 10 holds a hit the base's did
not, and the mean share of each upload string's 10 nearest neighbours that changed (what the page says after a run).
With --checks, every general check on the same half (bench_remedies.general_checks) and the rule (`holds`).

    .venv/bin/python bench/bench_domain.py --set stdlib --half dev --run default --run epochs=4 --checks
    .venv/bin/python bench/bench_domain.py --set sts --size 1000 --run default --run min_steps=0 --checks
    .venv/bin/python bench/bench_domain.py --table        # every run cached so far, one row each

A run is `name` or `key=value,key=value` (MirrorConfig overrides on top of the sentences preset; `default` is the
preset as it is). Each result is cached as bench/out/domain/<set>-<half>-<size>-<run>.json (--again to redo it).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

import numpy as np
from common import EXAMPLES, OUT, data_path, print_table

from mirror.config import MirrorConfig
from mirror.encoder import load_encoder
from mirror.evaluate import interval, read_pairs
from mirror.moved import top_k
from mirror.train import mirror_tune

DOMAIN = EXAMPLES / "domain" / "stdlib-docstrings.tsv"
CACHE = OUT / "domain"
K = 10
RESAMPLES = 1000


def read_domain(half: str) -> tuple[list[str], list[str], list[str]]:
    """Summaries (the upload), queries and packages of one half of the stdlib set, in file order."""
    lines = DOMAIN.read_text(encoding="utf-8").splitlines()[1:]
    rows = [line.split("\t") for line in lines]
    rows = [r for r in rows if r[1] == half]
    return [r[3] for r in rows], [r[4] for r in rows], [r[2] for r in rows]


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def ranks(corpus: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """The rank (1 = first) of query i's own corpus row i among all corpus rows, by cosine."""
    sims = unit(queries) @ unit(corpus).T
    own = sims[np.arange(len(sims)), np.arange(len(sims))]
    return 1 + (sims > own[:, None]).sum(axis=1)


def retrieval(rank_base: np.ndarray, rank_tuned: np.ndarray) -> dict:
    """MRR@10, recall@1 and @10 (×100) of base and tuned, each change with a paired bootstrap 95% interval."""
    out = {}
    metrics = {
        "MRR@10": lambda r: np.where(r <= K, 1.0 / r, 0.0),
        "R@1": lambda r: (r <= 1).astype(float),
        "R@10": lambda r: (r <= K).astype(float),
    }
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(rank_base), size=(RESAMPLES, len(rank_base)))
    for name, f in metrics.items():
        b, t = 100 * f(rank_base), 100 * f(rank_tuned)
        diffs = (t - b)[picks].mean(axis=1)
        ci = interval(diffs)
        out[name] = {
            "base": round(b.mean(), 1),
            "tuned": round(t.mean(), 1),
            "delta": round(t.mean() - b.mean(), 1),
            "ci": [round(c, 1) for c in ci],
        }
    return out


def same_package_share(vecs: np.ndarray, packages: list[str]) -> float:
    """×100: the mean share of each string's 10 nearest strings in its own package (no labels used to tune)."""
    nb = top_k(vecs, K)
    labels = np.array(packages)
    return round(100 * float((labels[nb] == labels[:, None]).mean()), 1)


def neighbours_changed(base: np.ndarray, tuned: np.ndarray) -> float:
    """×100: the mean share of each string's 10 nearest neighbours that are not the base's (what the page shows)."""
    nb, nt = top_k(base, K), top_k(tuned, K)
    return round(100 * float(np.mean([1 - len(set(a) & set(b)) / nb.shape[1] for a, b in zip(nb, nt, strict=True)])), 1)


def new_hit_share(corpus_b, corpus_t, queries_b, queries_t) -> float:
    """×100: the share of queries whose tuned top 10 holds a string the base's top 10 did not."""
    tb = np.argsort(-(unit(queries_b) @ unit(corpus_b).T), axis=1)[:, :K]
    tt = np.argsort(-(unit(queries_t) @ unit(corpus_t).T), axis=1)[:, :K]
    return round(100 * float(np.mean([bool(set(t) - set(b)) for b, t in zip(tb, tt, strict=True)])), 1)


def near_pairs(base, texts: list[str], batch: int = 200) -> None:
    """For guided negatives' margins: the share of pairs of distinct strings whose base cosine is above 1 - margin,
    and how many such negatives a string has in a batch of `batch` (what guide_margin would mask)."""
    x = unit(base.encode(texts))
    sims = x @ x.T
    off = sims[~np.eye(len(x), dtype=bool)]
    for margin in (0.05, 0.1, 0.2, 0.3):
        share = float((off > 1 - margin).mean())
        print(
            f"margin {margin}: {100 * share:.3f}% of pairs, {share * (batch - 1):.3f} masked negatives per string a batch"
        )


def parse_run(run: str) -> dict:
    if run == "default":
        return {}
    out = {}
    for part in run.split(","):
        key, _, value = part.partition("=")
        out[key] = json.loads(value) if value not in ("", None) else None
    return out


def upload_of(name: str, half: str, size: int | None) -> dict:
    """The strings a user uploads and what scores them: stdlib summaries + queries, or STS sentences + STS-B pairs."""
    if name == "stdlib":
        texts, queries, packages = read_domain(half)
        if size and size < len(texts):
            keep = sorted(random.Random(0).sample(range(len(texts)), size))
            texts, queries, packages = ([x[i] for i in keep] for x in (texts, queries, packages))
        return {"texts": texts, "queries": queries, "packages": packages}
    lines = [s for s in data_path("sentences").read_text(encoding="utf-8").splitlines() if s.strip()]
    texts = random.Random(0).sample(lines, size or 1000)
    pairs = read_pairs(data_path("sts_dev"))
    return {"texts": texts, "pairs": pairs[0::2] if half == "dev" else pairs[1::2]}


def score_side(encoder, data: dict) -> dict:
    side = {"corpus": encoder.encode(data["texts"])}
    if "queries" in data:
        side["queries"] = encoder.encode(data["queries"])
    return side


def measure(name: str, half: str, size: int | None, run: str, base, base_side: dict, data: dict, checks: bool) -> dict:
    from bench_remedies import general_checks, holds  # its general checks and its rule, the same for every bench

    overrides = parse_run(run)
    config, _ = MirrorConfig.for_texts(data["texts"], "sentences", **overrides)
    started = time.perf_counter()
    result = mirror_tune(data["texts"], config, encoder=load_encoder(config.model))
    train_s = time.perf_counter() - started
    tuned = result.encoder
    tuned_side = score_side(tuned, data)
    out: dict = {
        "set": name,
        "half": half,
        "size": len(data["texts"]),
        "run": run,
        "overrides": overrides,
        "steps": result.steps,
        "epochs": result.config.epochs,
        "batch": result.config.batch_size,
        "blend_alpha": result.config.blend_alpha,
        "train_s": round(train_s, 1),
        "final_loss": result.losses[-1] if result.losses else None,
    }
    out["neighbours changed"] = neighbours_changed(base_side["corpus"], tuned_side["corpus"])
    if name == "stdlib":
        rb = ranks(base_side["corpus"], base_side["queries"])
        rt = ranks(tuned_side["corpus"], tuned_side["queries"])
        out["retrieval"] = retrieval(rb, rt)
        out["same package"] = {
            "base": same_package_share(base_side["corpus"], data["packages"]),
            "tuned": same_package_share(tuned_side["corpus"], data["packages"]),
        }
        out["queries with new hits"] = new_hit_share(
            base_side["corpus"], tuned_side["corpus"], base_side["queries"], tuned_side["queries"]
        )
    else:
        from bench_remedies import in_domain

        out["sts"] = in_domain(base, tuned, data["pairs"])
    if checks:
        rows = general_checks(base, tuned, half)
        out["general"] = [
            {k: r.get(k) for k in ("name", "base", "tuned", "delta", "ci", "exact_delta", "worse")} for r in rows
        ]
        out["holds"] = holds({"dev": {"general": rows}}, "")  # the rule reads the half it is given as "dev"
        out["lowest general Δ"] = round(min(r["exact_delta"] for r in rows), 2)
    return out


def row_of(r: dict) -> dict:
    cells = {
        "set": r["set"],
        "half": r["half"],
        "size": r["size"],
        "run": r["run"],
        "steps": r["steps"],
        "epochs": r["epochs"],
        "α": str(r["blend_alpha"]),
    }
    if "retrieval" in r:
        for m in ("MRR@10", "R@1", "R@10"):
            v = r["retrieval"][m]
            cells[m] = f"{v['tuned']} ({v['delta']:+} [{v['ci'][0]:+}, {v['ci'][1]:+}])"
        cells["same pkg"] = f"{r['same package']['tuned']} (base {r['same package']['base']})"
        cells["queries w/ new hits %"] = str(r["queries with new hits"])
    if "sts" in r:
        cells["STS-B"] = f"{r['sts']['tuned']} ({r['sts']['delta']:+} [{r['sts']['ci'][0]:+}, {r['sts']['ci'][1]:+}])"
    cells["nbrs changed %"] = str(r["neighbours changed"])
    for g in r.get("general", []):
        ci = f" [{g['ci'][0]:+}, {g['ci'][1]:+}]" if g.get("ci") else ""
        cells[g["name"]] = f"{g['tuned']} ({g['delta']:+}{ci})"
    if "general" in r:
        cells["lowest general Δ"] = f"{r['lowest general Δ']:+.2f}" + ("" if r["holds"] else " ✗")
    cells["train s"] = r["train_s"]
    return cells


def table() -> None:
    rows = [json.loads(p.read_text()) for p in sorted(CACHE.glob("*.json"))]
    for name in ("stdlib", "sts"):
        picked = [row_of(r) for r in rows if r["set"] == name]
        if picked:
            print(f"\n## {name}")
            print_table(picked, list(dict.fromkeys(k for p in picked for k in p)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--set", choices=("stdlib", "sts"), default="stdlib")
    parser.add_argument("--half", choices=("dev", "check"), default="dev")
    parser.add_argument("--size", type=int, help="strings in the upload (stdlib: all of the half by default)")
    parser.add_argument("--run", action="append", default=[])
    parser.add_argument("--checks", action="store_true", help="also every general check on the same half")
    parser.add_argument("--again", action="store_true")
    parser.add_argument("--table", action="store_true")
    parser.add_argument(
        "--near-pairs", action="store_true", help="what guided negatives would mask: pairs the base puts near, and stop"
    )
    args = parser.parse_args()
    if args.table:
        return table()
    base = load_encoder("bundled")
    data = upload_of(args.set, args.half, args.size)
    if args.near_pairs:
        return near_pairs(base, data["texts"])
    base_side = score_side(base, data)
    CACHE.mkdir(parents=True, exist_ok=True)
    for run in args.run or ["default"]:
        tag = run.replace("=", "").replace(",", "+").replace(".", "p")
        path = CACHE / f"{args.set}-{args.half}-{len(data['texts'])}-{tag}.json"
        if path.is_file() and not args.again:
            result = json.loads(path.read_text())
            if not args.checks or "general" in result:
                print(row_of(result), flush=True)
                continue
        result = measure(args.set, args.half, args.size, run, base, base_side, data, args.checks)
        path.write_text(json.dumps(result, indent=2))
        print(row_of(result), flush=True)
    print(" ".join(sys.argv))


if __name__ == "__main__":
    main()
