"""Decoded text to strings: one per line (.txt), a column of a table (.csv/.tsv: named, or the text column detected,
its header row detected and said so), a field of JSON lines (.jsonl); with a partner column, each row's partner
(pairs: named, or the table's other text column detected). Broken tables (an unclosed quote, ragged rows, a header
alone) are refused naming the line.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from mirror.decoding import note
from mirror.errors import MirrorError

SUFFIXES = (".txt", ".csv", ".tsv", ".jsonl")
TEXT_COLUMN_HINTS = ("text", "sentence", "string", "word", "term", "name", "query", "phrase")
SAMPLE_ROWS = 200  # column guesses look at this many rows


@dataclass(frozen=True)
class FileStrings:
    """What an uploaded file holds: its raw strings, the columns a user may pick, and the column they were read from;
    with a partner column (`read_file(..., pair_column=...)`), each row's partner text too."""

    strings: list[str]
    columns: list[str]  # a table's header, a .jsonl file's string fields; [] for .txt
    column: str | None = None  # the column read (named, or detected: a note says why when there was a choice)
    partners: list[str] | None = None  # row for row with `strings` ("" where a row has none)
    pair_column: str | None = None  # the partner column read (named, or detected: `pair_note` says why)
    pair_note: str | None = None  # what the detection saw ("two text columns: name (1.0 words a row) and ...")


AUTO = "auto"  # read_file's pair_column: detect a partner column (the other text column of a table), if any


def parse_text(text: str, kind: str, name: str, column: str | None = None, notes: list[str] | None = None) -> list[str]:
    """Parse decoded content of a given kind ('.txt', '.csv', '.tsv', '.jsonl') into raw strings."""
    return parse_strings(text, kind, name, column, notes)[0]


def parse_strings(
    text: str, kind: str, name: str, column: str | None, notes: list[str] | None
) -> tuple[list[str], str | None]:
    """parse_text's strings and the column they came from (None for .txt)."""
    if kind == ".txt":
        if column:
            raise MirrorError(f"{name}: a text column (--column) applies to .csv/.tsv/.jsonl files, not .txt")
        return text.splitlines(), None
    if kind in (".csv", ".tsv"):
        return _parse_table(text, "\t" if kind == ".tsv" else ",", name, column, notes)
    if kind == ".jsonl":
        return _parse_jsonl(text, name, column or "text"), column or "text"
    raise MirrorError(f"{name}: unsupported file type {kind!r}; use one of {', '.join(SUFFIXES)}")


def column_choices(text: str, kind: str) -> list[str]:
    """What a user may pick as the text column: a table's header, the string fields of a .jsonl file's first
    object, [] for .txt (for the app's column picker)."""
    if kind in (".csv", ".tsv"):
        return table_columns(text, kind)
    if kind == ".jsonl":
        return _jsonl_fields(text)
    return []


def table_columns(text: str, kind: str) -> list[str]:
    """The first row of a CSV/TSV: its column names, or (a table without a header) its first cells."""
    reader = csv.reader(io.StringIO(text), delimiter="\t" if kind == ".tsv" else ",")
    try:
        return [h.strip() for h in next(reader, [])]
    except csv.Error:  # the parse reports it, with the line
        return []


def _jsonl_fields(text: str) -> list[str]:
    for line in text.splitlines():
        if line.strip():
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):  # the parse names the line and the problem
                return []
            return [k for k, v in record.items() if isinstance(v, str)] if isinstance(record, dict) else []
    return []


# ---------------------------------------------------------------- tables


