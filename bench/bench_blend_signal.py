"""Can a run choose its own blend α without labels? (issue 40, item 3: a per-run blend on a held-out slice)

One sentences-preset run (min_steps 50) is trained **without** its blend on an upload minus a seeded held-out slice
(10% of the strings, never trained on); then every α of a grid blends it with the base, and each blend is scored
twice:
- by what the dev sets say (needs labels): the in-domain score (stdlib: MRR@10 of the held-out docstring queries over
  the whole upload; sts: STS-B dev half's Spearman), and every general check on its dev half with the rule
  (`bench_remedies.holds`: no general check more than half its margin below the base);
- by label-free signals a run could compute on its own:
  - `heldout crop MRR`: each held-out string's random contiguous half of its words (3 seeded crops) searched among
    the whole upload: does the model find the string from part of it (a query-like view it never trained on)?
  - `heldout mask MRR`: the training's own view (a 5-character span masked) on the held-out strings, same search;
  - `align` / `uniform` (Wang and Isola 2020) of the held-out strings under the crop view;
  - `general kept`: the share of each bundled general sentence's 10 nearest (2,000 Wikipedia sentences the run may
    mix in, no check's data) that the blend keeps from the base: a label-free proxy of forgetting;
  - `nbrs changed`: the share of the upload's 10 nearest neighbours changed (what the page says).
The question is whether some rule on the label-free columns picks the α the labelled columns would (the most
in-domain score among the α that hold).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_blend_signal.py --set stdlib
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_blend_signal.py --set sts --size 1000
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_blend_signal.py --set stdlib --half check   # the rule, confirmed

With `--half check` the upload is the stdlib check half and every blend is also scored on the general checks' check
halves (`check ...` columns): α chosen on the dev halves (the largest α that holds there), reported on the others.
Writes bench/results/blend-signal-<set>[-check].json and prints one table.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np
from bench_domain import neighbours_changed, ranks, retrieval, unit, upload_of
from common import OUT, ROOT, print_table

from mirror.augment import mask_span
from mirror.blend import blend
from mirror.config import MirrorConfig
from mirror.encoder import load_encoder, save_encoder
from mirror.general import general_text
from mirror.moved import top_k
from mirror.train import mirror_tune

ALPHAS = (0.0, 0.125, 0.25, 0.375, 0.5, 0.75, 1.0)
HELD_OUT = 0.1
CROPS = 3
K = 10


def crop(text: str, rng: random.Random) -> str:
    """A random contiguous half of the words (at least 2)."""
    words = text.split()
    n = max(2, len(words) // 2)
    if len(words) <= n:
        return text
    start = rng.randrange(len(words) - n + 1)
    return " ".join(words[start : start + n])


def mrr_own(corpus: np.ndarray, queries: np.ndarray, own: np.ndarray) -> float:
    """×100: MRR@10 of each query's own corpus row `own[i]` among all corpus rows."""
    sims = unit(queries) @ unit(corpus).T
    target = sims[np.arange(len(sims)), own]
    rank = 1 + (sims > target[:, None]).sum(axis=1)
    return round(100 * float(np.where(rank <= K, 1.0 / rank, 0.0).mean()), 2)


def kept(base: np.ndarray, other: np.ndarray) -> float:
    nb, no = top_k(base, K), top_k(other, K)
    return round(100 * float(np.mean([len(set(a) & set(b)) / K for a, b in zip(nb, no, strict=True)])), 1)


