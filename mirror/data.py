"""Input readers (.txt, .csv/.tsv, .jsonl) and cleaning: strip, drop empties, de-duplicate."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mirror.errors import MirrorError

SUFFIXES = (".txt", ".csv", ".tsv", ".jsonl")
TEXT_COLUMN_HINTS = ("text", "sentence", "string", "word", "term", "name", "query", "phrase")
# C0/C1 control characters other than tab and newlines, and stray byte-order marks (U+FEFF): replaced
# by spaces when cleaning. Lone UTF-16 surrogates (a JSON "\\ud800" escape from an API client) cannot be
# encoded or tokenized: they become U+FFFD.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufeff]")
SURROGATE = re.compile(r"[\ud800-\udfff]")
BINARY_MAGIC = {
    b"\x89PNG": "a PNG image",
    b"\xff\xd8\xff": "a JPEG image",
    b"GIF8": "a GIF image",
    b"%PDF": "a PDF",
    b"PK\x03\x04": "a zip archive (or .docx/.xlsx)",
    b"\x7fELF": "a program",
}


@dataclass(frozen=True)
class CleanStats:
    """What cleaning did to the input, for the UI and CLI summaries."""

    lines: int
    empty: int
    duplicates: int
    kept: int

    def summary(self) -> str:
        return f"{self.kept} strings ({self.lines} lines, {self.empty} empty dropped, {self.duplicates} duplicates removed)"


def clean_texts(texts: Iterable[str]) -> tuple[list[str], CleanStats]:
    """Strip, drop empty lines and de-duplicate keeping first occurrence order.

    Duplicates matter for the loss: two copies of a string in one batch are each other's
    false negatives.
    """
    seen: set[str] = set()
    out: list[str] = []
    lines = empty = dups = 0
    for raw in texts:
        lines += 1
        text = " ".join(CONTROL.sub(" ", SURROGATE.sub("\ufffd", str(raw))).split())  # no control chars, one space
        if not text:
            empty += 1
        elif text in seen:
            dups += 1
        else:
            seen.add(text)
            out.append(text)
    return out, CleanStats(lines=lines, empty=empty, duplicates=dups, kept=len(out))


def decode(data: bytes, name: str) -> str:
    """UTF-8 (BOM or not), UTF-16/UTF-32 with a BOM, or BOM-less UTF-16 of mostly ASCII text (unmistakable:
    every other byte is NUL); anything else is a clear error naming the file."""
    for boms, codec in (((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff"), "utf-32"), ((b"\xff\xfe", b"\xfe\xff"), "utf-16")):
        if data.startswith(boms):
            try:
                return data.decode(codec)
            except UnicodeDecodeError as exc:
                if codec == "utf-32" and data.startswith(b"\xff\xfe"):
                    continue  # FF FE 00 00 may also be UTF-16 (LE) text starting with a NUL
                raise MirrorError(
                    f"{name}: starts with a {codec.upper()} byte-order mark but is not valid {codec.upper()} "
                    f"({exc.reason} at byte {exc.start}); re-save it as UTF-8"
                ) from None
    for magic, what in BINARY_MAGIC.items():
        if data.startswith(magic):
            raise MirrorError(f"{name}: is {what}, not a text file; upload UTF-8 text")
    head = data[:65536]
    if head and head.count(b"\x00") > 0.01 * len(head):
        codec = _bomless_utf16(head)
        if codec is None:
            raise MirrorError(f"{name}: looks like a binary file (many NUL bytes), not text; upload UTF-8 text")
        try:
            return data.decode(codec)
        except UnicodeDecodeError:
            raise MirrorError(
                f"{name}: looks like UTF-16 without a byte-order mark but does not decode as {codec}; re-save it as UTF-8"
            ) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise MirrorError(
            f"{name}: is not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "re-save it as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
        ) from None


def _bomless_utf16(head: bytes) -> str | None:
    """'utf-16-le'/'utf-16-be' when NULs sit in (nearly) every odd/even byte and (almost) never in the other."""
    if len(head) < 4:
        return None
    even, odd = head[0::2], head[1::2]
    zeros_even, zeros_odd = even.count(0) / len(even), odd.count(0) / len(odd)
    if zeros_odd > 0.9 and zeros_even < 0.05:
        return "utf-16-le"
    if zeros_even > 0.9 and zeros_odd < 0.05:
        return "utf-16-be"
    return None


def parse_text(text: str, kind: str, name: str, column: str | None = None) -> list[str]:
    """Parse decoded content of a given kind ('.txt', '.csv', '.tsv', '.jsonl') into raw strings."""
    if kind == ".txt":
        if column:
            raise MirrorError(f"{name}: a text column (--column) applies to .csv/.tsv/.jsonl files, not .txt")
        return text.splitlines()
    if kind in (".csv", ".tsv"):
        return _parse_table(text, "\t" if kind == ".tsv" else ",", name, column)
    if kind == ".jsonl":
        return _parse_jsonl(text, name, column or "text")
    raise MirrorError(f"{name}: unsupported file type {kind!r}; use one of {', '.join(SUFFIXES)}")


def read_texts(path: str | Path, column: str | None = None, max_bytes: float | None = None) -> list[str]:
    """Read raw strings from a .txt (one per line), .csv/.tsv (a named or detected column) or .jsonl file.

    `max_bytes` refuses a larger file before reading it (the CLIs' `--max-mb`).
    """
    path = Path(path)
    name = path.name
    kind = path.suffix.lower()
    if kind not in SUFFIXES:
        raise MirrorError(f"{name}: unsupported file type {kind or '(none)'!r}; use one of {', '.join(SUFFIXES)}")
    if path.is_dir():
        raise MirrorError(f"{path}: is a folder; give a file")
    if not path.is_file():
        raise MirrorError(f"{path}: no such file")
    try:
        size = path.stat().st_size
        if max_bytes is not None and size > max_bytes:
            raise MirrorError(f"{name}: {_mb(size)} MB is over the limit of {_mb(max_bytes)} MB")
        data = path.read_bytes()
    except OSError as exc:
        raise MirrorError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    return parse_text(decode(data, name), kind, name, column)


def _mb(n_bytes: float) -> str:
    mb = n_bytes / 2**20
    return f"{mb:,.0f}" if mb >= 100 else f"{mb:.3g}"


def load_input(
    path: str | Path, column: str | None = None, max_mb: float | None = None, max_strings: int | None = None
) -> tuple[list[str], CleanStats]:
    """Read and clean an input file for the CLIs, refusing one over `max_mb` or `max_strings` (None: no limit)."""
    if max_mb is not None and not max_mb > 0:
        raise MirrorError(f"--max-mb must be > 0, got {max_mb}")
    if max_strings is not None and max_strings < 1:
        raise MirrorError(f"--max-strings must be >= 1, got {max_strings}")
    max_bytes = None if max_mb is None else max_mb * 2**20
    texts, stats = clean_texts(read_texts(path, column, max_bytes=max_bytes))
    if max_strings is not None and len(texts) > max_strings:
        raise MirrorError(f"{Path(path).name}: {len(texts):,} distinct strings is over the limit of {max_strings:,}")
    return texts, stats


def table_columns(text: str, kind: str) -> list[str]:
    """Header names of a CSV/TSV (for the app's column picker)."""
    reader = csv.reader(io.StringIO(text), delimiter="\t" if kind == ".tsv" else ",")
    try:
        return [h.strip() for h in next(reader, [])]
    except csv.Error:  # the parse reports it, with the line
        return []


def _read_rows(text: str, delimiter: str, name: str) -> list[list[str]]:
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    try:
        return list(reader)
    except csv.Error as exc:  # e.g. a field over csv's 131,072-character limit
        kind = "TSV" if delimiter == "\t" else "CSV"
        raise MirrorError(f"{name}: not a readable {kind} file (line {reader.line_num}: {exc})") from None


def _parse_table(text: str, delimiter: str, name: str, column: str | None) -> list[str]:
    rows = _read_rows(text, delimiter, name)
    if not rows:
        raise MirrorError(f"{name}: the file is empty")
    header = [h.strip() for h in rows[0]]
    body = rows[1:]
    if column is not None:
        if column not in header:
            raise MirrorError(f"{name}: no column {column!r}; columns are {header}")
        idx = header.index(column)
    else:
        idx = _pick_text_column(header, body, name)
    return [row[idx] if idx < len(row) else "" for row in body]


def _pick_text_column(header: Sequence[str], body: Sequence[Sequence[str]], name: str) -> int:
    """The only column, a column named like text, else the first column that is mostly non-numeric."""
    if len(header) == 1:
        return 0
    lowered = [h.lower() for h in header]
    for hint in TEXT_COLUMN_HINTS:
        if hint in lowered:
            return lowered.index(hint)
    sample = body[:200]
    for idx in range(len(header)):
        values = [row[idx].strip() for row in sample if idx < len(row) and row[idx].strip()]
        if values and sum(not is_number(v) for v in values) / len(values) > 0.5:
            return idx
    raise MirrorError(f"{name}: no text column found among {list(header)}; name one with --column")


def is_number(value: str) -> bool:
    """Whether `value` parses as a float (a score, an id column): the one test the readers use."""
    try:
        float(value)
    except ValueError:
        return False
    return True


def _parse_jsonl(text: str, name: str, field: str) -> list[str]:
    out: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise MirrorError(f"{name}: line {lineno} is not valid JSON ({exc.msg})") from None
        except (ValueError, RecursionError) as exc:  # a 5,000-digit number, [[[[...]]]] nested past the stack
            raise MirrorError(f"{name}: line {lineno} is not usable JSON ({type(exc).__name__}: {exc})"[:300]) from None
        if isinstance(record, str):
            out.append(record)
        elif isinstance(record, dict) and isinstance(record.get(field), str):
            out.append(record[field])
        else:
            raise MirrorError(f'{name}: line {lineno} has no string field {field!r} (expected {{"{field}": "..."}})')
    return out
