"""Build examples/gold/bible-docs.tsv, the documents of the "Long documents" general check (mirror/checks.py): real
passages of 150-256 tokens with a structure between DIFFERENT documents, from the World English Bible (public
domain; see examples/gold/BIBLE_LICENSE.txt).

Each document is the opening of one chapter: its verses from the start, cut after the first whole sentence that
brings it to MIN_TOKENS and never past MAX_TOKENS (word pieces of the bundled model, no special tokens; footnotes,
headings and markup removed, the words unchanged). Each book gives a window of up to WINDOW consecutive chapters (a
seeded start), so a document has neighbours (the chapters just before and after it), other chapters of its book (its
source), and other books of its kind (its group: the Law, History, Wisdom and poetry, the Prophets, the Gospels and
Acts, Paul's letters, the other letters). The check ranks every other document by cosine and scores the order with
graded relevance: neighbour > same book > same kind of book > the rest.

Source: Debian's `sword-text-web` package (the SWORD module engWEB2015eb, zText, OSIS markup). Nothing is fetched at
run time; to rebuild the shipped file:

    apt-get download sword-text-web && dpkg -x sword-text-web_*.deb /tmp/web
    .venv/bin/python scripts/make_bible_docs.py /tmp/web/usr/share/sword/modules/texts/ztext/engWEB2015eb \
        examples/gold/bible-docs.tsv

Deterministic: the same package gives the same file.
"""

from __future__ import annotations

import random
import re
import struct
import sys
import zlib
from pathlib import Path

MIN_TOKENS, MAX_TOKENS, WINDOW, SEED = 150, 256, 8, 1
KINDS = {
    "Law": "Gen Exod Lev Num Deut",
    "History": "Josh Judg Ruth 1Sam 2Sam 1Kgs 2Kgs 1Chr 2Chr Ezra Neh Esth Tob Jdt 1Macc 2Macc",
    "Wisdom and poetry": "Job Ps Prov Eccl Song Wis Sir",
    "Major prophets": "Isa Jer Lam Ezek Dan Bar",
    "Minor prophets": "Hos Joel Amos Obad Jonah Mic Nah Hab Zeph Hag Zech Mal",
    "Gospels and Acts": "Matt Mark Luke John Acts",
    "Letters of Paul": "Rom 1Cor 2Cor Gal Eph Phil Col 1Thess 2Thess 1Tim 2Tim Titus Phlm Heb",
    "Other letters and Revelation": "Jas 1Pet 2Pet 1John 2John 3John Jude Rev",
}
KIND_OF = {book: kind for kind, books in KINDS.items() for book in books.split()}
_SENTENCE_END = re.compile(r"(?<=[.!?”’])\s+")


def books(module: Path) -> list[tuple[str, list[tuple[int, str]]]]:
    """(OSIS book id, its (chapter number, plain text) in order) in canonical order, from a zText module. A book may
    span two compressed blocks, so the blocks are joined first and split at the chapter markers (`osisID="Rom.3"`)."""
    chapters: dict[str, list[tuple[int, str]]] = {}
    for testament in ("ot", "nt"):
        index = (module / f"{testament}.bzs").read_bytes()
        data = (module / f"{testament}.bzz").read_bytes()
        text = ""
        for i in range(len(index) // 12):
            offset, size, _ = struct.unpack("<III", index[12 * i : 12 * i + 12])
            text += zlib.decompress(data[offset : offset + size]).decode("utf-8")
        parts = re.split(r'<chapter[^>]*osisID="([^".]+)\.(\d+)"[^>]*sID="[^"]+"[^>]*/>', text)
        for book, number, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
            body = re.split(r'<div[^>]*type="(?:book|bookGroup|front|introduction)"', body)[0]  # the next book's header
            chapters.setdefault(book, []).append((int(number), plain(body)))
    return [(book, sorted(found)) for book, found in chapters.items()]


def plain(osis: str) -> str:
    """The words of an OSIS chapter: footnotes and headings dropped, tags removed, spaces normalised."""
    osis = re.sub(r"<note.*?</note>", " ", osis, flags=re.S)  # a note sits between two words
    osis = re.sub(r"<title.*?</title>", " ", osis, flags=re.S)
    text = " ".join(re.sub(r"<[^>]+>", "", osis).split())  # a tag inside a word (<w>) must not split it
    return re.sub(r"(?<=[a-z][.!?])(?=[A-Z])", " ", text)  # verses that end a line of poetry ("Selah.But")


def opening(text: str, count_tokens) -> str | None:
    """The chapter from its start, cut after the first whole sentence reaching MIN_TOKENS, within MAX_TOKENS."""
    kept: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        if count_tokens(" ".join([*kept, sentence])) > MAX_TOKENS:
            return None
        kept.append(sentence)
        if count_tokens(" ".join(kept)) >= MIN_TOKENS:
            return " ".join(kept)
    return None


def main(module_dir: str, dst: str) -> int:
    from transformers import AutoTokenizer

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from mirror.encoder import bundled_model_path

    tokenizer = AutoTokenizer.from_pretrained(str(bundled_model_path()))

    def count_tokens(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    rng, rows = random.Random(SEED), []
    for book, chapters in books(Path(module_dir)):
        if book not in KIND_OF:
            continue
        docs = [(n, opening(text, count_tokens)) for n, text in chapters]
        docs = [(n, text) for n, text in docs if text]
        start = rng.randint(0, max(0, len(docs) - WINDOW))
        window = docs[start : start + WINDOW]
        # a window of consecutive chapters only: a chapter left out (too short, too long) would make false neighbours
        runs = [window[:1]]
        for doc in window[1:]:
            if doc[0] == runs[-1][-1][0] + 1:
                runs[-1].append(doc)
            else:
                runs.append([doc])
        longest = max(runs, key=len)
        if len(longest) >= 2:
            rows += [(f"{book}.{n}", KIND_OF[book], book, text) for n, text in longest]
    lines = [
        "# bible-docs: id<TAB>kind of book<TAB>book<TAB>text (scripts/make_bible_docs.py; World English Bible, PD)"
    ]
    lines += ["\t".join(row) for row in rows]
    Path(dst).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(rows)} documents from {len({r[2] for r in rows})} books in {len(KINDS)} kinds to {dst}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
