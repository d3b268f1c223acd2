"""Build examples/gold/joined-sts-pairs.tsv (the "Joined STS pairs" check, not run by default: mirror/checks.py): pairs
of texts several times longer than the sentences preset trains on (50 tokens), with graded similarity, from the STS
Benchmark TEST split (so it shares nothing with STS-B dev). Real sentences, joined: not real documents.

Each document pair joins 10 STS-B test pairs of similar score: document A is their first sentences, document B
their second sentences, in the same order; the pair's score is the mean of the 10 scores (0-5). Seeded: the
file is reproducible. Licence: as the STS Benchmark (scores CC BY-SA 4.0, texts under their own licences; see
examples/STSB_LICENSE.txt).

    python scripts/make_joined_sts.py ../shared/data/stsb/sts-test.csv examples/gold/joined-sts-pairs.tsv
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

N_DOCS, PER_DOC, SEED = 240, 10, 13


def main(src: str, dst: str) -> int:
    pairs = []
    for line in Path(src).read_text(encoding="utf-8").splitlines():
        cols = line.split("\t")
        if len(cols) >= 7:
            pairs.append((float(cols[4]), cols[5].strip(), cols[6].strip()))
    pairs.sort()
    rng = random.Random(SEED)
    lines = [
        "# joined-sts-pairs: STS-B test pairs joined 10 at a time (scripts/make_joined_sts.py); text A, text B, score 0-5"
    ]
    for _ in range(N_DOCS):
        target = rng.uniform(0.0, 5.0)
        near = sorted(pairs, key=lambda p: abs(p[0] - target))[: PER_DOC * 3]  # the 30 closest scores
        picked = rng.sample(near, PER_DOC)
        a = " ".join(p[1] for p in picked)
        b = " ".join(p[2] for p in picked)
        score = sum(p[0] for p in picked) / PER_DOC
        lines.append(f"{a}\t{b}\t{score:.3f}")
    Path(dst).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {N_DOCS} document pairs to {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
