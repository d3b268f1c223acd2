"""Build examples/gold/jargon-docs.tsv, the documents of the "Short articles" general check (mirror/checks.py): the
entries of the Jargon File 4.4.7 (public domain; see examples/gold/JARGON_LICENSE.txt), plain modern English prose
about computing culture, with the cross-references between entries as the relation between DIFFERENT documents.

Each line is one entry (entries with the same text under several headwords are one entry):

    id<TAB>half<TAB>headword<TAB>links<TAB>text

- id: "j" and the entry's number in the File (its dictionary index order);
- half: "check" for the entries of 40-110 words (the length of short news articles; what the check scores after
  every run), "dev" for those of 110-450 words (what chose the defaults); shorter and longer entries are left out;
- links: the ids of every entry this one refers to ({term} in its text) or is referred from, space-separated,
  entries outside the file included, so that two entries linked through a third are known (the check's grade 1:
  2 one refers to the other, 1 two steps apart, 0 otherwise);
- text: the entry's text, cross-reference braces dropped, white space collapsed, the words unchanged.

Source: Debian's `dict-jargon` package (dictd files jargon.index and jargon.dict.dz), read in place. Nothing is
fetched at run time; to rebuild the shipped file:

    apt-get download dict-jargon
    .venv/bin/python scripts/make_jargon_docs.py dict-jargon_4.4.7-3.1_all.deb examples/gold/jargon-docs.tsv

Deterministic: the same package gives the same file. bench/bench_longdoc_sources.py reads the package with the
functions below.
"""

from __future__ import annotations

import gzip
import io
import re
import sys
import tarfile
from pathlib import Path

HALVES = {"check": (40, 110), "dev": (110, 450)}  # words, both ends included; an entry of 110 words is "check"
_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def deb_members(deb: Path, *suffixes: str) -> list[bytes]:
    """Files of a Debian package (an ar archive holding data.tar.*), one per suffix, read in place in one pass."""
    raw, at = Path(deb).read_bytes(), 8
    while at < len(raw):
        name, size = raw[at : at + 16].decode().strip().rstrip("/"), int(raw[at + 48 : at + 58])
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(raw[at + 60 : at + 60 + size])) as tar:
                members = tar.getmembers()
                return [tar.extractfile(next(m for m in members if m.name.endswith(x))).read() for x in suffixes]
        at += 60 + size + size % 2
    raise SystemExit(f"{deb}: no data.tar member")


def _number(s: str) -> int:
    """A dictd index's base-64 number."""
    value = 0
    for c in s:
        value = value * 64 + _DIGITS.index(c)
    return value


def jargon_entries(deb: Path) -> list[dict]:
    """The Jargon File's entries in index order: headwords (lower case), plain text (cross-reference braces dropped)
    and the headwords it refers to. Entries with the same text under several headwords are one entry."""
    packed, index = deb_members(deb, "jargon.dict.dz", "jargon.index")
    data = gzip.decompress(packed)
    bodies: dict[str, list[str]] = {}
    for line in index.decode().splitlines():
        head, offset, length = line.split("\t")[:3]
        if not head.startswith("00-database"):
            body = data[_number(offset) : _number(offset) + _number(length)].decode("utf-8", "replace")
            bodies.setdefault(body, []).append(head.lower())
    entries = []
    for body, heads in bodies.items():
        _, sep, text = body.partition("\n\n")
        if sep:
            refs = {m.lower() for m in re.findall(r"\{([^}]+)\}", text)}
            entries.append({"heads": heads, "text": " ".join(re.sub(r"[{}]", "", text).split()), "refs": refs})
    return entries


def jargon_links(entries: list[dict]) -> list[set[int]]:
    """Per entry, the entries it refers to or is referred from (a reference resolves to the entry with that
    headword, or with it less a plural s; unresolved references are dropped)."""
    at = {h: i for i, e in enumerate(entries) for h in e["heads"]}
    links: list[set[int]] = [set() for _ in entries]
    for i, e in enumerate(entries):
        for ref in e["refs"]:
            j = at.get(ref, at.get(ref.rstrip("s")))
            if j is not None and j != i:
                links[i].add(j)
                links[j].add(i)
    return links


def half_of(text: str) -> str | None:
    words = len(text.split())
    return next((half for half, (low, high) in HALVES.items() if low <= words <= high), None)


def main(src: str, dst: str) -> int:
    entries = jargon_entries(Path(src))
    links = jargon_links(entries)
    rows = []
    for i, e in enumerate(entries):
        half = half_of(e["text"])
        if half:
            linked = " ".join(f"j{j}" for j in sorted(links[i]))
            rows.append((f"j{i}", half, e["heads"][0], linked or "-", e["text"]))
    lines = [
        "# jargon-docs: id<TAB>half<TAB>headword<TAB>links (ids, '-' for none)<TAB>text "
        "(scripts/make_jargon_docs.py; the Jargon File 4.4.7, public domain)"
    ]
    lines += ["\t".join(row) for row in rows]
    Path(dst).write_text("\n".join(lines) + "\n", encoding="utf-8")
    count = {h: sum(r[1] == h for r in rows) for h in HALVES}
    print(f"wrote {len(rows)} of the File's {len(entries)} entries to {dst}: {count}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
