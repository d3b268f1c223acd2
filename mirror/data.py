"""Input readers (.txt, .csv/.tsv, .jsonl) and cleaning: strip, drop empties, de-duplicate (case-insensitively).
A file is read (`read_file`, `read_texts`: its type and size checked), decoded (mirror.decoding) and parsed
(mirror.tables); this module cleans what they give.

Where reading takes a guess (an encoding without a byte-order mark, a table without a header row) it says so in
a note: the readers append to a `notes` list the caller passes, and `clean_texts` carries them into CleanStats.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirror.decoding import BINARY_MAGIC, SNIFF_CHARS, decode
from mirror.errors import MirrorError
from mirror.tables import (
    AUTO,
    SAMPLE_ROWS,
    SUFFIXES,
    TEXT_COLUMN_HINTS,
    TEXT_COLUMN_NAMES,
    FileStrings,
    column_choices,
    has_header,
    is_number,
    parse_strings,
    parse_text,
    read_pairs_jsonl,
    read_pairs_table,
    table_columns,
)

# the readers' pieces (mirror.decoding: bytes to text; mirror.tables: text to strings), importable from here as before
__all__ = [
    "AUTO",
    "BINARY_MAGIC",
    "BLANK_LETTERS",
    "CONTROL",
    "INVISIBLE_CATEGORIES",
    "SAMPLE_ROWS",
    "SNIFF_CHARS",
    "SUFFIXES",
    "SURROGATE",
    "TEXT_COLUMN_HINTS",
    "TEXT_COLUMN_NAMES",
    "CleanStats",
    "FileStrings",
    "clean_texts",
    "column_choices",
    "decode",
    "fmt_size",
    "has_header",
    "is_invisible",
    "is_number",
    "parse_text",
    "read_file",
    "read_texts",
    "table_columns",
]

# C0/C1 control characters other than tab and newlines, and stray byte-order marks (U+FEFF): replaced
# by spaces when cleaning. Lone UTF-16 surrogates (a JSON "\\ud800" escape from an API client) cannot be
# encoded or tokenized: they become U+FFFD.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufeff]")
SURROGATE = re.compile(r"[\ud800-\udfff]")
# what str.splitlines splits at ("\r\n" first: one break)
LINE_BREAK = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
# Letters that render as nothing (Hangul fillers, the blank Braille pattern): with format (Cf: zero-width space,
# bidi overrides), combining (Mn/Me) and separator characters, a string made only of these shows as blank.
BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
INVISIBLE_CATEGORIES = frozenset(("Cc", "Cf", "Mn", "Me", "Zs", "Zl", "Zp"))


@dataclass(frozen=True)
class CleanStats:
    """What reading and cleaning did to the input, for the UI and CLI summaries."""

    lines: int
    empty: int
    duplicates: int  # exact copies of an earlier string
    kept: int
    notes: tuple[str, ...] = ()  # guesses made while reading (an encoding, a header row)
    case_duplicates: int = 0  # equal to an earlier string but for case ("Whisk" after "whisk"): merged into it

    def summary(self) -> str:
        counts = (
            f"{self.kept} strings ({self.lines} lines, {self.empty} empty dropped, {self.duplicates} duplicates removed"
        )
        # only when there are some: the line stays as it was for the inputs most people load
        counts += f", {self.case_duplicates} case variants merged)" if self.case_duplicates else ")"
        return "; ".join([counts, *self.notes])


def clean_texts(
    texts: Iterable[str], notes: Iterable[str] = (), limit: int | None = None
) -> tuple[list[str], CleanStats]:
    """Strip, drop empty lines and de-duplicate keeping first occurrence order; strings that differ only in case
    are merged into the first spelling; `notes` (from reading) are kept in the stats.

    Duplicates matter for the loss: two copies of a string in one batch are each other's
    false negatives, and so are "Apple" and "apple" (and they take two hit slots in a search).

    `limit`: keep at most this many strings; the ones after it are still counted in the stats (the note "kept the
    first N of M") by their hashes, not kept as strings (a 19 MB paste of 240k lines cost ~80 MB of sets and lists
    here for the 20,000 strings a server keeps: issue 58). Past `HASHES_KEPT` distinct strings after the limit the
    rest is not read, and a note says so.
    """
    seen: set[str] = set()
    folded: set[str] = set()
    out: list[str] = []
    lines = empty = dups = case_dups = 0
    rest = _Hashes() if limit is not None else None  # strings after the limit: hashes of each and of its case fold
    notes = list(notes)
    for raw in texts:
        text = " ".join(CONTROL.sub(" ", SURROGATE.sub("\ufffd", str(raw))).split())  # no control chars, one space
        if rest is not None and len(out) >= limit and text and text not in seen and not is_invisible(text):
            fold = text.casefold()
            lines += 1
            if not rest.add(hash(text), None if fold in folded else hash(fold)):
                notes.append(f"counted the first {lines:,} lines; the rest was not read")
                break
            continue
        lines += 1
        if not text or is_invisible(text):
            empty += 1
        elif text in seen:
            dups += 1
        elif text.casefold() in folded:
            seen.add(text)  # a later copy of this spelling counts as an exact duplicate
            case_dups += 1
        else:
            seen.add(text)
            folded.add(text.casefold())
            out.append(text)
    distinct = len(out)
    if rest is not None and rest.n:
        exact, folds = rest.distinct()
        # every string after the limit: an exact copy of an earlier one after it (dups), or a new spelling of a
        # string seen before (case_dups), or a new string
        dups += rest.n - exact
        case_dups += exact - folds
        distinct += folds
    stats = CleanStats(lines, empty, dups, distinct, tuple(notes), case_duplicates=case_dups)
    return out, stats


HASHES_KEPT = 2**19  # distinct strings counted past clean_texts' limit: 8 MB of hashes at most


class _Hashes:
    """The hashes of strings past clean_texts' limit (each string's, and its case fold's when that fold is new),
    in arrays made unique now and then: 16 bytes per distinct string, not a Python string and two set entries."""

    def __init__(self) -> None:
        from array import array

        self.n = 0
        self.added = {"exact": array("q"), "folds": array("q")}  # since the last compaction
        self.unique: dict[str, Any] = {}  # sorted unique so far (numpy arrays)

    def add(self, exact: int, fold: int | None) -> bool:
        """Count one string; False once more than HASHES_KEPT distinct strings are counted: count no more."""
        self.added["exact"].append(exact)
        if fold is not None:
            self.added["folds"].append(fold)
        self.n += 1
        if len(self.added["exact"]) >= HASHES_KEPT:
            return self.distinct()[0] < HASHES_KEPT
        return True

    def distinct(self) -> tuple[int, int]:
        """How many distinct strings, and distinct new case folds, were counted."""
        import numpy as np

        for name, added in self.added.items():
            new = np.unique(np.frombuffer(added, dtype=np.int64)) if len(added) else np.empty(0, dtype=np.int64)
            old = self.unique.get(name)
            self.unique[name] = new if old is None else np.union1d(old, new)
            del new
            del added[:]  # its buffer given back
        return len(self.unique["exact"]), len(self.unique["folds"])


def utf8_size(text: str, block: int = 2**20) -> int:
    """len(text.encode("utf-8", "surrogatepass")) without the copy: a block at a time, none for ASCII."""
    if text.isascii():
        return len(text)
    return sum(len(text[i : i + block].encode("utf-8", "surrogatepass")) for i in range(0, len(text), block))


def iter_lines(text: str, block: int = 2**20) -> Iterator[str]:
    """`text.splitlines()`, one line at a time: a block of about `block` characters split at once, so a 20 MB paste
    is never a list of 240,000 strings (issue 58)."""
    start, size = 0, len(text)
    while start < size:
        end = size
        if start + block < size:
            found = LINE_BREAK.search(text, start + block)
            end = found.end() if found else size
        yield from text[start:end].splitlines()
        start = end


def is_invisible(text: str) -> bool:
    """True when nothing of `text` would show: only format, combining, separator or blank-looking characters
    (U+200B, U+202E, U+FEFF, ...). Such a string is dropped as empty; inside a visible string they are kept (a
    zero-width joiner is part of an emoji)."""
    return all(ch in BLANK_LETTERS or unicodedata.category(ch) in INVISIBLE_CATEGORIES for ch in text)


def fmt_size(n_bytes: float, limit: bool = False) -> str:
    """A size for messages: "20.1 MiB" (bytes, KiB, MiB or GiB, one decimal).

    A size is rounded up and a `limit` down, so a file over a limit never reads as the limit
    (20.05 MiB against 20 MiB: "20.1 MiB is over the limit of 20.0 MiB").
    """
    rounding = math.floor if limit else math.ceil
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= size:
            return f"{rounding(round(n_bytes / size * 10, 6)) / 10:.1f} {unit}"
    return f"{rounding(n_bytes)} bytes"


# ---------------------------------------------------------------- files to strings


def read_file(
    path: str | Path,
    column: str | None = None,
    max_bytes: float | None = None,
    name: str | None = None,
    notes: list[str] | None = None,
    pair_column: str | None = None,
) -> FileStrings:
    """Raw strings of an uploaded .txt/.csv/.tsv/.jsonl file, its column choices and the column read.

    `pair_column`: a column whose text is each row's partner (mirror.pairs), AUTO to detect one (another text column
    of the table, if it has one that fits), None or "" for none. Every message names the file by `name` (default:
    its base name), never by its path on the server. A MirrorError from parsing carries the choices as `.columns`,
    so the user can pick another column.
    """
    path = Path(path)
    shown = name or path.name or "upload"
    kind = path.suffix.lower()
    text = decode(_read_bytes(path, shown, shown, max_bytes), shown, notes)
    columns = column_choices(text, kind)
    try:
        if kind == ".txt" and pair_column and pair_column != AUTO:
            raise MirrorError(f"{shown}: a partner column applies to .csv/.tsv/.jsonl files, not .txt")
        if kind in (".csv", ".tsv") and pair_column:
            return read_pairs_table(text, kind, shown, column or None, pair_column, notes, columns)
        if kind == ".jsonl" and pair_column:
            return read_pairs_jsonl(text, shown, column or None, pair_column, columns)
        strings, used = parse_strings(text, kind, shown, column or None, notes)
    except MirrorError as exc:
        exc.columns = columns  # type: ignore[attr-defined]
        raise
    return FileStrings(strings, columns, used)


def read_texts(
    path: str | Path, column: str | None = None, max_bytes: float | None = None, notes: list[str] | None = None
) -> list[str]:
    """Read raw strings from a .txt (one per line), .csv/.tsv (a named or detected column) or .jsonl file.

    `max_bytes` refuses a larger file before reading it (the CLIs' `--max-mb`). A missing or unreadable file is
    named by the path given (the CLIs run on the user's own machine); the content by the file's name.
    """
    path = Path(path)
    data = _read_bytes(path, path.name, str(path), max_bytes)
    return parse_text(decode(data, path.name, notes), path.suffix.lower(), path.name, column, notes)


def _read_bytes(path: Path, name: str, where: str, max_bytes: float | None) -> bytes:
    """The bytes of a supported file, or a MirrorError naming it `name` (its type, size) or `where` (the file)."""
    kind = path.suffix.lower()
    if kind not in SUFFIXES:
        raise MirrorError(f"{name}: unsupported file type {kind or '(none)'!r}; use one of {', '.join(SUFFIXES)}")
    try:
        if path.is_dir():
            raise MirrorError(f"{where}: is a folder; give a file")
        if not path.is_file():
            raise MirrorError(f"{where}: no such file")
        size = path.stat().st_size
        if max_bytes is not None and size > max_bytes:
            raise MirrorError(f"{name}: {fmt_size(size)} is over the limit of {fmt_size(max_bytes, limit=True)}")
        return path.read_bytes()
    except OSError as exc:  # the reason only: str(exc) would repeat the full path
        raise MirrorError(f"{where}: cannot read it ({exc.strerror or type(exc).__name__})") from None
