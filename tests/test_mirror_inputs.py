"""Reading input files: encodings without a byte-order mark, tables without a header row, sizes in messages,
and `read_file`, the one entry point for uploads (messages name the file, never its path on the server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror.cli import load_input
from mirror.data import FileStrings, clean_texts, decode, fmt_size, has_header, parse_text, read_file, read_texts
from mirror.errors import MirrorError

# ---------------------------------------------------------------- encodings


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
@pytest.mark.parametrize(
    "text",
    [
        "Привет мир\nкак дела\n",  # Cyrillic: a NUL only in spaces and line breaks
        "中文文本\n另一行\n",  # CJK: NULs only in the line breaks
        "Ελληνικά κείμενο",  # one line, no line break
        "cat\ndog\ncafé\n",  # mostly ASCII: every other byte is NUL
    ],
)
def test_utf16_without_a_bom_is_read_when_it_decodes_cleanly(text, codec):
    notes: list[str] = []
    assert decode(text.encode(codec), "u.txt", notes) == text
    assert notes == [f"u.txt: read as {codec.upper()} (it has no byte-order mark)"]


@pytest.mark.parametrize(
    "text,codec",
    [
        ("café\nthé\nnaïve\n", "latin-1"),
        ("“smart quotes” — and a dash; Größe\n", "cp1252"),
        ("Ærø, Åland, São Paulo, Zürich\n", "cp1252"),
    ],
)
def test_western_legacy_text_is_read_with_a_note(text, codec):
    notes: list[str] = []
    assert decode(text.encode(codec), "old.txt", notes) == text
    assert notes == [
        "old.txt: is not UTF-8; read as Windows-1252 (Western European): if accents look wrong, re-save it as UTF-8"
    ]


@pytest.mark.parametrize(
    "data,needle",
    [
        ("日本語\nテスト\n".encode("shift_jis"), "is not UTF-8 (byte 0x93 at offset 0)"),  # all accents as cp1252
        ("Привет мир\nкак дела\n".encode("cp1251"), "is not UTF-8 (byte 0xcf at offset 0)"),
        (bytes(range(128, 256)) * 8, "is not UTF-8"),  # no letters at all
        (b"caf\xe9" + bytes(range(1, 9)) * 20, "is not UTF-8"),  # control characters: not text
        (bytes(range(32)) * 64, "looks like a binary file"),
        (b"\x00\x01\x02\x00ab" * 300, "looks like a binary file"),
    ],
)
def test_what_is_not_clearly_text_is_still_refused(data, needle):
    notes: list[str] = []
    with pytest.raises(MirrorError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        decode(data, "x.txt", notes)
    assert notes == []


def test_utf8_needs_no_note():
    notes: list[str] = []
    assert decode("café\n".encode(), "x.txt", notes) == "café\n" and notes == []


def test_reading_notes_reach_the_cli_summary(tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes("café\nthé\nnaïve\n".encode("latin-1"))
    texts, stats = load_input(path)
    assert texts == ["café", "thé", "naïve"]
    assert stats.notes == (
        "latin.txt: is not UTF-8; read as Windows-1252 (Western European): if accents look wrong, re-save it as UTF-8",
    )
    assert stats.summary().startswith("3 strings (3 lines, 0 empty dropped, 0 duplicates removed); latin.txt: is not")
    assert clean_texts(["a"])[1].summary() == "1 strings (1 lines, 0 empty dropped, 0 duplicates removed)"


# ---------------------------------------------------------------- header rows


@pytest.mark.parametrize(
    "text,column,expected,noted",
    [
        ("cat\ndog\ncar\n", None, ["cat", "dog", "car"], True),  # a plain list: line 1 is a string too
        ("Animals\ncat\ndog\n", None, ["Animals", "cat", "dog"], True),
        ("Animals\ncat\ndog\n", "Animals", ["cat", "dog"], False),  # naming the column makes row 1 its header
        ("text\ncat\ndog\n", None, ["cat", "dog"], False),  # a usual text-column name
        ("1,hello\n2,bye\n", None, ["hello", "bye"], True),  # a number over numbers is data
        ("hello,1\nbye,2\n", None, ["hello", "bye"], True),
        ("id,body\n1,hello\n2,bye\n", None, ["hello", "bye"], False),  # a word over numbers is a name
        ("en,fr\ncat,chat\ndog,chien\n", None, ["cat", "dog"], False),  # several text columns: a header
    ],
)
def test_a_table_whose_first_row_is_data_keeps_it(text, column, expected, noted):
    notes: list[str] = []
    assert parse_text(text, ".csv", "t.csv", column, notes) == expected
    assert bool(notes) == noted
    if noted:
        assert notes[0].startswith("t.csv: no header row found, so ") and "is read as data" in notes[0]


def test_header_detection_on_tsv_and_the_no_text_column_error():
    assert parse_text("7\tred car\n8\tblue bus\n", ".tsv", "t.tsv") == ["red car", "blue bus"]
    with pytest.raises(MirrorError, match=r"no text column found among \['id', 'score'\]"):
        parse_text("id,score\n1,0.5\n2,0.7\n", ".csv", "n.csv")
    with pytest.raises(MirrorError, match=r"no text column found among \['column 1', 'column 2'\]"):
        parse_text("1,0.5\n2,0.7\n", ".csv", "n.csv")
    assert has_header([["id", "score"]]) and not has_header([["cat"]])


# ---------------------------------------------------------------- sizes


def test_fmt_size_rounds_a_size_up_and_a_limit_down():
    assert fmt_size(int(20.05 * 2**20)) == "20.1 MiB" and fmt_size(20 * 2**20, limit=True) == "20.0 MiB"
    assert fmt_size(20 * 2**20 + 1) == "20.1 MiB" and fmt_size(20 * 2**20) == "20.0 MiB"
    assert fmt_size(1.5 * 2**20) == "1.5 MiB" and fmt_size(5 * 2**30) == "5.0 GiB"
    assert fmt_size(2289) == "2.3 KiB" and fmt_size(0.001 * 2**20, limit=True) == "1.0 KiB"
    assert fmt_size(999) == "999 bytes" and fmt_size(0) == "0 bytes"


def test_a_file_just_over_the_limit_does_not_read_as_the_limit(tmp_path):
    path = tmp_path / "big.txt"
    with path.open("wb") as f:
        f.truncate(int(20.05 * 2**20))  # sparse: the size is refused before reading
    for read in (lambda: read_file(path, max_bytes=20 * 2**20), lambda: load_input(path, max_mb=20)):
        with pytest.raises(MirrorError) as exc:
            read()
        assert str(exc.value) == "big.txt: 20.1 MiB is over the limit of 20.0 MiB"


# ---------------------------------------------------------------- read_file


def write(folder: Path, name: str, data: bytes | str) -> Path:
    path = folder / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def test_read_file_returns_strings_column_choices_and_the_column_read(tmp_path):
    assert read_file(write(tmp_path, "a.txt", "cat\ndog\n")) == FileStrings(["cat", "dog"], [], None)
    csv = write(tmp_path, "b.csv", 'id,text,score\n1,"hello, world",3\n2,bye,4\n')
    assert read_file(csv) == FileStrings(["hello, world", "bye"], ["id", "text", "score"], "text")
    assert read_file(csv, column="id") == FileStrings(["1", "2"], ["id", "text", "score"], "id")
    assert read_file(csv, column="") == read_file(csv)  # the app's empty picker: detect the column
    tsv = write(tmp_path, "c.tsv", "n\tphrase\n1\tred car\n")
    assert read_file(tsv) == FileStrings(["red car"], ["n", "phrase"], "phrase")
    jsonl = write(tmp_path, "d.jsonl", '{"title": "T", "body": "B", "n": 1}\n{"title": "U", "body": "C"}\n')
    assert read_file(jsonl, column="body") == FileStrings(["B", "C"], ["title", "body"], "body")


def test_the_detected_column_is_the_longest_text_and_the_note_says_why(tmp_path):
    """Issue 36: a catalogue's `name,summary,id` was read from `name` (short identifiers) without a word."""
    rows = [f"widget-{i},A small tool that cuts {i} kinds of paper and card cleanly,{1000 + i}" for i in range(30)]
    path = write(tmp_path, "items.csv", "name,summary,id\n" + "\n".join(rows) + "\n")
    notes: list[str] = []
    read = read_file(path, notes=notes)
    assert read.column == "summary" and read.strings[0].startswith("A small tool")
    assert notes == [
        "items.csv: read the column 'summary', the longest text of its columns (12.0 words a row; 'name' 1.0); "
        "pick another column to read that one."
    ]
    assert read_file(path, column="name").strings[0] == "widget-0"  # picked by the user: read as asked, no note
    # a column named as text wins, and so does the first of equals (a word list in two languages)
    assert parse_text("text,notes\ncat,a small animal that purrs\n", ".csv", "t.csv") == ["cat"]
    assert parse_text("en,fr\ncat,chat\ndog,chien\n", ".csv", "t.csv") == ["cat", "dog"]


