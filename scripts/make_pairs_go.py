"""Rebuild examples/pairs/gene-ontology.tsv: a "pairs" set of biology terms and their definitions, from the Gene
Ontology.

Each row is one term of the Gene Ontology (GO; go-basic.obo of 2022-07-01 as Bioconductor's GO.db 3.16.0 holds it;
CC BY 4.0: see examples/pairs/gene-ontology_LICENSE.txt): `id<TAB>half<TAB>group<TAB>term<TAB>text`.

- term: the term's name as GO writes it ("mitochondrion inheritance", "zinc ion transmembrane transporter
  activity"): the partner, the short side;
- text: the term's definition, plain prose (GO's own; the citations are not in GO.db's table), cut to MAX_WORDS
  words at the last sentence end within them: the string a user uploads. A glossary of biology (processes,
  molecular functions, cell parts) that nobody on the project wrote;
- group: the first letter (a-z; `#` for a digit or symbol) of the term once the words that make a family of terms
  ("positive regulation of", "cellular response to", "establishment of", ...) are taken off its front: what the
  halves are split by, so that a process and its regulation terms stay in one half;
- half: dev or check: the groups, shuffled with SPLIT_SEED (which breaks ties in size), each given, largest first,
  to the half with fewer rows so far (scripts/pairs_halves.py); then each half cut to at most ROWS_PER_HALF rows,
  drawn with SPLIT_SEED and kept in GO's order (the file stays small);
- id: the GO id (`GO:0000001`).

Left out: terms with no definition or one under MIN_WORDS words, definitions with a URL, the root, and terms or
definitions that two terms share (both go). Obsolete terms are not in GO.db's term table.

Nothing is fetched at run time. To rebuild the shipped file (Debian 12 "bookworm" package):

    apt-get download r-bioc-go.db=3.16.0-1
    .venv/bin/python scripts/make_pairs_go.py r-bioc-go.db_3.16.0-1_all.deb

The package is read in place (usr/lib/R/site-library/GO.db/extdata/GO.sqlite, table go_term; `dpkg-deb -x` shows
the same file). The same package gives the same bytes; the script prints the file's sha256.
"""

from __future__ import annotations

import random
import re
import sqlite3
import tempfile
from collections import Counter
from pathlib import Path

from make_jargon_docs import deb_members  # scripts/ is on sys.path
from pairs_halves import build_and_write, halves

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "examples" / "pairs" / "gene-ontology.tsv"
MIN_WORDS, MAX_WORDS = 8, 120
ROWS_PER_HALF = 4000
SPLIT_SEED = 7
_FAMILY = re.compile(
    r"^(?:(?:positive |negative )?regulation of |(?:cellular )?response to |establishment of |maintenance of |"
    r"detection of |modulation by |suppression by |(?:symbiont|host)-mediated )+"
)
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*$")


def group_of(term: str) -> str:
    first = _FAMILY.sub("", term.lower())[:1]
    return first if "a" <= first <= "z" else "#"


def cut(text: str) -> str:
    """At most MAX_WORDS words, ending at the last sentence end within them when there is one."""
    words = text.split()
    if len(words) <= MAX_WORDS:
        return " ".join(words)
    words = words[:MAX_WORDS]
    ends = [i for i, w in enumerate(words) if _SENTENCE_END.search(w)]
    return " ".join(words[: ends[-1] + 1] if ends else words)


def build(deb: Path) -> list[tuple[str, str, str, str, str]]:
    (db,) = deb_members(deb, "GO.db/extdata/GO.sqlite")
    with tempfile.NamedTemporaryFile(suffix=".sqlite") as f:
        f.write(db)
        f.flush()
        con = sqlite3.connect(f.name)
        terms = con.execute(
            "SELECT go_id, term, definition FROM go_term WHERE ontology != 'universal' ORDER BY go_id"
        ).fetchall()
        con.close()
    rows = []
    for go_id, term, definition in terms:
        term, text = " ".join(term.split()), cut(definition or "")
        if len(text.split()) < MIN_WORDS or re.search(r"https?:|www\.", text) or "\t" in term + text:
            continue
        rows.append((go_id, group_of(term), term, text))
    names = Counter(r[2].lower() for r in rows)
    texts = Counter(r[3] for r in rows)
    rows = [r for r in rows if names[r[2].lower()] == 1 and texts[r[3]] == 1]
    half = halves(Counter(r[1] for r in rows), SPLIT_SEED)
    kept = []
    for h in ("dev", "check"):
        mine = [i for i, r in enumerate(rows) if half[r[1]] == h]
        kept += random.Random(SPLIT_SEED).sample(mine, min(ROWS_PER_HALF, len(mine)))
    return [(i, half[g], g, term, text) for i, g, term, text in (rows[k] for k in sorted(kept))]


def main() -> None:
    build_and_write(__doc__, OUT, build)


if __name__ == "__main__":
    main()
