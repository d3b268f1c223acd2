"""Training speed at the hardware limit: wall time, tokens/s and achieved TFLOP/s vs the GPU's peak.

Two jobs from issue 6 (weights do not change the speed, so a randomly initialised BERT-base shape
stands in for bert-base-uncased, with the bundled model's identical uncased WordPiece tokenizer):
  sentences: BERT-base shape, 10k STS-B train sentences, 1 epoch, sentences preset
  words:     bundled MiniLM-L6, 10k most frequent words, 2 epochs, words preset

    .venv/bin/python bench/bench_gpu.py                      # on a GPU machine: both jobs, defaults
    .venv/bin/python bench/bench_gpu.py --variants default,no-bucket,compile   # each speed-up on and off
    .venv/bin/python bench/bench_gpu.py --device cpu --limit 400   # smoke run anywhere

On a bare GPU machine without this project's requirements (the lent `device` machine has torch and
transformers but not the bundled model package, whose weights are too big to carry): export the model's
config and tokenizer here, carry that folder, and run with random weights of the same shapes (the text
data is the project's own copy in examples/, see bench/common.py):

    .venv/bin/python bench/bench_gpu.py --export-shapes .gpu-shapes      # ~1 MB, no weights
    python3 bench/bench_gpu.py --shapes .gpu-shapes --variants default,no-bucket,compile   # there

Each timed run is preceded by an untimed 3-step warm-up on the same shapes (CUDA context, cuBLAS
handles, autotuning, compilation caches) so the figure is the steady training time a user sees
on a warm Space; the warm-up's own time is reported too.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import time
from pathlib import Path

from common import data_path, print_table, write_json

from mirror import MirrorConfig, read_texts
from mirror.encoder import Encoder, bundled_model_path, load_encoder
from mirror.train import mirror_tune

SHAPE_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")

VARIANTS = {
    "default": {},  # length buckets on, bf16 autocast on CUDA, loss read back every 10 steps
    "no-bucket": {"bucket_by_length": False},
    "compile": {"compile": True},
    "fp32": {"precision": "fp32"},
}

# dense bf16 tensor-core peaks (TFLOP/s), by substring of the device name
PEAKS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L4": 121.0, "A10": 125.0, "T4": 65.0}


def export_shapes(dest: Path) -> None:
    """The bundled model's config and tokenizer without its weights: all a bare GPU machine needs."""
    src = bundled_model_path()
    dest.mkdir(parents=True, exist_ok=True)
    for name in SHAPE_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, dest / name)
    print(
        f"wrote {dest} ({sum(f.stat().st_size for f in dest.iterdir()) / 1e6:.1f} MB): carry it and pass --shapes {dest}"
    )


def random_encoder(shapes: Path | None, device: str, bert_base: bool, pooling: str) -> Encoder:
    """Random weights in the bundled MiniLM's shape, or BERT-base's, with the bundled uncased tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = shapes or bundled_model_path()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    dropout = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "attn_implementation": "sdpa"}
    if bert_base:
        config = BertConfig(vocab_size=tokenizer.vocab_size, **dropout)
    else:
        config = BertConfig.from_pretrained(folder, **dropout)
    model = BertModel(config, add_pooling_layer=False)
    name = "bert-base shape" if bert_base else "MiniLM-L6 shape"
    return Encoder(model=model, tokenizer=tokenizer, pooling=pooling, max_seq_length=512, source=name).to(device)


def flops_per_sequence(hidden: int, layers: int, ffn: int, length: int) -> float:
    """Training FLOPs (3x forward) of one padded sequence through the encoder layers."""
    per_token = 2 * (4 * hidden * hidden + 2 * hidden * ffn)  # QKV + output projections, FFN
    attention = 2 * 2 * length * hidden  # scores and weighted sum, per token
    return 3 * layers * length * (per_token + attention)


def run(name: str, encoder: Encoder, texts: list[str], config: MirrorConfig) -> dict:
    cfg = encoder.model.config
    stats = {"tokens": 0, "padded": 0, "flops": 0.0}
    tokenize = encoder.tokenize

    def counting(batch_texts, max_length=None):
        batch = tokenize(batch_texts, max_length)
        n, length = batch["input_ids"].shape
        stats["tokens"] += int(batch["attention_mask"].sum())
        stats["padded"] += n * length
        stats["flops"] += n * flops_per_sequence(cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size, length)
        return batch

    encoder.tokenize = counting
    result = mirror_tune(texts, config, encoder=encoder)
    device_name = result.device
    peak = next((v for k, v in PEAKS.items() if k in device_name), None)
    tflops = stats["flops"] / result.seconds / 1e12
    return {
        "job": name,
        "device": device_name,
        "steps": result.steps,
        "train_s": result.seconds,
        "tokens_per_s": stats["tokens"] / result.seconds,
        "padding": 1 - stats["tokens"] / max(1, stats["padded"]),
        "tflops": tflops,
        "peak_pct": (100 * tflops / peak) if peak else None,
        "final_loss": result.final_loss,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="auto")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N strings")
    parser.add_argument("--variants", default="default", help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--jobs", default="sentences,words")
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument("--shapes", type=Path, help="folder from --export-shapes: random weights for both jobs")
    parser.add_argument("--export-shapes", type=Path, metavar="DIR", help="write the shapes folder and exit")
    args = parser.parse_args()
    if args.export_shapes:
        export_shapes(args.export_shapes)
        return
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    rows = []
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            parser.error(f"unknown variant {variant!r}: use {', '.join(VARIANTS)}")
        for job in args.jobs.split(","):
            common = {"device": device, **VARIANTS[variant]}
            if job == "sentences":  # a plain MLM shape: the paper's sentences preset, [CLS] pooling
                texts = read_texts(data_path("sentences"))[: args.limit]
                config = MirrorConfig.preset("sentences", model="bert-base-uncased", pooling="cls", **common)
                make = lambda: random_encoder(args.shapes, device, bert_base=True, pooling="cls")  # noqa: E731
            else:
                texts = read_texts(data_path("words"))[: args.limit]
                config = MirrorConfig.preset("words", **common)
                if args.shapes:
                    make = lambda: random_encoder(args.shapes, device, bert_base=False, pooling="mean")  # noqa: E731
                else:
                    make = lambda: load_encoder("bundled", device=device, dropout=0.1)  # noqa: E731
            warmup_s = None
            if not args.no_warmup:
                t0 = time.perf_counter()
                mirror_tune(texts, dataclasses.replace(config, max_steps=3), encoder=make())
                warmup_s = time.perf_counter() - t0
            encoder = make()
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            row = run(job, encoder, texts, config)
            rows.append({"variant": variant, **row, "wall_s": time.perf_counter() - t0, "warmup_s": warmup_s})
    columns = ["variant", "job", "device", "steps", "train_s", "wall_s", "warmup_s", "tokens_per_s", "padding"]
    print_table(rows, [*columns, "tflops", "peak_pct"])
    write_json(f"gpu-{device}-{args.variants.replace(',', '-')}.json", {"rows": rows})


if __name__ == "__main__":
    main()
