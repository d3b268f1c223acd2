"""Rebuild examples/pairs/wordnet-glosses.tsv: a general dictionary's pairs, common English words and the gloss of
their first sense, from Princeton WordNet 3.0: what `bench/bench_estimate.py --pairs wordnet-glosses` prices and runs
(issue 59: a dictionary file nobody here wrote, for the estimate on a pairs run; FOLDOC is the other).

Each row is one word and its first sense (WordNet 3.0 licence: see
examples/pairs/wordnet-glosses_LICENSE.txt):
`id<TAB>half<TAB>group<TAB>term<TAB>text` (the columns of examples/pairs/foldoc.tsv).

- term: a lemma of WordNet's index files as it writes it (underscores made spaces): a word or a short phrase of
  letters, spaces, hyphens and apostrophes, tagged at least MIN_TAGGED times in WordNet's sense-tagged corpus (its
  `tagsense_cnt`: the common words) in the part of speech taken, the one where it is tagged most (ties: noun, verb,
  adjective, adverb);
- text: the gloss of its first sense in that part of speech (WordNet orders senses by their tagged frequency), its
  quoted examples dropped: "a motor vehicle with four wheels; usually propelled by an internal combustion engine"; at
  least MIN_WORDS words;
- group: the sense's lexicographer file (noun.artifact, verb.motion, adj.all, ...: 45 of them): what the halves are
  split by, so that a half holds whole semantic fields;
- half: dev (what chooses defaults) or check (reported once): the groups, shuffled with SPLIT_SEED (which breaks ties
  in size), each given, largest first, to the half with fewer rows so far;
- id: `g`, the part of speech and the sense's synset offset (`gn02958343`).

One row per gloss: synonyms share their first sense's gloss (car, automobile), and the most tagged of them keeps it
(ties: the first in alphabetical order); a term that is another's but for case, spaces or hyphens is left out.

Nothing is fetched at run time. To rebuild the shipped file (Debian 12 "bookworm" package):

    apt-get download wordnet-base=1:3.0-37
    .venv/bin/python scripts/make_pairs_wordnet_glosses.py wordnet-base_1%3a3.0-37_all.deb

The package is read in place (usr/share/wordnet/index.* and data.*; `dpkg-deb -x` shows the same files). The same
package gives the same bytes; the script prints the file's sha256.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from make_jargon_docs import deb_members  # reads a .deb's files in place (scripts/ is on sys.path)
from pairs_halves import build_and_write, halves

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "examples" / "pairs" / "wordnet-glosses.tsv"
POS = ("noun", "verb", "adj", "adv")  # the order that breaks ties between parts of speech
LETTER = {"noun": "n", "verb": "v", "adj": "a", "adv": "r"}  # as WordNet writes them
MIN_TAGGED, MIN_WORDS = 2, 4
SPLIT_SEED = 7
_TERM = re.compile(r"[a-z][a-z' -]*[a-z]")
_EXAMPLE = re.compile(r';?\s*"[^"]*"')


def lex_files() -> dict[int, str]:
    """Lexicographer file numbers -> names (noun.artifact, ...): the list of lexnames(5WN), which the package's data
    files number their senses by."""
    names = (
        "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body "
        "noun.cognition noun.communication noun.event noun.feeling noun.food noun.group noun.location noun.motive "
        "noun.object noun.person noun.phenomenon noun.plant noun.possession noun.process noun.quantity "
        "noun.relation noun.shape noun.state noun.substance noun.time verb.body verb.change verb.cognition "
        "verb.communication verb.competition verb.consumption verb.contact verb.creation verb.emotion verb.motion "
        "verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl"
    )
    return dict(enumerate(names.split()))


def gloss(line: bytes) -> tuple[int, str]:
    """A data file line's (lexicographer file number, gloss without its quoted examples)."""
    text = line.decode("utf-8")
    fields, _, glossed = text.partition(" | ")
    lex = int(fields.split()[1])
    plain = _EXAMPLE.sub("", glossed.strip())
    plain = " ".join(plain.replace(" ;", ";").split()).strip(" ;")
    return lex, plain


def build(deb: Path) -> list[tuple[str, str, str, str, str]]:
    members = deb_members(deb, *[f"wordnet/index.{p}" for p in POS], *[f"wordnet/data.{p}" for p in POS])
    index, data = dict(zip(POS, members[:4], strict=True)), dict(zip(POS, members[4:], strict=True))
    lexnames = lex_files()
    best: dict[str, tuple[int, int, str, int]] = {}  # term -> (-tagged, pos order, pos, first offset)
    for order, pos in enumerate(POS):
        for line in index[pos].decode("utf-8").splitlines():
            if line.startswith(" "):  # the licence at the file's head
                continue
            f = line.split()
            lemma, p_cnt = f[0], int(f[3])
            tagged, offsets = int(f[5 + p_cnt]), f[6 + p_cnt :]
            term = lemma.replace("_", " ")
            if tagged < MIN_TAGGED or not _TERM.fullmatch(term):
                continue
            key = (-tagged, order, pos, int(offsets[0]))
            if term not in best or key < best[term]:
                best[term] = key
    rows: dict[str, tuple[int, str, str, str, str]] = {}  # gloss -> the row of its most tagged word
    for term, (minus_tagged, _, pos, offset) in sorted(best.items()):
        raw = data[pos]
        line = raw[offset : raw.index(b"\n", offset)]
        lex, text = gloss(line)
        if len(text.split()) < MIN_WORDS or "\t" in text:
            continue
        row = (minus_tagged, f"g{LETTER[pos]}{offset:08d}", lexnames.get(lex, pos), term, text)
        if text not in rows or row < rows[text]:
            rows[text] = row
    kept = sorted(rows.values(), key=lambda r: (r[3], r[1]))  # in the order of a dictionary
    squashed = Counter(re.sub(r"[ -]", "", r[3]) for r in kept)
    kept = [r for r in kept if squashed[re.sub(r"[ -]", "", r[3])] == 1]
    half = halves(Counter(r[2] for r in kept), SPLIT_SEED)
    return [(i, half[g], g, term, text) for _, i, g, term, text in kept]


def main() -> None:
    build_and_write(__doc__, OUT, build)


if __name__ == "__main__":
    main()
