"""Training speed at the hardware limit: wall time, tokens/s and achieved TFLOP/s vs the GPU's peak, ours and the peer.

Two jobs (weights do not change the speed, so a randomly initialised BERT-base shape stands in for
bert-base-uncased, with the bundled model's identical uncased WordPiece tokenizer):
  sentences: BERT-base shape, 10,534 STS-B train sentences, 1 epoch, the sentences preset of a plain MLM ([CLS])
  words:     the bundled MiniLM-L6 shape, 10k most frequent words, 2 epochs, the words preset

    .venv/bin/python bench/bench_gpu.py                      # on a GPU machine: both jobs, defaults
    .venv/bin/python bench/bench_gpu.py --variants default,no-bucket,compile,fp32 --peer --profile 12
    .venv/bin/python bench/bench_gpu.py --device cpu --limit 400 --peer   # smoke run anywhere

`--peer`: sentence-transformers' own trainer with MultipleNegativesRankingLoss(scale=1/τ) on (s, s) pairs (what a
user would run instead), on the same strings, model shape and pooling, batch, epochs, lr, max length and bf16,
timed the same way (its own 3-step warm-up first, then `trainer.train()`), in the same process, after ours.
`--profile N`: N steps of each job under torch.profiler: the top kernels, and what the host waited on.

On a bare GPU machine without this project's requirements (the lent `device` machine has torch, transformers and
sentence-transformers, not the bundled model package): carry the model folder (bench/gpu_weights.py packs the real
weights in fp16, 45 MB) or only its config and tokenizer (--export-shapes, 1 MB), and pass --shapes DIR: both jobs
then take their tokenizer and the MiniLM shape from there. bench/gpu_run.sh is the whole device call.

Each timed run is preceded by an untimed 3-step warm-up of the same encoder object on the same shapes (CUDA
context, cuBLAS handles, autotuning, torch.compile's graphs) so the figure is the steady training time a user sees
on a warm server; the warm-up's own time is reported too (with `compile` it is mostly compiling, and a user's run
pays it each time: a served run loads a fresh encoder).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import tempfile
import time
from pathlib import Path

from common import OUT, data_path, machine, peer_training_args, print_table

from mirror import MirrorConfig, read_texts
from mirror.encoder import Encoder, bundled_model_path, save_encoder
from mirror.train import mirror_tune

SHAPE_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")

VARIANTS = {
    "default": {},  # length buckets on, bf16 autocast on CUDA, loss read back every 10 steps
    "no-bucket": {"bucket_by_length": False},
    "compile": {"compile": True},
    "fp32": {"precision": "fp32"},
}

# dense bf16 tensor-core peaks (TFLOP/s, without sparsity), by substring of the device name
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
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = shapes or bundled_model_path()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    dropout = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "attn_implementation": "sdpa"}
    if bert_base:
        config = BertConfig(vocab_size=tokenizer.vocab_size, **dropout)
    else:
        config = BertConfig.from_pretrained(folder, **dropout)
    torch.manual_seed(0)
    model = BertModel(config, add_pooling_layer=False)
    name = "bert-base shape" if bert_base else "MiniLM-L6 shape"
    return Encoder(model=model, tokenizer=tokenizer, pooling=pooling, max_seq_length=512, source=name).to(device)


def flops_per_sequence(hidden: int, layers: int, ffn: int, length: int) -> float:
    """Training FLOPs (3x forward) of one padded sequence through the encoder layers."""
    per_token = 2 * (4 * hidden * hidden + 2 * hidden * ffn)  # QKV + output projections, FFN
    attention = 2 * 2 * length * hidden  # scores and weighted sum, per token
    return 3 * layers * length * (per_token + attention)


class Counter:
    """Tokens, padded slots and FLOPs of every batch a tokenizer call makes (wraps `tokenize`)."""

    def __init__(self, model_config):
        self.cfg = model_config
        self.tokens = self.padded = 0
        self.flops = 0.0

    def add(self, attention_mask) -> None:
        n, length = attention_mask.shape
        self.tokens += int(attention_mask.sum())
        self.padded += n * length
        c = self.cfg
        self.flops += n * flops_per_sequence(c.hidden_size, c.num_hidden_layers, c.intermediate_size, length)

    def row(self, seconds: float, device_name: str) -> dict:
        peak = next((v for k, v in PEAKS.items() if k in device_name), None)
        tflops = self.flops / seconds / 1e12
        return {
            "tokens_per_s": self.tokens / seconds,
            "padding": 1 - self.tokens / max(1, self.padded),
            "tflops": tflops,
            "peak_pct": (100 * tflops / peak) if peak else None,
        }


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def run_ours(job: str, encoder: Encoder, texts: list[str], config: MirrorConfig, device: str) -> dict:
    counter = Counter(encoder.model.config)
    tokenize = encoder.tokenize

    def counting(batch_texts, max_length=None):
        batch = tokenize(batch_texts, max_length)
        counter.add(batch["attention_mask"])
        return batch

    encoder.tokenize = counting
    sync(device)
    t0 = time.perf_counter()
    result = mirror_tune(texts, config, encoder=encoder)
    sync(device)
    wall = time.perf_counter() - t0
    encoder.tokenize = tokenize
    return {
        "job": job,
        "run": "ours",
        "device": result.device,
        "steps": result.steps,
        "train_s": result.seconds,
        "wall_s": wall,
        **counter.row(result.seconds, result.device),
        "final_loss": result.final_loss,
    }


def run_peer(job: str, encoder: Encoder, texts: list[str], config: MirrorConfig, device: str, warmup: bool) -> dict:
    """sentence-transformers' trainer + MNRL on (s, s) pairs over the same model (saved, loaded by ST), bf16 unless
    the variant is fp32; its own 3-step warm-up on the same model object first."""
    import torch
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
    )

    try:
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    except ImportError:  # older sentence-transformers
        from sentence_transformers.losses import MultipleNegativesRankingLoss

    with tempfile.TemporaryDirectory() as tmp:
        save_encoder(encoder, Path(tmp) / "model")
        model = SentenceTransformer(str(Path(tmp) / "model"), device=device)
    model.max_seq_length = config.max_length
    counter = Counter(model[0].auto_model.config)
    hook = "preprocess" if hasattr(model, "preprocess") else "tokenize"  # what its data collator calls (6.2 / 6.0)
    original = getattr(model, hook)

    def counting(texts_, *args, **kwargs):
        features = original(texts_, *args, **kwargs)
        if "attention_mask" in features:
            counter.add(features["attention_mask"])
        return features

    setattr(model, hook, counting)
    dataset = Dataset.from_dict({"anchor": texts, "positive": texts})
    bf16 = device == "cuda" and config.precision != "fp32" or config.precision == "bf16"

    def trainer(out: str, max_steps: int) -> SentenceTransformerTrainer:
        args = peer_training_args(config, out, device, bf16, max_steps=max_steps, dataloader_drop_last=False)
        loss = MultipleNegativesRankingLoss(model, scale=1.0 / config.temperature)
        return SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss)

    with tempfile.TemporaryDirectory() as out:
        warm_s = None
        if warmup:
            t0 = time.perf_counter()
            trainer(out, 3).train()
            sync(device)
            warm_s = time.perf_counter() - t0
        counter.tokens = counter.padded = 0
        counter.flops = 0.0
        t = trainer(out, -1)
        sync(device)
        t0 = time.perf_counter()
        state = t.train()
        sync(device)
        train_s = time.perf_counter() - t0
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    return {
        "job": job,
        "run": f"peer: ST trainer + MNRL, {'bf16' if bf16 else 'fp32'}",
        "device": name,
        "steps": state.global_step,
        "train_s": train_s,
        "wall_s": train_s,
        "warmup_s": warm_s,
        **counter.row(train_s, name),
        "final_loss": state.training_loss,
    }


def profile(job: str, encoder: Encoder, texts: list[str], config: MirrorConfig, steps: int, out_dir: Path) -> dict:
    """`steps` steps under torch.profiler: the kernels' share of the wall time and what the host spent it on."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    config = dataclasses.replace(config, max_steps=steps)
    mirror_tune(texts, dataclasses.replace(config, max_steps=2), encoder=encoder)  # warm
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        result = mirror_tune(texts, config, encoder=encoder)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    events = prof.key_averages()
    kernel_us = sum(e.self_device_time_total for e in events if e.device_type.name == "CUDA")
    syncs = {
        e.key: e.count
        for e in events
        if any(s in e.key for s in ("Synchronize", "cudaMemcpy", "aten::item", "aten::_local_scalar_dense"))
    }
    table_gpu = events.table(sort_by="self_device_time_total", row_limit=14)
    table_cpu = events.table(sort_by="self_cpu_time_total", row_limit=14)
    (out_dir / f"profile-{job}.txt").write_text(table_gpu + "\n\n" + table_cpu)
    print(
        f"\n### profile: {job}, {steps} steps: wall {wall:.3f} s (loop {result.seconds:.3f} s), kernels busy "
        f"{kernel_us / 1e6:.3f} s = {100 * kernel_us / 1e6 / result.seconds:.0f}% of the loop; host waits: {syncs}"
    )
    print(table_gpu)
    return {"job": job, "steps": steps, "loop_s": result.seconds, "kernel_s": kernel_us / 1e6, "waits": syncs}


