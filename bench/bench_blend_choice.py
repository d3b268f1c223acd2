"""A blend chosen per run against the fixed α (issue 60), on rows neither ever saw, with the peer beside them.

    .venv/bin/pip install -r bench/requirements.txt   # the peer (sentence-transformers' trainer) needs them
    .venv/bin/python bench/bench_blend_choice.py [--sets foldoc,stdlib,wordnet,go] [--half check] [--limit 1000] [--seeds 0,1] [--peer] [--out NAME]

For each set's `half` (bench_pairs.SETS; the first `--limit` rows), a seeded 20% of the rows (at most 600) is held out
of everything: the report rows. On the rest, one run of the app's own path (mirror.job.tune_and_index with the
pairs preset, which holds out a tenth of its rows, chooses its blend on half of them and the general checks' dev
halves: mirror/choose.py) and, from the same trained weights (its tuned_model/), the fixed blend the preset served
before (α 0.5 on a sentence-encoder base). Both are measured on the report rows (MRR@10 of each row's string found
among all the half's strings from its partner, against the base) and on the general checks' check halves. `--peer`:
sentence-transformers' trainer with MultipleNegativesRankingLoss on the same training rows (bench_pairs.run_peer).
`--every-alpha`: also every α the run measured (mirror.choose.ALPHAS), from the same trained weights, on the report rows
and the check halves, and which α the rule without room for noise (before issue 60's change) would have served: its
dev-half changes are in the choice's candidates, since an α with more held-out gain is checked first.
JSON: bench/out/blend-choice-<half>.json (or `--out NAME`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bench_pairs
from common import EXAMPLES, ROOT, print_table, write_json

from mirror.config import MirrorConfig
from mirror.pairs import HeldOut, holdout

FIXED_ALPHA = 0.5  # what PAIRS_ENCODER_ADJUSTMENTS served before a run chose its own
# one more source than bench_pairs has: the Gene Ontology's term definitions (strings) and terms (partners), a biology
# glossary nobody on the project wrote (examples/pairs/gene-ontology.tsv, CC BY 4.0; scripts/make_pairs_go.py)
bench_pairs.SETS.setdefault("go", (EXAMPLES / "pairs" / "gene-ontology.tsv", "text", "term"))
WORDS_SETS = {"wordnet"}  # short pairs: both columns single words (the words preset, as the app detects it)


def old_rule_alpha(choice: dict) -> float | None:
    """The α the rule without room for noise would have served: the first candidate, in the order they were checked
    (most held-out gain, a tie nearer the base), whose dev-half changes are all within half a margin."""
    from mirror.checks import CHECKS
    from mirror.choose import within_rule

    order = sorted(choice.get("candidates") or [], key=lambda c: (-c["mrr10"], c["alpha"]))
    for c in order:
        if not c.get("checks"):
            return None  # not checked: the new rule stopped before it, so it would not be reached either
        if within_rule(c["checks"], CHECKS):
            return c["alpha"]
    return None


def one(name: str, half: str, limit: int, seed: int, peer: bool, every_alpha: bool = False) -> list[dict]:
    from index.store import FolderIndexes
    from mirror.blend import blend
    from mirror.encoder import load_encoder
    from mirror.job import Finished, tune_and_index

    texts, partners = bench_pairs.read_set(name, half, limit)
    rows_out = holdout(partners, bench_pairs.HELD_FRACTION, bench_pairs.HELD_MOST, seed)
    held = HeldOut(list(texts), list(partners), rows_out, ("string", "partner"))
    mode = "words" if name in WORDS_SETS else "sentences"
    config = MirrorConfig.preset(mode, pairs=True, seed=seed)
    base = load_encoder(config.model, device="cpu")
    base_ranks = held.ranks(base)
    train_texts, train_partners = held.training()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        run, events = Path(tmp) / "run", []
        started = time.perf_counter()
        tune_and_index(train_texts, config, run, indexes=FolderIndexes(), emit=events.append, pairs=train_partners)
        seconds = time.perf_counter() - started
        stats = next(e for e in events if isinstance(e, Finished)).stats
        choice = stats.get("blend_choice") or {}
        served = load_encoder(str(run / "model"), device="cpu", allowed_roots=[run])
        trained = load_encoder(str(run / "tuned_model"), device="cpu", allowed_roots=[run])
        fixed = blend(base, trained, FIXED_ALPHA)
        tag = {"set": name, "seed": seed, "steps": stats.get("steps")}
        for label, encoder, extra in (
            (f"chosen α {choice.get('alpha', '?')}", served, {"alpha": choice.get("alpha")}),
            (f"fixed α {FIXED_ALPHA:g}", fixed, {"alpha": FIXED_ALPHA}),
        ):
            more = {**tag, **extra, **bench_pairs.checks_of(base, encoder, "check")}
            rows.append(bench_pairs.measured(held, base_ranks, encoder, label, seconds, more))
        rows[0]["choice"] = json.dumps({k: choice.get(k) for k in ("rows", "pool", "base_mrr10", "candidates")})
        rows[0]["old_rule_alpha"] = old_rule_alpha(choice)
        if every_alpha:
            from mirror.choose import ALPHAS

            for alpha in ALPHAS:
                blended = blend(base, trained, alpha)
                more = {**tag, "alpha": alpha, **bench_pairs.checks_of(base, blended, "check")}
                rows.append(bench_pairs.measured(held, base_ranks, blended, f"α {alpha:g}", seconds, more))
    if peer:
        from mirror.encoder import bundled_model_path

        peer_config = dataclasses.replace(config, device="cpu")
        path = str(bundled_model_path())
        row = bench_pairs.run_peer(held, base_ranks, peer_config, "peer (MNRL)", path, True, "check")
        rows.append({**row, "set": name, "seed": seed})
    return rows


def served_now(chosen: dict[str, Any] | None) -> float | None:
    """The α mirror.choose's rule (as the code has it now) serves from the candidates a run recorded (their
    held-out MRR@10, dev-half changes and spreads), checked in its order; None where the run did not record a
    candidate the rule needs (not checked then) or recorded no choice."""
    from mirror.checks import CHECKS
    from mirror.choose import within_rule

    if not chosen or not chosen.get("choice"):
        return None
    choice = json.loads(chosen["choice"]) if isinstance(chosen["choice"], str) else chosen["choice"]
    candidates = choice["candidates"] if isinstance(choice, dict) else choice  # early files: the candidates alone
    known = {c.name for c in CHECKS}
    # (held-out MRR@10 is recorded to 2 decimals: a near-tie the run broke by more decimals reads as a tie here)
    for c in sorted(candidates, key=lambda c: (-c["mrr10"], c["alpha"])):
        if not c.get("checks") or not c.get("noise") or set(c["checks"]) - known:
            return None  # not checked, checked before the room for noise was recorded, or another set of checks
        if within_rule(c["checks"], CHECKS, c["noise"]):
            return float(c["alpha"])
    return min(float(c["alpha"]) for c in candidates)


def summarize(names: Sequence[str]) -> list[dict[str, Any]]:
    """The JSONs `names` (under bench/results/, or paths) as one row per set and seed: the served α and its gain, the
    fixed α 0.5's, α 1's (no rule) and the peer's, each with the check halves past the rule; a row a later file has
    for the same set, seed and run replaces an earlier one's (list a run's peer file first, then its rule's). Then
    each set's mean over its seeds."""
    kept: dict[tuple, dict[str, Any]] = {}
    for name in names:
        path = Path(name) if Path(name).exists() else ROOT / "bench" / "results" / name
        for row in json.loads(path.read_text())["rows"]:
            run = "chosen" if str(row["run"]).startswith("chosen") else row["run"]
            kept[(row["set"], row["seed"], run)] = row

    def gain(row: dict[str, Any] | None) -> float | None:
        return float(str(row["mrr10_gain"]).split()[0]) if row else None

    def cell(row: dict[str, Any] | None, alpha: bool = False) -> str:
        if row is None:
            return "–"
        past = row.get("checks_low") or "none past"
        at = f" (α {row['alpha']:g})" if alpha and row.get("alpha") is not None else ""
        return f"{row['mrr10_gain'].split(' [')[0]}{at}; {past}"

    out, sums = [], {}
    for set_name, seed in sorted({(k[0], k[1]) for k in kept}):
        got = {run: kept.get((set_name, seed, run)) for run in ("chosen", "fixed α 0.5", "α 1", "peer (MNRL)")}
        now = served_now(got["chosen"])  # the α the rule in the code serves, from what the run recorded
        if now is not None and kept.get((set_name, seed, f"α {now:g}")) is not None:
            got["chosen"] = {**kept[(set_name, seed, f"α {now:g}")], "alpha": now}
        elif got["chosen"] is not None:  # the α that run served, under its own rule: said, not shown as the code's
            at = got["chosen"].get("alpha")
            why = "not measured" if now is not None else "not recomputable"
            got["chosen"] = {
                **got["chosen"],
                "checks_low": f"{got['chosen'].get('checks_low') or 'none past'}; "
                f"served by that run's rule (α {at:g}), the rule now: {why}",
            }
        out.append(
            {
                "set": set_name,
                "seed": seed,
                "served": cell(got["chosen"], alpha=True),
                "fixed α 0.5": cell(got["fixed α 0.5"]),
                "α 1": cell(got["α 1"]),
                "peer": cell(got["peer (MNRL)"]),
            }
        )
        for run, row in got.items():
            if gain(row) is not None:
                sums.setdefault((set_name, run), []).append(gain(row))
    for set_name in sorted({k[0] for k in sums}):

        def mean(run: str, set_name: str = set_name) -> str:
            values = sums.get((set_name, run), [])
            return (
                f"{sum(values) / len(values):+.1f} ({len(values)} seed{'s' if len(values) != 1 else ''})"
                if values
                else "–"
            )

        out.append(
            {
                "set": set_name,
                "seed": "mean",
                "served": mean("chosen"),
                "fixed α 0.5": mean("fixed α 0.5"),
                "α 1": mean("α 1"),
                "peer": mean("peer (MNRL)"),
            }
        )
    return out


