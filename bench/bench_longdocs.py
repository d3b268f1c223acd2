"""Do the document checks ("Long documents", "Short articles"; mirror/checks.py) see what held-out news similarity
shows (issue 25): the sentences default (c308252 settings) WORSE than the base and the words default BETTER? Scores
saved tuned model folders, each as a fresh load of the folder computes it, against the bundled base on both halves
of every general check (the joined-STS extra included), with each check's encode time and tokens.

    .venv/bin/python bench/bench_longdocs.py /work/models/sentences-default /work/models/words-default
    .venv/bin/python bench/bench_longdocs.py RUN/model --only "Short articles" --half check

The models are `python -m mirror train examples/stsb_train_sentences.txt --mode sentences --out DIR` and
`python -m mirror train examples/en_top10k.txt --mode words --out DIR` (the defaults of the commit that trained them;
this script never trains). Output: a table per model, and bench/out/longdocs.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from common import print_table, write_json

from mirror import checks
from mirror.checks import ALL_CHECKS, check_items, check_texts, compare, side
from mirror.encoder import load_encoder


def tokens(encoder, texts: list[str]) -> int:
    """Tokens the encoder really runs on (special tokens included, cut at its inference length)."""
    limit = encoder.max_seq_length
    return sum(min(limit, len(ids)) for ids in encoder.tokenizer(texts)["input_ids"])


class Precision:
    """An encoder whose every encode runs at one precision (the CPU's bf16, or fp32 as on a CPU without it)."""

    def __init__(self, encoder, precision: str):
        self.encoder, self.precision = encoder, precision

    def encode(self, texts, **kwargs):
        return self.encoder.encode(texts, precision=self.precision, **kwargs)

    def __getattr__(self, name):
        return getattr(self.encoder, name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="tuned model folders (their base: bundled unless --base)")
    parser.add_argument("--base", default="bundled")
    parser.add_argument("--only", action="append", help="a check's name (repeatable; default: all, the extra too)")
    parser.add_argument("--half", action="append", choices=["dev", "check"], help="(default: both)")
    parser.add_argument(
        "--precision",
        default="auto",
        choices=["auto", "fp32", "bf16"],
        help="of every encode (fp32: a CPU without bf16)",
    )
    args = parser.parse_args()
    picked = [c for c in ALL_CHECKS if not args.only or c.name in args.only]
    halves = args.half or ["dev", "check"]
    base = Precision(load_encoder(args.base), args.precision)
    base_sides, cost = {}, []
    for half in halves:
        for check in picked:
            items = check_items(check, half)
            started = time.perf_counter()
            base_sides[check.name, half] = side(base, check, items)
            cost.append(
                {
                    "check": check.name,
                    "half": half,
                    "items": len(items),
                    "texts": len(check_texts(check, half)),
                    "tokens": tokens(base, check_texts(check, half)),
                    "base_s": round(time.perf_counter() - started, 2),
                }
            )
    print(f"\nCost of the base's side (this machine, now, precision {args.precision}; the tuned side costs the same):")
    print_table(cost, ["check", "half", "items", "texts", "tokens", "base_s"])
    default = {c.name for c in checks.CHECKS}
    run_s = sum(c["base_s"] for c in cost if c["half"] == "check" and c["check"] in default)
    print(f"A run's general checks (the default checks' check halves, one encoder): {run_s:.1f} s")
    results = {}
    for folder in args.models:
        # a fresh load of the saved folder: what the app and the CLI score
        tuned = Precision(load_encoder(folder), args.precision)
        rows = []
        for half in halves:
            for check in picked:
                items = check_items(check, half)
                row = compare(check, items, base_sides[check.name, half], side(tuned, check, items))
                rows.append({"half": half, **row, "ci": f"[{row['ci'][0]:+.1f}, {row['ci'][1]:+.1f}]"})
        print(f"\n{Path(folder).name} vs {args.base}:")
        print_table(rows, ["half", "name", "items", "base", "tuned", "delta", "ci", "verdict"])
        results[str(folder)] = rows
    write_json(
        "longdocs.json", {"base": args.base, "cost": cost, "results": results, "margin": checks.LONG_DOCS.margin}
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