def _read_rows(text: str, delimiter: str, name: str) -> list[list[str]]:
    """The rows of a table. A quote opened and never closed (it would swallow every line after it into one cell) is
    a MirrorError naming the line it opened on; so is a field over csv's 131,072-character limit."""
    reader = csv.reader(io.StringIO(text), delimiter=delimiter, strict=True)
    kind = "TSV" if delimiter == "\t" else "CSV"
    rows: list[list[str]] = []
    started = 1  # the line the row being read starts on
    try:
        for row in reader:
            rows.append(row)
            started = reader.line_num + 1
    except csv.Error as exc:
        if "unexpected end of data" in str(exc) or "EOF" in str(exc):
            raise MirrorError(
                f'{name}: line {started} opens a quote (") that is never closed, so every line after it would be one '
                f'string; close it, or quote the whole field ("like, this") and double quotes inside it ("")'
            ) from None
        raise MirrorError(f"{name}: not a readable {kind} file (line {reader.line_num}: {exc})") from None
    return rows


def _table(text: str, delimiter: str, name: str, column: str | None, notes: list[str] | None):
    """(header, body rows, the line of each body row) of a table; MirrorError for an empty or header-only one."""
    rows = _read_rows(text, delimiter, name)
    lines = _row_lines(text, delimiter, len(rows))
    if not rows:
        raise MirrorError(f"{name}: the file is empty")
    first = [cell.strip() for cell in rows[0]]
    if has_header(rows, column):
        header, body, body_lines = first, rows[1:], lines[1:]
        if not any(any(cell.strip() for cell in row) for row in body):
            # rows of empty cells (",,") are not "no rows": said as they are (a newcomer's 50 rows of empty cells)
            rows = sum(bool(row) for row in body)  # a blank line is no row; ",," is a row of empty cells
            under = (
                f"{rows:,} row{'s' if rows != 1 else ''} under it, every cell empty"
                if rows
                else "no rows of data under it"
            )
            raise MirrorError(f"{name}: has a header row ({', '.join(header)[:80]}) and {under}")
    else:
        width = max(len(row) for row in rows[: SAMPLE_ROWS + 1])
        header, body, body_lines = [f"column {i + 1}" for i in range(width)], rows, lines
        shown = repr(rows[0][0][:40]) if len(first) == 1 else "row 1"
        note(
            notes,
            f"{name}: no header row found, so {shown} is read as data; if it is a header, name the text column to skip it",
        )
    return header, body, body_lines


def _row_lines(text: str, delimiter: str, n: int) -> list[int]:
    """The line each row of a table starts on (a quoted field may span lines)."""
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    out, started = [], 1
    for _ in reader:
        out.append(started)
        started = reader.line_num + 1
        if len(out) >= n:
            break
    return out


def _check_ragged(
    header: Sequence[str], body: Sequence[Sequence[str]], lines: Sequence[int], name: str, used: Sequence[int]
) -> None:
    """A row with more cells than the header (a comma inside a string that is not quoted) or without a cell of a
    column read is a MirrorError naming its line: its strings would be cut or shifted silently."""
    width = len(header)
    for row, line in zip(body, lines, strict=False):
        if not any(cell.strip() for cell in row):
            continue  # a blank line
        if len(row) > width and width > 1:
            raise MirrorError(
                f"{name}: line {line} has {len(row)} cells, the header {width} ({', '.join(header)[:60]}): a string with "
                'the separator in it must be quoted ("like, this")'
            )
        missing = [header[i] for i in used if i >= len(row)]
        if missing:
            raise MirrorError(
                f"{name}: line {line} has {len(row)} cell{'s' if len(row) != 1 else ''}, with no {missing[0]!r} "
                f"(the header has {width}); every row needs one"
            )


def _parse_table(
    text: str, delimiter: str, name: str, column: str | None, notes: list[str] | None
) -> tuple[list[str], str]:
    header, body, lines = _table(text, delimiter, name, column, notes)
    idx = _column_index(header, body, name, column, notes)
    _check_ragged(header, body, lines, name, [idx])
    return [row[idx] if idx < len(row) else "" for row in body], header[idx]


def _column_index(
    header: Sequence[str], body: Sequence[Sequence[str]], name: str, column: str | None, notes: list[str] | None
) -> int:
    """The strings' column: the one named, or the detected one (a note says why when there was a choice)."""
    if column is not None:
        if column not in header:
            raise MirrorError(f"{name}: no column {column!r}; columns are {list(header)}")
        return list(header).index(column)
    idx, why = _pick_text_column(header, body, name)
    if why:
        note(notes, why)
    return idx


