"""Build examples/general/, the general text a run can mix into its batches (`MirrorConfig.mix_general`): sentences and
frequent words of English Wikipedia articles, from the shortened dump in gensim's test data (CC BY-SA; see the
WIKI_LICENSE.txt this script writes next to them).

- wiki-sentences.txt: SENTENCES sentences of 8-40 words (a seeded sample, in the dump's order), for sentence runs;
- wiki-words.txt: the WORDS most frequent lower-case words of the same articles (most frequent first), for word runs
  (a word batch stays a batch of single words: short, dropout-only views);
- WIKI_LICENSE.txt: the licence, the source, and the titles of the articles the sentences come from.

None of it comes from a general check's data (examples/gold): a sentence found in any gold file (case-folded) is left
out, and so is every word of SimLex-999 and WordSim-353, so the checks never score text a run was mixed with.

The wheel is read in place (nothing is fetched at run time); to rebuild the shipped files byte for byte:

    pip download --no-deps gensim==4.4.0 -d /tmp/gensim
    .venv/bin/python scripts/make_general_text.py /tmp/gensim/gensim-4.4.0-*.whl examples/general

The wikitext is made plain by bench/bench_longdoc_sources.py's parser (the one its Wikipedia documents used).
"""

from __future__ import annotations

import random
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_longdoc_sources import DUMP, article_pages, plain  # noqa: E402

from mirror.evaluate import read_pairs  # noqa: E402

SENTENCES, WORDS = 4000, 5000
WORD_RANGE = (8, 40)  # words per sentence, both ends included
GOLD = ROOT / "examples" / "gold"
PAIR_SETS = ("simlex999.txt", "wordsim353.tsv")
_CLEAN = re.compile(r"^[A-Z][^|{}\[\]=<>*#_~\\]*[.!?]$")  # prose: starts a sentence, ends one, no markup left
_WORD = re.compile(r"[a-z]+")


def articles(wheel: Path) -> list[tuple[str, str]]:
    """(title, plain text) of every article of the dump (no redirects, lists or disambiguation pages)."""
    return [(title, plain(wikitext)) for title, wikitext in article_pages(wheel)]


def build(wheel: Path) -> tuple[list[str], list[str], list[str]]:
    """The sentences, the words and the titles of the articles the sentences come from."""
    gold = "\n".join(p.read_text(encoding="utf-8").casefold() for p in sorted(GOLD.glob("*.t*")))
    gold_words = {w.casefold() for name in PAIR_SETS for a, b, _ in read_pairs(GOLD / name) for w in (a, b)}
    candidates, seen, counts = [], set(), Counter()
    for title, text in articles(wheel):
        counts.update(_WORD.findall(text.lower()))
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", text):
            key = sentence.casefold()
            if not _CLEAN.match(sentence) or "http" in key or key in seen:
                continue
            if WORD_RANGE[0] <= len(sentence.split()) <= WORD_RANGE[1] and key not in gold:
                seen.add(key)
                candidates.append((title, sentence))
    picked = sorted(random.Random(0).sample(range(len(candidates)), SENTENCES))
    sentences = [candidates[i][1] for i in picked]
    titles = sorted({candidates[i][0] for i in picked})
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    words = [w for w, _ in ranked if len(w) > 1 and w not in gold_words][:WORDS]
    return sentences, words, titles


LICENSE = """\
General text for mixing into training batches (MirrorConfig.mix_general): wiki-sentences.txt and wiki-words.txt.

Source: English Wikipedia articles, as in the shortened dump that gensim 4.4.0 ships in its test data
({dump}). The text is Wikipedia contributors' work, licensed under the Creative Commons Attribution-ShareAlike
License (CC BY-SA 3.0, https://creativecommons.org/licenses/by-sa/3.0/; current articles CC BY-SA 4.0). Changes:
wiki markup removed, the text split into sentences and a sample of them kept; the words are the most frequent words
of the same articles. The files are shared under the same licence. Rebuilt by scripts/make_general_text.py.

Each article's authors are listed in its history at https://en.wikipedia.org/w/index.php?title=TITLE&action=history.
The sentences come from these {n} articles:

{titles}
"""


def main() -> int:
    if len(sys.argv) != 3:
        raise SystemExit("usage: make_general_text.py GENSIM_WHEEL OUT_DIR")
    sentences, words, titles = build(Path(sys.argv[1]))
    out = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    (out / "wiki-sentences.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    (out / "wiki-words.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    text = LICENSE.format(dump=DUMP, n=len(titles), titles="\n".join(titles))
    (out / "WIKI_LICENSE.txt").write_text(text, encoding="utf-8")
    print(f"{len(sentences)} sentences, {len(words)} words, {len(titles)} articles -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
