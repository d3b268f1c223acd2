"""Speed: wall time of the words run (10k words, 2 epochs, batch 200) for mirror_tune vs
sentence-transformers' own trainer with MultipleNegativesRankingLoss on the same strings, model,
batch size, lr and max length, measured in one process, one after the other.

    .venv/bin/pip install -r bench/requirements.txt   # the peer needs datasets + accelerate
    .venv/bin/python bench/bench_speed.py [--limit 10000] [--device auto]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time

from common import data_path, peer_training_args, print_table, write_json

from mirror import MirrorConfig, read_texts
from mirror.encoder import bundled_model_path
from mirror.train import mirror_tune


def run_ours(texts: list[str], config: MirrorConfig) -> dict:
    started = time.perf_counter()
    result = mirror_tune(texts, config)
    wall = time.perf_counter() - started
    return {
        "run": f"ours: mirror_tune, precision={config.precision}",
        "steps": result.steps,
        "train_s": result.seconds,
        "wall_s": wall,
        "final_loss": result.final_loss,
        "device": result.device,
    }


def run_peer(texts: list[str], config: MirrorConfig, device: str, bf16: bool) -> dict:
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    started = time.perf_counter()
    model = SentenceTransformer(str(bundled_model_path()), device=device)
    model.max_seq_length = config.max_length
    dataset = Dataset.from_dict({"anchor": texts, "positive": texts})
    with tempfile.TemporaryDirectory() as out:
        args = peer_training_args(config, out, device, bf16)
        loss = MultipleNegativesRankingLoss(model, scale=1.0 / config.temperature)
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
        t0 = time.perf_counter()
        out_state = trainer.train()
        train_s = time.perf_counter() - t0
    return {
        "run": f"peer: ST trainer + MNRL, {'bf16' if bf16 else 'fp32 (its default)'}",
        "steps": out_state.global_step,
        "train_s": train_s,
        "wall_s": time.perf_counter() - started,
        "final_loss": out_state.training_loss,
        "device": device,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["words", "sentences"], default="words")
    parser.add_argument("--limit", type=int, default=10000, help="number of strings")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--quick", action="store_true", help="only the default-vs-default pair")
    args = parser.parse_args()
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    texts = read_texts(data_path(args.mode))[: args.limit]
    config = MirrorConfig.preset(args.mode, device=device, pooling="mean")
    ours = run_ours(texts, config)
    peer = run_peer(texts, config, device, bf16=False)
    rows = [ours, peer]
    ratios = {"ours/peer (defaults)": ours["train_s"] / peer["train_s"]}
    if not args.quick:  # the like-for-like pairs: both fp32, both bf16
        ours32 = run_ours(texts, dataclasses.replace(config, precision="fp32"))
        peer16 = run_peer(texts, config, device, bf16=True)
        rows += [ours32, peer16]
        ratios["ours/peer (both fp32)"] = ours32["train_s"] / peer["train_s"]
        ratios["ours/peer (both bf16)"] = ours["train_s"] / peer16["train_s"]
    rows += [{"run": f"ratio {k}", "train_s": v} for k, v in ratios.items()]
    print_table(rows, ["run", "steps", "train_s", "wall_s", "final_loss", "device"])
    write_json(
        f"speed-{args.mode}-{device}.json", {"mode": args.mode, "strings": len(texts), "rows": rows, "ratios": ratios}
    )


if __name__ == "__main__":
    main()
