"""A plan made while another run trains: the rough guess against this model's calibration here at another length
(explorer.tune.estimate.Estimator.estimate `borrowed`), both against the plan calibrated at the run's own length.

    .venv/bin/python bench/bench_plan_borrowed.py

A newcomer's plan shown while another run trained read "(rough guess) ~2 min training" of a run whose training took
6 min (200 GO rows, definition and term). A plan cannot calibrate while a run trains (it would slow that run and be
slowed by it), so it priced the rows with the rough guess's constants (another machine's) at the strings' length
alone. Now such a plan borrows the calibration this process made at the nearest other length; with none, the rough
guess prices a pairs row at its longer side. For each upload below (the bundled examples, in the project), each is
priced three ways on the bundled model: calibrated at its own length ("own", the reference: the calibrated plan is
measured against runs in RESULTS "Estimate vs measured"), borrowed from each other upload's calibration, and the
rough guess. Ratios to "own" within this one run. JSON: bench/out/plan-borrowed.json
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from common import machine, print_table, write_json

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]


def uploads() -> dict[str, tuple[list[str], list[str | None] | None]]:
    """The uploads priced: strings, and a pairs upload's partners (the bundled examples, read as the app reads them)."""
    import csv

    from explorer.tune.inputs import EXAMPLES_DIR
    from mirror.pairs import clean_pairs

    def lines(name: str, n: int) -> list[str]:
        text = (EXAMPLES_DIR / name).read_text(encoding="utf-8").splitlines()
        return [t for t in text if t.strip()][:n]

    def pairs(path: Path, string: str, partner: str, n: int) -> tuple[list[str], list[str | None]]:
        with open(path, encoding="utf-8", newline="") as f:
            rows = [r for r in csv.DictReader(f, delimiter="\t") if r["half"] == "dev"][:n]
        texts, partners, _, _ = clean_pairs([r[string] for r in rows], [r[partner] for r in rows])
        return texts, partners

    return {
        "words (small example)": (lines("small_words.txt", 10_000), None),
        "STS-B sentences, 1,000": (lines("stsb_train_sentences.txt", 1000), None),
        "GO definitions and terms, 200": pairs(EXAMPLES_DIR / "pairs" / "gene-ontology.tsv", "text", "term", 200),
        "stdlib docstrings and summaries, 953": pairs(
            EXAMPLES_DIR / "domain" / "stdlib-docstrings.tsv", "query", "summary", 1000
        ),
    }


def main() -> None:
    import torch

    from explorer.resources.sessions import texts_key
    from explorer.tune.estimate import Estimator
    from explorer.tune.guess import rough_estimate
    from explorer.tune.inputs import build_config, trained_rows
    from explorer.tune.planning import second_sides
    from mirror.config import BUNDLED_MODEL
    from mirror.encoder import load_encoder
    from mirror.job import plan_memory

    base, threads = load_encoder(BUNDLED_MODEL), torch.get_num_threads()
    sets = uploads()
    est = Estimator(Path(tempfile.mkdtemp()))

    def price(texts, partners, may_calibrate: bool):
        config, _ = build_config(texts, BUNDLED_MODEL, "auto", {}, pairs=partners is not None, partners=partners)
        return config, est.estimate(
            texts, texts_key(texts), config, "cpu", threads, base, plan_memory(config, None),
            may_calibrate=may_calibrate, train_texts=second_sides(texts, partners),
        )  # fmt: skip

    own, calibrations = {}, {}
    for name, (texts, partners) in sets.items():
        est.calibrations.clear()
        _, own[name] = price(texts, partners, True)
        calibrations[name] = dict(est.calibrations)
    rows = []

    def row(name: str, how: str, e, ref) -> dict:
        train, total = e.phase("training"), e.total
        return {
            "upload": name, "length": ref.key[-1], "priced with": how, "training_s": round(train),
            "total_s": round(total), "training_x": round(train / ref.phase("training"), 2),
            "total_x": round(total / ref.total, 2),
        }  # fmt: skip

    for name, (texts, partners) in sets.items():
        ref = own[name]
        rows.append(row(name, "own calibration", ref, ref))
        for other, cals in calibrations.items():
            if other == name:
                continue
            est.calibrations.clear()
            est.calibrations.update(cals)
            config, borrowed = price(texts, partners, False)
            how = f"borrowed at {borrowed.borrowed}" if borrowed.borrowed else "its own length, calibrated"
            rows.append(row(name, f"{how} on {other}", borrowed, ref))
        rough = rough_estimate(texts, config, "cpu", threads, trained_rows(texts, config, partners), partners)
        rows.append(row(name, "rough guess", rough, ref))
    print_table(rows, ["upload", "length", "priced with", "training_s", "total_s", "training_x", "total_x"])
    write_json("plan-borrowed.json", {"machine": machine(), "argv": sys.argv, "rows": rows})


if __name__ == "__main__":
    main()