def job_setup(
    job: str, args: argparse.Namespace, device: str, variant: dict
) -> tuple[list[str], MirrorConfig, Encoder]:
    common = {"device": device, **variant}
    if job == "sentences":  # a plain MLM shape: the paper's sentences preset, [CLS] pooling
        texts = read_texts(data_path("sentences"))[: args.limit]
        config = MirrorConfig.preset("sentences", model="bert-base-uncased", pooling="cls", **common)
        encoder = random_encoder(args.shapes, device, bert_base=True, pooling="cls")
    else:  # the bundled model's preset (a sentence encoder: blends at the words α), its shape with random weights
        texts = read_texts(data_path("words"))[: args.limit]
        config = MirrorConfig.preset("words", **common)
        encoder = random_encoder(args.shapes, device, bert_base=False, pooling="mean")
    return texts, config, encoder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="auto")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N strings")
    parser.add_argument("--variants", default="default", help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--jobs", default="sentences,words")
    parser.add_argument(
        "--peer", action="store_true", help="also time sentence-transformers' trainer (default variant)"
    )
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="profile N steps of each job (CUDA)")
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument("--shapes", type=Path, help="a model folder (or --export-shapes'): tokenizer and MiniLM shape")
    parser.add_argument("--export-shapes", type=Path, metavar="DIR", help="write the shapes folder and exit")
    parser.add_argument("--out", type=Path, default=OUT, help="folder for the JSON (written after every row)")
    args = parser.parse_args()
    if args.export_shapes:
        export_shapes(args.export_shapes)
        return
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / f"gpu-{device}.json"
    rows: list[dict] = []
    profiles: list[dict] = []
    columns = ["variant", "job", "run", "steps", "train_s", "wall_s", "warmup_s", "tokens_per_s", "padding", "tflops"]

    def save() -> None:
        ratios = {}
        for job in args.jobs.split(","):
            ours = next((r for r in rows if r["job"] == job and r["variant"] == "default" and r["run"] == "ours"), None)
            peer = next((r for r in rows if r["job"] == job and r["run"].startswith("peer")), None)
            if ours and peer:
                ratios[job] = {"train_s": ours["train_s"] / peer["train_s"], "wall_s": ours["wall_s"] / peer["train_s"]}
        payload = {"machine": machine(), "argv": __import__("sys").argv, "rows": rows, "ratios": ratios}
        json_path.write_text(json.dumps({**payload, "profiles": profiles}, indent=2, default=str))

    def measure(variant: str, job: str) -> None:
        texts, config, encoder = job_setup(job, args, device, VARIANTS[variant])
        warmup_s = None
        if not args.no_warmup:  # the same encoder object: compiled graphs and autotuning are kept
            sync(device)
            t0 = time.perf_counter()
            mirror_tune(texts, dataclasses.replace(config, max_steps=3), encoder=encoder)
            sync(device)
            warmup_s = time.perf_counter() - t0
        row = {"variant": variant, **run_ours(job, encoder, texts, config, device), "warmup_s": warmup_s}
        rows.append(row)
        print(
            f"{variant:9} {job:9} ours: {row['steps']} steps, train {row['train_s']:.3f} s, "
            f"{row['tflops']:.1f} TFLOP/s, padding {row['padding']:.1%}",
            flush=True,
        )
        save()
        if args.profile and variant == "default" and device == "cuda":
            try:
                profiles.append(profile(job, encoder, texts, config, args.profile, args.out))
            except Exception as exc:  # the peer still runs
                print(f"profile {job} FAILED: {type(exc).__name__}: {exc}", flush=True)
            save()
        if args.peer and variant == "default":
            peer = {"variant": variant, **run_peer(job, encoder, texts, config, device, not args.no_warmup)}
            rows.append(peer)
            print(
                f"{variant:9} {job:9} peer: {peer['steps']} steps, train {peer['train_s']:.3f} s, "
                f"padding {peer['padding']:.1%}",
                flush=True,
            )
            save()

    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            parser.error(f"unknown variant {variant!r}: use {', '.join(VARIANTS)}")
        for job in args.jobs.split(","):
            try:
                measure(variant, job)
            except Exception as exc:  # one variant failing (a compiler missing, out of memory) keeps the others
                rows.append({"variant": variant, "job": job, "run": f"failed: {type(exc).__name__}: {exc}"[:300]})
                print(f"{variant:9} {job:9} FAILED: {type(exc).__name__}: {exc}", flush=True)
                save()
            if device == "cuda":
                torch.cuda.empty_cache()
    print()
    print_table(rows, [*columns, "peak_pct", "final_loss"])
    save()
    for job, r in json.loads(json_path.read_text())["ratios"].items():
        print(f"ours / peer, {job}: train {r['train_s']:.3f} (our whole mirror_tune call: {r['wall_s']:.3f})")
    print(f"\nwrote {json_path}")


if __name__ == "__main__":
    main()
