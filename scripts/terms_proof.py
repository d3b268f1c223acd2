"""Seeded before/after proof for a change of the training loop: each remedy's losses (float hex) and a hash of the
weights it leaves, on a tiny random BERT, fp32, one thread. Run it from the repo root on two commits and diff:

    .venv/bin/python scripts/terms_proof.py > before.json   # then on the other commit: > after.json; diff them
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

CASES = {
    "plain": {},
    "distill": {"distill": 1.0},
    "l2": {"l2_base": 0.5},
    "blend": {"blend_alpha": 0.5},
    "guide": {"guide_margin": 0.9},
    "long": {"long_anchor": 2.0},
    "all": {"distill": 1.0, "l2_base": 0.5, "guide_margin": 0.9, "long_anchor": 2.0, "blend_alpha": 0.7},
    "lora": {"lora_rank": 4, "blend_alpha": 0.5},
    "mix": {"mix_general": 0.5},
    "join": {"join_views": 2},
}


def main() -> None:
    import torch

    from mirror.config import MirrorConfig
    from mirror.train import mirror_tune
    from tests.conftest import SENTENCES, random_bert

    torch.set_num_threads(1)
    folder = random_bert(Path(tempfile.mkdtemp()))
    texts = [f"{s} and then {t}" for s in SENTENCES for t in SENTENCES[:3]]
    out = {}
    for name, remedy in CASES.items():
        config = MirrorConfig(
            model=str(folder), mode="sentences", batch_size=8, max_steps=4, lr=1e-3, device="cpu",
            precision="fp32", epochs=3, seed=3, **remedy,
        )  # fmt: skip
        result = mirror_tune(texts, config)
        digest = hashlib.sha256()
        for key, tensor in sorted(result.encoder.model.state_dict().items()):
            digest.update(key.encode())
            digest.update(tensor.detach().cpu().numpy().tobytes())
        out[name] = {
            "losses": [float(x).hex() for x in result.losses],
            "weights": digest.hexdigest()[:16],
            "steps": result.steps,
            "notes": result.notes,
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
