"""What a run's general checks cost on a larger base (issue 25's budget): the encode of every check half's texts
(mirror.checks.CHECKS, what runs after each run, for the tuned model: the base's side is kept per base) by an encoder
of a given shape, at a given precision, on this machine.

    .venv/bin/python bench/bench_check_cost.py --shape bundled --shape bert-base [--precision auto|fp32|bf16]
        [--check "STS-B dev" ...] [--rounds 3]

`bundled` is the bundled all-MiniLM-L6-v2 itself (6 layers, 384 wide); `bert-base` (12 x 768) and `bert-large`
(24 x 1024) are those shapes randomly initialised with the bundled tokenizer and its 256-token limit: what an
encode costs depends on the shape and the tokens, not on the weights, and no such model installs offline here.
`mpnet-base` (all-mpnet-base-v2's config) and `deberta-v3-base` (microsoft/deberta-v3-base's: disentangled relative
attention over 256 buckets) are other architectures of BERT-base's size, built the same way (the bundled tokenizer's
vocabulary), each loaded by `load_encoder` as a user's folder is: with eager attention, which they have in transformers.
Output: a table (seconds per check and in all, and the ratio to the bundled shape when it ran), and
bench/out/check-cost.json.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from common import machine, print_table, write_json

from explorer.tune.bases import KNOWN_CONFIGS
from mirror.checks import CHECKS, check_texts
from mirror.encoder import load_encoder

BERT_BASE = {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072}
SHAPES = {
    "bert-base": {"model_type": "bert", **BERT_BASE},
    "bert-large": {
        "model_type": "bert",
        "num_hidden_layers": 24,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
    },  # fmt: skip
    "mpnet-base": KNOWN_CONFIGS["sentence-transformers/all-mpnet-base-v2"],
    "deberta-v3-base": KNOWN_CONFIGS["microsoft/deberta-v3-base"],
}


def shaped(shape: str, scratch: Path):
    """The bundled encoder, or a random one of `shape` with the bundled tokenizer, saved and loaded as a user's."""
    bundled = load_encoder("bundled")
    if shape == "bundled":
        return bundled
    import torch
    from transformers import AutoConfig, AutoModel

    fields = {**SHAPES[shape], "vocab_size": bundled.model.config.vocab_size, "pad_token_id": 0}
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    torch.manual_seed(0)
    folder = scratch / shape
    AutoModel.from_config(config).save_pretrained(folder)
    bundled.tokenizer.save_pretrained(folder)
    encoder = load_encoder(folder, pooling="mean")
    encoder.max_seq_length = bundled.max_seq_length  # the bundled model's limit: the same tokens as its checks
    return encoder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", action="append", choices=["bundled", *SHAPES], help="(default: bundled, bert-base)")
    parser.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    names = [c.name for c in CHECKS]
    parser.add_argument("--check", action="append", choices=names, help="only these checks (default: all)")
    parser.add_argument(
        "--rounds", type=int, default=1, help="time every shape this many times, interleaved; keep each one's fastest"
    )
    args = parser.parse_args()
    checks = [c for c in CHECKS if not args.check or c.name in args.check]
    texts = {c.name: check_texts(c, "check") for c in checks}
    with tempfile.TemporaryDirectory(prefix="check-cost-") as tmp:
        encoders = {shape: shaped(shape, Path(tmp)) for shape in args.shape or ["bundled", "bert-base"]}
        rows = {shape: {"shape": shape, "attention": e.attention} for shape, e in encoders.items()}
        for encoder in encoders.values():
            encoder.encode(["warm up"], precision=args.precision)
        # rounds interleave the shapes: on a machine shared with other work, a burst slows one round of every shape,
        # and each shape's fastest round is the one least slowed
        for _ in range(args.rounds):
            for shape, encoder in encoders.items():
                for name, check_input in texts.items():
                    started = time.perf_counter()
                    encoder.encode(check_input, precision=args.precision)
                    took = round(time.perf_counter() - started, 2)
                    rows[shape][name] = min(took, rows[shape].get(name, took))
                rows[shape]["all s"] = round(sum(rows[shape][n] for n in texts), 1)
                print(rows[shape], flush=True)
    rows = list(rows.values())
    bundled = next((r["all s"] for r in rows if r["shape"] == "bundled"), None)
    for row in rows:
        row["x bundled"] = round(row["all s"] / bundled, 1) if bundled else "-"
    print(f"\nA run's general checks, the tuned side (precision {args.precision}, {machine()['cpus']} cores):")
    print_table(rows, ["shape", "attention", *(c.name for c in checks), "all s", "x bundled"])
    load = round(os.getloadavg()[0], 1)  # other work on the machine slows every row: say how busy it was
    print(f"load average at the end: {load} ({os.cpu_count()} cores)")
    write_json("check-cost.json", {"precision": args.precision, "rows": rows, "machine": machine(), "load": load})


if __name__ == "__main__":
    main()
