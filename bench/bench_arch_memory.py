"""The memory plan (mirror.memory.step_bytes) against what each BERT-family architecture really holds, at one shape.

    .venv/bin/python bench/bench_arch_memory.py [--hidden 256 --heads 4 --layers 2 --batch 4 --lengths 128 512]

For every architecture (random weights; a shape given once for all, each architecture's own layout: ModernBERT's
gated MLP, DeBERTa's disentangled attention with its 256-bucket relative span, the attention each loads with in
`load_encoder`, a run's dropout of 0.1): a training forward's tensors saved for backward (autograd's saved_tensors_hooks: what a step keeps,
weights excluded) against the training estimate, and an inference forward's allocation peak (the CPU profiler's
"Total Allocated") against the inference estimate without its fixed FIRST_CALL_BYTES. Both fp32, one thread.
A ratio above 1 is an upper bound; the bundled model's calibration (RSS, mirror/memory.py) puts BERT's training
estimate at 1.07-1.56x the peak. Output: a table, and bench/out/arch-memory.json.
"""

from __future__ import annotations

import argparse

from common import machine, print_table, write_json

# (config class name, its keywords beyond the shared shape)
ARCHITECTURES = {
    "BERT": ("BertConfig", {}),
    "DistilBERT": ("DistilBertConfig", {}),
    "MPNet": ("MPNetConfig", {"max_position_embeddings": 1026}),
    "DeBERTa-v2": (
        "DebertaV2Config",
        {
            "relative_attention": True,
            "position_buckets": 256,
            "pos_att_type": ["p2c", "c2p"],
            "position_biased_input": False,
            "max_position_embeddings": 1024,
            "max_relative_positions": -1,
        },
    ),  # fmt: skip
    "ModernBERT": (
        "ModernBertConfig",
        {
            "global_attn_every_n_layers": 1,
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "cls_token_id": 1,
            "sep_token_id": 2,
        },
    ),  # fmt: skip
}


def build(arch: str, hidden: int, heads: int, layers: int):
    """A random model of `arch` at this shape (intermediate 4 x hidden), loaded with the attention load_encoder takes."""
    import torch
    import transformers
    from transformers import AutoModel

    from mirror.encoder import DROPOUT_KEYS, fastest_attention

    name, extra = ARCHITECTURES[arch]
    if arch == "DistilBERT":
        shape = {"dim": hidden, "n_heads": heads, "n_layers": layers, "hidden_dim": 4 * hidden}
    else:
        shape = {"hidden_size": hidden, "num_attention_heads": heads, "num_hidden_layers": layers}
        shape["intermediate_size"] = 4 * hidden
    config = getattr(transformers, name)(vocab_size=1000, **shape, **extra)
    for key in DROPOUT_KEYS:  # the run's dropout, as load_encoder sets it (ModernBERT's default is none)
        if hasattr(config, key):
            setattr(config, key, 0.1)
    torch.manual_seed(0)
    return AutoModel.from_config(config, attn_implementation=fastest_attention(config))


def batch(n: int, length: int):
    import torch

    ids = torch.randint(5, 1000, (n, length))
    mask = torch.ones(n, length, dtype=torch.long)
    mask[0, length // 2 :] = 0  # padding, so every model builds its mask
    return {"input_ids": ids, "attention_mask": mask}


def main() -> None:
    import torch

    from mirror import memory

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512])
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for arch in ARCHITECTURES:
        model = build(arch, args.hidden, args.heads, args.layers)
        geometry = memory.model_geometry(model)
        for length in args.lengths:
            inputs = batch(args.batch, length)
            kept = memory.kept_for_backward(model, inputs)
            peak = memory.inference_peak(model, inputs)
            train_est = memory.step_bytes(args.batch, length, geometry, 4, training=True)
            infer_est = memory.step_bytes(args.batch, length, geometry, 4, training=False) - memory.FIRST_CALL_BYTES
            rows.append(
                {
                    "architecture": arch,
                    "attention": model.config._attn_implementation,
                    "length": length,
                    "train kept MB": round(kept / 2**20, 1),
                    "train est MB": round(train_est / 2**20, 1),
                    "train x": round(train_est / kept, 2),
                    "infer peak MB": round(peak / 2**20, 1),
                    "infer est MB": round(infer_est / 2**20, 1),
                    "infer x": round(infer_est / peak, 2),
                }
            )
            print(rows[-1], flush=True)
    shape = f"{args.layers} layers x {args.hidden}, {args.heads} heads, {args.batch} strings"
    print(f"\nThe memory plan against what each architecture holds ({shape}, fp32, 1 thread):")
    print_table(rows, list(rows[0]))
    write_json("arch-memory.json", {"args": vars(args), "rows": rows, "machine": machine()})


if __name__ == "__main__":
    main()
