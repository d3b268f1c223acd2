"""Rebuild examples/pairs/wordnet.tsv: a "short pairs" dev set of words and their synset's headword, from WordNet 3.0.

Each row is one lemma of a synset of Princeton WordNet 3.0 (WordNet 3.0 licence: see
examples/pairs/WORDNET_LICENSE.txt) with the first lemma of the same synset: `id<TAB>half<TAB>group<TAB>word<TAB>headword`.

- word: a lemma of the synset other than its first, as WordNet writes it (underscores made spaces, an adjective's
  position marker such as "(a)" dropped): the string a user uploads;
- headword: the synset's first lemma, written the same way: the partner. A synset of several lemmas gives several
  rows with one headword (ATM <- cash machine, cash dispenser, automated teller machine, ...): a partner column whose
  values repeat, the short pairs of issue 60;
- group: the synset's lexicographer file (noun.artifact, verb.motion, adj.all, ...: 45 of them): what the halves are
  split by, so that each half holds whole semantic fields, and every row of a synset one half;
- half: dev (what chooses defaults) or check (reported once): the groups, shuffled with SPLIT_SEED (which breaks ties
  in size), each given, largest first, to the half with fewer rows so far; then each half cut to at most
  ROWS_PER_HALF rows by whole synsets, drawn with SPLIT_SEED (the file stays small);
- id: the part of speech and the synset's offset in its data file, and the lemma's place in the synset (`n02977058.3`).

Left out: synsets of one lemma, a lemma that is its headword again but for case, spaces, hyphens or dots ("e-mail",
"email"), and a word that is a lemma (not the first) of two or more synsets (both rows go: each string has one
headword).

Nothing is fetched at run time. To rebuild the shipped file (Debian 12 "bookworm" package):

    apt-get download wordnet-base=1:3.0-37
    .venv/bin/python scripts/make_pairs_wordnet.py wordnet-base_3.0-37_all.deb

The package is read in place (usr/share/wordnet/data.{noun,verb,adj,adv} and the lexicographer files' names from
usr/share/man/man5/lexnames.5WN.gz; `dpkg-deb -x` shows the same files). The same package gives the same bytes; the
script prints the file's sha256.
"""

from __future__ import annotations

import gzip
import random
import re
import sys
from collections import Counter
from pathlib import Path

from make_jargon_docs import deb_members  # a .deb's files, read in place (scripts/ is on sys.path)
from pairs_halves import halves, sha256, write_table

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "examples" / "pairs" / "wordnet.tsv"
SPLIT_SEED = 7
ROWS_PER_HALF = 3000
PARTS = (("noun", "n"), ("verb", "v"), ("adj", "a"), ("adv", "r"))
_MARKER = re.compile(r"\((?:a|p|ip)\)$")  # an adjective's syntactic position: "galore(ip)"


def lemma(raw: str) -> str:
    return " ".join(_MARKER.sub("", raw).replace("_", " ").split())


def squeezed(text: str) -> str:
    """A lemma without case, spaces, hyphens or dots: what tells a spelling variant ("e-mail", "email")."""
    return re.sub(r"[\s.\-']", "", text.casefold())


def synsets(deb: Path) -> tuple[list[tuple[str, str, list[str]]], dict[int, str]]:
    """(id, lexicographer file number, lemmas) of every synset, in the data files' order, and the files' names."""
    members = deb_members(deb, *(f"wordnet/data.{name}" for name, _ in PARTS), "man5/lexnames.5WN.gz")
    names = {}
    for line in gzip.decompress(members[-1]).decode().splitlines():
        m = re.match(r"^(\d\d)\t([a-z]+\.[A-Za-z]+)", line)
        if m:
            names[int(m.group(1))] = m.group(2)
    out = []
    for (_, pos), data in zip(PARTS, members[:-1], strict=True):
        for line in data.decode("utf-8").splitlines():
            if line.startswith(" "):  # the licence header
                continue
            fields = line.split(" ")
            offset, lexfile, count = fields[0], int(fields[1]), int(fields[3], 16)
            words = [lemma(fields[4 + 2 * k]) for k in range(count)]
            out.append((f"{pos}{offset}", lexfile, words))
    return out, names


def build(deb: Path) -> list[tuple[str, str, str, str, str]]:
    found, names = synsets(deb)
    rows: list[tuple[str, str, str, str, str]] = []  # id, synset, group, word, headword
    for sid, lexfile, words in found:
        head = words[0]
        seen = {squeezed(head)}
        for k, word in enumerate(words[1:], 1):
            if squeezed(word) in seen:
                continue
            seen.add(squeezed(word))
            rows.append((f"{sid}.{k}", sid, names[lexfile], word, head))
    uses = Counter(r[3].casefold() for r in rows)
    rows = [r for r in rows if uses[r[3].casefold()] == 1 and "\t" not in r[3] + r[4]]
    half = halves(Counter(r[2] for r in rows), SPLIT_SEED)
    kept: set[str] = set()
    rng = random.Random(SPLIT_SEED)
    for h in ("dev", "check"):
        per_synset = Counter(r[1] for r in rows if half[r[2]] == h)
        order = sorted(per_synset)
        rng.shuffle(order)
        total = 0
        for sid in order:
            if total + per_synset[sid] <= ROWS_PER_HALF:
                kept.add(sid)
                total += per_synset[sid]
    return [(i, half[g], g, word, head) for i, sid, g, word, head in rows if sid in kept]


def main() -> None:
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    out = Path(sys.argv[2]) if len(sys.argv) == 3 else OUT
    rows = build(Path(sys.argv[1]))
    data = write_table(out, "id\thalf\tgroup\tword\theadword", rows)
    n = Counter(r[1] for r in rows)
    heads = {h: len({r[4].casefold() for r in rows if r[1] == h}) for h in ("dev", "check")}
    print(
        f"{out}: {len(rows):,} rows ({n['dev']:,} dev with {heads['dev']:,} headwords, {n['check']:,} check with "
        f"{heads['check']:,}) in {len({r[2] for r in rows})} groups; sha256 {sha256(data)}"
    )


if __name__ == "__main__":
    main()