def read_pairs_table(
    text: str, kind: str, name: str, column: str | None, pair_column: str, notes: list[str] | None, columns: list[str]
) -> FileStrings:
    """A table's strings and each row's partner (the `pair_column`, or the detected one for AUTO)."""
    delimiter = "\t" if kind == ".tsv" else ","
    header, body, lines = _table(text, delimiter, name, column, notes)
    idx = _column_index(header, body, name, column, notes)
    note = None
    if pair_column == AUTO:
        pidx, note = _pick_partner_column(header, body, idx)
    else:
        if pair_column not in header:
            raise MirrorError(f"{name}: no column {pair_column!r} to pair with; columns are {header}")
        pidx = header.index(pair_column)
        if pidx == idx:
            raise MirrorError(f"{name}: {pair_column!r} is the strings' own column; pair it with another one")
    _check_ragged(header, body, lines, name, [idx] if pidx is None else [idx, pidx])
    strings = [row[idx] if idx < len(row) else "" for row in body]
    if pidx is None:
        return FileStrings(strings, columns, header[idx], pair_note=note)
    partners = [row[pidx] if pidx < len(row) else "" for row in body]
    _check_partners(strings, partners, name, header[idx], header[pidx])
    return FileStrings(strings, columns, header[idx], partners, header[pidx], note)


def _check_partners(strings: Sequence[str], partners: Sequence[str], name: str, column: str, pair_column: str) -> None:
    """MirrorError for a partner column no row can learn from: empty, or the strings again."""
    filled = [(s.strip(), p.strip()) for s, p in zip(strings, partners, strict=True) if p.strip() and s.strip()]
    if not filled:
        raise MirrorError(f"{name}: the column {pair_column!r} is empty: no row has a partner to pair with")
    if all(s.casefold() == p.casefold() for s, p in filled):
        raise MirrorError(
            f"{name}: the column {pair_column!r} repeats {column!r} row for row: no pair to learn from; pick a column "
            "with another text for each row (a definition, a description)"
        )


# A partner column may repeat its values (an acronym with several expansions, a category's name for each of its
# aliases, a code several names share): rows sharing one never share a batch (mirror.plan). But a label that on
# average more than this many rows share is a category of the strings (a kind, a section, a language), not each
# row's own partner; nor is a column one value fills in more than FILLER_SHARE of its rows ("n/a", "other").
PAIR_ROWS_PER_VALUE = 3
FILLER_SHARE, FILLER_LEAST = 0.05, 8  # a value filling more than 5% of the rows (and more than 8 of them) is a filler


def _pick_partner_column(header: Sequence[str], body: Sequence[Sequence[str]], idx: int) -> tuple[int | None, str]:
    """The partner column to propose for strings in column `idx`: of the other text columns (mostly non-numeric) that
    most rows fill with a text of their own (not the string again; its values distinct enough: `_repeats`), the one
    of the longest text. (None, why not) when there is none; the note names each column passed over and why."""
    sample = body[:SAMPLE_ROWS]

    def words(i: int) -> float:
        values = [row[i].strip() for row in sample if i < len(row) and row[i].strip()]
        return sum(len(v.split()) for v in values) / len(values) if values else 0.0

    fits: dict[int, float] = {}
    passed: list[str] = []  # each column passed over, and why
    for i in range(len(header)):
        if i == idx:
            continue
        cells = [(row[idx].strip() if idx < len(row) else "", row[i].strip() if i < len(row) else "") for row in sample]
        values = [p for _, p in cells if p]
        if len(values) < 0.5 * max(1, len(sample)):
            first = f"the first {len(sample):,} rows" if len(body) > len(sample) else f"{len(sample):,} rows"
            filled = f"mostly empty ({len(values):,} of {first} filled)" if values else f"empty in {first}"
            passed.append(f"{header[i]}: {filled}")
            continue
        if sum(not is_number(v) for v in values) < 0.8 * len(values):
            passed.append(f"{header[i]}: numbers (an id, a score), not a text")
            continue
        if sum(s.casefold() == p.casefold() for s, p in cells if p) > 0.5 * len(values):
            passed.append(f"{header[i]}: the {header[idx]} again")
            continue
        why = _repeats(header[i], body, i)
        if why:
            passed.append(why)
            continue
        fits[i] = words(i)
    over = f": {'; '.join(passed)}" if passed else ""
    if not fits:
        return None, f"no other text column to pair the strings with{over}"
    best = max(fits, key=lambda i: (round(fits[i], 1), -i))
    shared = _shared_note(header[best], body, best)
    return best, (
        f"two text columns: {header[idx]} ({words(idx):.1f} words a row) and {header[best]} ({fits[best]:.1f} words "
        f"a row): tuning pairs each {header[idx]} with its {header[best]}{shared}"
        + (f" (not paired with {'; '.join(passed)})" if passed else "")
    )