def orders(names: Sequence[str]) -> list[dict[str, Any]]:
    """Did the choice rows' noise decide an α served? For each run of the JSONs `names` that recorded its choice: the
    α ordered by MRR@10 on its choice rows (how many), the α the rule in the code serves from them (`served_now`),
    what decided it (the rows ranking the α as α: the checks, which serve the highest α they let through; else the
    rows' order, or their tie) and, where every α was measured on the report rows, each one's gain there."""

    out = []
    for name in names:
        path = Path(name) if Path(name).exists() else ROOT / "bench" / "results" / name
        runs: dict[tuple, dict[str, dict[str, Any]]] = {}
        for row in json.loads(path.read_text())["rows"]:
            runs.setdefault((row["set"], row["seed"]), {})[str(row["run"])] = row
        for (set_name, seed), got in runs.items():
            row = next((r for run, r in got.items() if run.startswith("chosen")), None)
            choice = row.get("choice") if row else None
            choice = json.loads(choice) if isinstance(choice, str) else choice  # (a string in these JSONs)
            if not isinstance(choice, dict):  # (the first runs kept their candidates only)
                continue
            cands = choice["candidates"]
            by_rows = [c["alpha"] for c in sorted(cands, key=lambda c: (-c["mrr10"], c["alpha"]))]
            now = served_now(row)
            if len({c["mrr10"] for c in cands}) == 1:
                decided = "a tie: the lowest α that keeps the checks"
            elif len({c["mrr10"] for c in cands}) < len(cands):  # some equal: the lower of them goes first
                decided = "the choice rows' order, with ties"
            elif by_rows == sorted(by_rows, reverse=True):  # the rows rank the α as α: the highest the checks allow
                decided = "the checks"
            else:
                decided = "the choice rows' order"
            reported = {
                float(run.split()[1]): r["mrr10_gain"].split(" [")[0] for run, r in got.items() if run.startswith("α ")
            }
            out.append(
                {
                    "file": path.name,
                    "set": set_name,
                    "seed": seed,
                    "choice rows": choice["rows"],
                    "α by choice rows": " > ".join(f"{a:g}" for a in by_rows),
                    "served": "–" if now is None else f"{now:g}",
                    "decided by": decided,
                    "report rows (gain by α)": ", ".join(
                        f"{a:g} {g}" for a, g in sorted(reported.items(), reverse=True)
                    )
                    or "–",
                }
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", default="foldoc,stdlib")
    parser.add_argument("--half", default="check")
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--peer", action="store_true")
    parser.add_argument("--every-alpha", action="store_true", help="every α measured on the report rows and checks")
    parser.add_argument("--out", default="", help="the JSON's name under bench/out/ (default blend-choice-<half>.json)")
    parser.add_argument(
        "--summarize", default="", help="JSONs to summarize per set and seed, comma-separated (no run): see summarize"
    )
    parser.add_argument("--orders", default="", help="JSONs whose choices to read for what decided them (no run)")
    args = parser.parse_args()
    if args.orders:
        rows = orders(args.orders.split(","))
        print_table(rows, list(rows[0]) if rows else [])
        return
    if args.summarize:
        columns = ["set", "seed", "served", "fixed α 0.5", "α 1", "peer"]
        print_table(summarize(args.summarize.split(",")), columns)
        return
    out = args.out or f"blend-choice-{args.half}.json"
    rows = []
    for name in args.sets.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            rows += one(name, args.half, args.limit, seed, args.peer, args.every_alpha)
            print_table(rows[-3:], ["set", "seed", "run", "alpha", "mrr10", "mrr10_gain", "checks_ok", "checks_low"])
            write_json(out, {"rows": rows, "args": vars(args), "partial": True})
    print_table(rows, ["set", "seed", "run", "alpha", "mrr10", "mrr10_gain", "train_s", "checks_ok", "checks_low"])
    write_json(out, {"rows": rows, "args": vars(args)})


if __name__ == "__main__":
    main()