def signals(enc, texts: list[str], held: list[int], views: dict, general: list[str], base_general, base_corpus):
    corpus = enc.encode(texts)
    own = np.array([i for i in held for _ in range(CROPS)])
    crops = enc.encode(views["crop"])
    masks = enc.encode(views["mask"])
    x, y = unit(corpus[own]), unit(crops)
    align = float(((x - y) ** 2).sum(axis=1).mean())
    h = unit(corpus[held])
    d2 = ((h[:, None, :] - h[None, :, :]) ** 2).sum(axis=2)[~np.eye(len(h), dtype=bool)]
    uniform = float(np.log(np.exp(-2 * d2).mean()))
    return {
        "heldout crop MRR": mrr_own(corpus, crops, own),
        "heldout mask MRR": mrr_own(corpus, masks, np.array(held)),
        "align": round(align, 4),
        "uniform": round(uniform, 4),
        "general kept": kept(base_general, enc.encode(general)),
        "nbrs changed": neighbours_changed(base_corpus, corpus),
    }, corpus


def main() -> None:
    from bench_remedies import general_checks, holds, in_domain

    parser = argparse.ArgumentParser()
    parser.add_argument("--set", choices=("stdlib", "sts"), default="stdlib")
    parser.add_argument("--size", type=int)
    parser.add_argument("--half", choices=("dev", "check"), default="dev", help="stdlib: which half is the upload")
    parser.add_argument("--again", action="store_true", help="train again even if the unblended model is saved")
    args = parser.parse_args()
    data = upload_of(args.set, args.half, args.size)
    texts = data["texts"]
    rng = random.Random(0)
    held = sorted(rng.sample(range(len(texts)), max(10, round(HELD_OUT * len(texts)))))
    train = [t for i, t in enumerate(texts) if i not in set(held)]
    base = load_encoder("bundled")
    folder = OUT / "blend_signal" / f"{args.set}-{args.half}-{len(texts)}"
    started = time.perf_counter()
    if args.again or not (folder / "mirror_config.json").is_file():
        config, _ = MirrorConfig.for_texts(train, "sentences", blend_alpha=1.0)
        result = mirror_tune(train, config, encoder=load_encoder(config.model))
        save_encoder(result.encoder, folder)
        print(f"trained {result.steps} steps on {len(train)} strings in {time.perf_counter() - started:.0f} s")
    tuned = load_encoder(folder)
    views = {
        "crop": [crop(texts[i], random.Random(1000 * c + i)) for i in held for c in range(CROPS)],
        "mask": [mask_span(texts[i], base.tokenizer.mask_token, 5, random.Random(i)) for i in held],
    }
    general = general_text("sentences")[:2000]
    base_general, base_corpus = base.encode(general), base.encode(texts)
    rows = []
    for alpha in ALPHAS:
        enc = blend(base, tuned, alpha)
        sig, corpus = signals(enc, texts, held, views, general, base_general, base_corpus)
        if args.set == "stdlib":
            r = retrieval(ranks(base_corpus, base.encode(data["queries"])), ranks(corpus, enc.encode(data["queries"])))
            domain = r["MRR@10"]
        else:
            domain = in_domain(base, enc, data["pairs"])
        checks = general_checks(base, enc, "dev")
        row = {
            "α": alpha,
            "domain": domain["tuned"],
            "domain Δ": f"{domain['delta']:+} [{domain['ci'][0]:+}, {domain['ci'][1]:+}]",
            **{c["name"]: round(c["exact_delta"], 2) for c in checks},
            "lowest general Δ": round(min(c["exact_delta"] for c in checks), 2),
            "holds": holds({"dev": {"general": checks}}, ""),
            **sig,
        }
        if args.half == "check":  # reported on the general checks' other halves, never chosen on
            reported = general_checks(base, enc, "check")
            row |= {f"check {c['name']}": round(c["exact_delta"], 2) for c in reported}
            row["check lowest Δ"] = round(min(c["exact_delta"] for c in reported), 2)
        rows.append(row)
        print(row, flush=True)
    print_table(rows, list(rows[0]))
    suffix = "-check" if args.half == "check" else ""
    out = ROOT / "bench" / "results" / f"blend-signal-{args.set}{suffix}.json"
    out.write_text(json.dumps({"set": args.set, "size": len(texts), "held_out": len(held), "rows": rows}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