def _column_values(body: Sequence[Sequence[str]], i: int) -> list[str]:
    """Column `i`'s filled cells, all rows, case aside."""
    return [row[i].strip().casefold() for row in body if i < len(row) and row[i].strip()]


def _repeats(name: str, body: Sequence[Sequence[str]], i: int) -> str | None:
    """Why column `i` (named `name`) is a label many rows share rather than each row's partner, or None: over all its
    rows, more than PAIR_ROWS_PER_VALUE rows a distinct value on average (a category), or one value filling more than
    FILLER_SHARE of them (a filler)."""
    values = _column_values(body, i)
    counts = Counter(values)
    if len(counts) * PAIR_ROWS_PER_VALUE < len(values):
        return f"{name}: only {len(counts):,} distinct values for {len(values):,} rows: a category, not a pair"
    top, n = counts.most_common(1)[0]
    if n > max(FILLER_LEAST, FILLER_SHARE * len(values)):
        # named as the file writes it ('PR', not the case-folded 'pr' it is counted as)
        shown = next((row[i].strip() for row in body if i < len(row) and row[i].strip().casefold() == top), top)
        return f"{name}: {shown!r} fills {n:,} of its {len(values):,} rows: a filler, not a pair"
    return None


def _shared_note(name: str, body: Sequence[Sequence[str]], i: int) -> str:
    """What the note adds for a partner column whose values repeat: how many are distinct, and that rows sharing one
    never share a batch ("" when every value is its row's own)."""
    values = _column_values(body, i)
    distinct = len(set(values))
    if distinct == len(values):
        return ""
    return (
        f" ({distinct:,} distinct {name} values for {len(values):,} rows: rows sharing one are never in one batch, "
        "so none is another's false negative)"
    )


def read_pairs_jsonl(text: str, name: str, column: str | None, pair_column: str, columns: list[str]) -> FileStrings:
    """A .jsonl file's strings (field `column`, default "text") and each line's partner (field `pair_column`, or for
    AUTO the other string field of the first object, when it has exactly one more)."""
    field = column or "text"
    note = None
    if pair_column == AUTO:
        others = [c for c in columns if c != field]
        if len(others) != 1:
            return FileStrings(
                _parse_jsonl(text, name, field), columns, field, pair_note="no other text field to pair with"
            )
        pair_column = others[0]
        note = f"two text fields: {field} and {pair_column}: tuning pairs each {field} with its {pair_column}"
    if pair_column == field:
        raise MirrorError(f"{name}: {pair_column!r} is the strings' own field; pair it with another one")
    strings: list[str] = []
    partners: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        record = _json_line(line, lineno, name)
        if not isinstance(record, dict) or not isinstance(record.get(field), str):
            raise MirrorError(f'{name}: line {lineno} has no string field {field!r} (expected {{"{field}": "..."}})')
        value = record.get(pair_column)
        strings.append(record[field])
        partners.append(value if isinstance(value, str) else "")
    _check_partners(strings, partners, name, field, pair_column)
    return FileStrings(strings, columns, field, partners, pair_column, note)


