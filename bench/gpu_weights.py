"""The bundled model's real weights for a lent GPU machine, which has no bundled-model package and takes at most
64 MiB a call: saved with fp16 weights (45 MB instead of 91 MB), restored to fp32 there.

    .venv/bin/python bench/gpu_weights.py pack .gpu/minilm16          # here: the folder to carry
    python3 bench/gpu_weights.py unpack .gpu/minilm16 /tmp/minilm      # there: an fp32 sentence-transformers folder

fp16 keeps 11 bits of mantissa: each weight moves by at most 2^-11 of itself (the largest |w| of MiniLM fits fp16's
range). `unpack` prints how far the restored weights are from the packed ones' fp32 values (0: an exact restore),
and `pack` how far fp16 moved them from the originals, so the GPU scores can be compared with a CPU run of the very
same (restored) weights.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WEIGHTS = "model.safetensors"


def convert(src: Path, dest: Path, dtype_name: str) -> float:
    """Copy the model folder `src` to `dest` with its floating-point weights cast to `dtype_name`; returns the largest
    relative change of any tensor (max |new - old| / max |old|)."""
    import torch
    from safetensors.torch import load_file, save_file

    dtype = getattr(torch, dtype_name)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(WEIGHTS, ".gitattributes", "README.md"))
    tensors = load_file(str(src / WEIGHTS))
    out, worst = {}, 0.0
    for name, t in tensors.items():
        new = t.to(dtype).contiguous() if t.is_floating_point() else t
        if t.is_floating_point():
            scale = float(t.float().abs().max()) or 1.0
            worst = max(worst, float((new.float() - t.float()).abs().max()) / scale)
        out[name] = new
    save_file(out, str(dest / WEIGHTS), metadata={"format": "pt"})
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    pack = sub.add_parser("pack", help="the bundled model with fp16 weights, into DEST")
    pack.add_argument("dest", type=Path)
    unpack = sub.add_parser("unpack", help="a packed folder SRC restored to fp32 in DEST")
    unpack.add_argument("src", type=Path)
    unpack.add_argument("dest", type=Path)
    args = parser.parse_args()
    if args.command == "pack":
        from mirror.encoder import bundled_model_path

        worst = convert(bundled_model_path(), args.dest, "float16")
        size = sum(f.stat().st_size for f in args.dest.rglob("*") if f.is_file())
        print(
            f"wrote {args.dest} ({size / 1e6:.1f} MB); fp16 moved each tensor by at most {worst:.2e} of its largest value"
        )
    else:
        worst = convert(args.src, args.dest, "float32")
        print(f"restored {args.dest} in fp32 (largest change of a tensor from its fp16 value: {worst:.1e})")


if __name__ == "__main__":
    main()