def test_read_file_reports_its_guesses_in_notes(tmp_path):
    notes: list[str] = []
    path = write(tmp_path, "up.csv", "Grüße\nWörter\n".encode("utf-16-le"))
    assert read_file(path, name="my list.csv", notes=notes) == FileStrings(["Grüße", "Wörter"], ["Grüße"], "column 1")
    assert notes == [
        "my list.csv: read as UTF-16-LE (it has no byte-order mark)",
        "my list.csv: no header row found, so 'Grüße' is read as data; if it is a header, name the text column "
        "to skip it",
    ]


def test_a_parse_error_carries_the_column_choices(tmp_path):
    path = write(tmp_path, "e.jsonl", '{"title": "a", "body": "b"}\n{"title": "c"}\n')
    with pytest.raises(MirrorError, match="line 1 has no string field 'text'") as exc:
        read_file(path, name="mine.jsonl")
    assert exc.value.columns == ["title", "body"] and str(exc.value).startswith("mine.jsonl: ")
    table = write(tmp_path, "f.csv", "a,b\n1,2\n")
    with pytest.raises(MirrorError, match="no column 'c'") as exc:
        read_file(table, column="c")
    assert exc.value.columns == ["a", "b"]


def test_read_file_errors_name_the_upload_never_the_server_path(tmp_path, monkeypatch):
    server = tmp_path / "sessions" / "abc123"
    server.mkdir(parents=True)
    cases = [
        (write(server, "photo.png", b"\x89PNG"), {}, "upload.png: unsupported file type '.png'"),
        (server / "gone.txt", {}, "upload.png: no such file"),
        (write(server, "big.txt", "x" * 3000), {"max_bytes": 2048}, "upload.png: 3.0 KiB is over the limit of 2.0 KiB"),
        (server / "dir.txt", {}, "upload.png: is a folder; give a file"),
        (write(server, "bin.txt", bytes(range(32)) * 64), {}, "upload.png: looks like a binary file"),
    ]
    (server / "dir.txt").mkdir()
    for path, kwargs, message in cases:
        with pytest.raises(MirrorError) as exc:
            read_file(path, name="upload.png", **kwargs)
        assert str(exc.value).startswith(message) and str(tmp_path) not in str(exc.value), exc.value
    with pytest.raises(MirrorError) as exc:  # no name: the base name
        read_file(server / "gone.txt")
    assert str(exc.value) == "gone.txt: no such file"

    def unreadable(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", unreadable)
    with pytest.raises(MirrorError) as exc:
        read_file(server / "big.txt", name="u.txt")
    assert str(exc.value) == "u.txt: cannot read it (Permission denied)"


def test_read_texts_keeps_naming_the_users_own_path(tmp_path):
    with pytest.raises(MirrorError, match="no such file") as exc:
        read_texts(tmp_path / "nope.txt")
    assert str(exc.value) == f"{tmp_path / 'nope.txt'}: no such file"  # the CLI runs on the user's machine


def test_strings_made_only_of_invisible_characters_are_dropped_as_empty():
    """U+200B, U+202E, U+FEFF, a Hangul filler, combining marks alone: nothing shows, so nothing to train on."""
    texts, stats = clean_texts(["\u200b\u200b", "\u202e", "\ufeff\u200b", "\u3164", "\u0301\u200d", "cat", "\u200bdog"])
    assert texts == ["cat", "\u200bdog"]  # inside a visible string they stay (a ZWJ belongs to an emoji)
    assert stats.empty == 5 and stats.kept == 2
    emoji = "\U0001f469\u200d\U0001f4bb"
    assert clean_texts([emoji])[0] == [emoji]