def has_header(rows: Sequence[Sequence[str]], column: str | None = None) -> bool:
    """Whether the first row of a table names its columns (csv.Sniffer's idea, on parsed rows).

    Yes when a column is asked for by name (the user says so) or a first-row cell is a usual text-column
    name ("text", "sentence", ...). Then the numeric columns vote: a number over numbers is data (`1,hello`
    above `2,bye`), a word over numbers is a name (`id` above `1`). Without votes, a single column is a plain
    list whose first line is a string like the rest, and several text columns have a header, as spreadsheets
    export them. A table read without a header says so in a note; naming a column reads row 1 as its header.
    """
    first = [cell.strip() for cell in rows[0]]
    if column is not None or any(cell.lower() in TEXT_COLUMN_HINTS for cell in first):
        return True
    votes = 0
    for idx, cell in enumerate(first):
        values = [row[idx].strip() for row in rows[1 : SAMPLE_ROWS + 1] if idx < len(row) and row[idx].strip()]
        if cell and values and sum(map(is_number, values)) > 0.5 * len(values):
            votes += -1 if is_number(cell) else 1
    return votes > 0 if votes else len(first) > 1


# A column with one of these names is the text, whatever the others hold: the file says so.
TEXT_COLUMN_NAMES = ("text", "sentence", "sentences", "string", "strings")


def _pick_text_column(header: Sequence[str], body: Sequence[Sequence[str]], name: str) -> tuple[int, str | None]:
    """The column to read when none is named, and why when there was a choice: the only column; a column named as text
    (TEXT_COLUMN_NAMES); else, of the mostly non-numeric columns, the one of the longest natural-language text (most
    words a row: a summary over a name or an identifier; on a tie, the first)."""
    if len(header) == 1:
        return 0, None
    lowered = [h.lower() for h in header]
    sample = body[:SAMPLE_ROWS]
    words: dict[int, float] = {}
    for idx in range(len(header)):
        values = [row[idx].strip() for row in sample if idx < len(row) and row[idx].strip()]
        if values and sum(not is_number(v) for v in values) / len(values) > 0.5:
            words[idx] = sum(len(v.split()) for v in values) / len(values)
    if not words:
        raise MirrorError(f"{name}: no text column found among {list(header)}; name one with --column")
    named = [i for i in words if lowered[i] in TEXT_COLUMN_NAMES]
    if named:
        return named[0], None
    best = max(words, key=lambda i: (round(words[i], 1), -i))
    if all(round(words[i], 1) == round(words[best], 1) for i in words):  # the only text column, or the first of equals
        return best, None
    others = ", ".join(f"{header[i]!r} {words[i]:.1f}" for i in words if i != best)
    return best, (
        f"{name}: read the column {header[best]!r}, the longest text of its columns ({words[best]:.1f} words a row; "
        f"{others}); pick another column to read that one."
    )


def is_number(value: str) -> bool:
    """Whether `value` parses as a float (a score, an id column): the one test the readers use."""
    try:
        float(value)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------- JSON lines


def _json_line(line: str, lineno: int, name: str) -> object:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise MirrorError(f"{name}: line {lineno} is not valid JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # a 5,000-digit number, [[[[...]]]] nested past the stack
        raise MirrorError(f"{name}: line {lineno} is not usable JSON ({type(exc).__name__}: {exc})"[:300]) from None


def _parse_jsonl(text: str, name: str, field: str) -> list[str]:
    out: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        record = _json_line(line, lineno, name)
        if isinstance(record, str):
            out.append(record)
        elif isinstance(record, dict) and isinstance(record.get(field), str):
            out.append(record[field])
        else:
            raise MirrorError(f'{name}: line {lineno} has no string field {field!r} (expected {{"{field}": "..."}})')
    return out
