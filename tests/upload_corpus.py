"""Uploads generated here: a corpus of bad and of odd-but-valid text files, on which the app's upload handler, its
service and the `python -m mirror` CLI are each tested (tests/test_app_ui.py, tests/test_explorer_inputs.py,
tests/test_mirror_bad_inputs.py); and model zips rewritten into hostile ones."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
NOISE = [f"word{i}" for i in range(60)]  # padding so a few control bytes stay a small share of a file

BAD_UPLOADS = {  # id: (file name, content, what the app says, what the CLI says)
    "empty": ("empty.txt", b"", "found 0 usable strings", "need at least 2 distinct"),
    "whitespace-only": ("blank.txt", b"  \n\t\n \r\n\n   ", "found 0 usable strings", "need at least 2 distinct"),
    "image-named-txt": ("photo.txt", PNG, "is a PNG image, not a text file", "is a PNG image, not a text file"),
    "image": ("photo.png", PNG, "unsupported file type '.png'", "unsupported file type '.png'"),
    "cyrillic-cp1251": (
        "cp1251.txt",
        "Привет мир\nкак дела\n".encode("cp1251"),
        "is not UTF-8 (byte 0xcf",
        "is not UTF-8",
    ),
    "shift-jis": ("sjis.txt", "日本語\nテスト\n".encode("shift_jis"), "is not UTF-8", "is not UTF-8"),
    "binary-nuls": ("data.txt", bytes(range(32)) * 64, "looks like a binary file", "looks like a binary file"),
    "utf16-bom-truncated": (
        "cut16.txt",
        "cat\ndog\n".encode("utf-16") + b"\x00",
        "UTF-16 byte-order mark but is not valid UTF-16",
        "not valid UTF-16",
    ),
    "one-line": ("one.txt", b"cat\n", "found 1 usable string (", "need at least 2 distinct"),
    "same-line": ("same.txt", b"cat\n" * 50, "49 duplicates", "need at least 2 distinct"),
    "csv-no-text-column": ("nums.csv", b"id,score\n1,0.5\n2,0.7\n3,0.1\n", "no text column found", "no text column"),
    "tsv-no-text-column": ("nums.tsv", b"id\tscore\n1\t0.5\n2\t0.7\n", "no text column found", "no text column"),
    "csv-header-only": ("head.csv", b"id,score\n", "no rows of data", "no rows of data"),
    # issue 52: a quote never closed merged the rest of the file into one string, silently; an unquoted comma shifted
    "csv-unterminated-quote": (
        "quote.csv",
        b'text,n\nfine,1\n"unterminated quote, here,1\nnext,2\nlast,3\n',
        "line 3 opens a quote",
        "opens a quote",
    ),
    "csv-ragged": ("ragged.csv", b"text,n\nfine,1\nhello, world,2\n", "line 3 has 3 cells", "has 3 cells"),
    "csv-giant-field": (
        "giant.csv",
        b'text\n"' + b"a" * 200_000 + b'"\nb\n',
        "not a readable CSV file (line",
        "not a readable CSV file",
    ),
    "jsonl-malformed": ("bad.jsonl", b'{"text": "a"}\n{"text": \n', "line 2 is not valid JSON", "line 2 is not valid"),
    "jsonl-no-text-field": ("names.jsonl", b'{"name": "a"}\n{"name": "b"}\n', "no string field 'text'", "'text'"),
    "jsonl-5000-digit-number": ("num.jsonl", b'{"text": ' + b"9" * 5000 + b"}\n", "line 1 is not usable JSON", "JSON"),
    "jsonl-nested-past-the-stack": (
        "deep.jsonl",
        b"[" * 100_000 + b"]" * 100_000 + b"\n",
        "line 1 is not usable JSON",
        "line 1 is not usable JSON",
    ),
}

INTL = ["😀 smile", "猫が好き", "שלום עולם", "مرحبا بالعالم", "👨\u200d👩\u200d👧 family", "Кошка", "ça va"]
LONG = ("lorem ipsum dolor sit amet " * 400)[:10_000].strip()
GOOD_UPLOADS = {  # id: (file name, content, the strings it must load as)
    "utf16-le-bom": ("u16.txt", "cat\ndog\nkitten\n".encode("utf-16"), ["cat", "dog", "kitten"]),
    "utf16-be-bom": ("u16be.txt", b"\xfe\xff" + "cat\ndog\n".encode("utf-16-be"), ["cat", "dog"]),
    "utf16-no-bom": ("u16le.txt", "cat\ndog\nbus\n".encode("utf-16-le"), ["cat", "dog", "bus"]),
    "utf32-bom": ("u32.txt", "cat\ndog\n".encode("utf-32"), ["cat", "dog"]),
    # Western legacy text is read as Windows-1252 (mirror.data.decode), with a note, since the engine learnt it
    "latin-1": ("latin.txt", "café\nthé\nnaïve\n".encode("latin-1"), ["café", "thé", "naïve"]),
    "utf8-bom-crlf": ("bom.txt", b"\xef\xbb\xbfcat\r\ndog\r\n\r\n", ["cat", "dog"]),
    "cr-only-newlines": ("mac.txt", b"cat\rdog\rbus\r", ["cat", "dog", "bus"]),
    "nul-and-control-chars": (
        "ctl.txt",
        "\n".join(["ca\x00t", "do\x07g", "\x1b[1mred\x1b[0m", "bl\x7fue", "tab\there", "\ufeffbom", *NOISE]).encode(),
        ["ca t", "do g", "[1mred [0m", "bl ue", "tab here", "bom", *NOISE],
    ),
    "emoji-cjk-rtl": ("intl.txt", "\n".join(INTL).encode(), INTL),
    "10000-char-line": ("long.txt", f"{LONG}\ncat\ndog\n".encode(), [LONG, "cat", "dog"]),
    "jsonl-bare-strings-and-objects": ("ok.jsonl", b'"cat"\n{"text": "dog"}\n\n"bus"\n', ["cat", "dog", "bus"]),
}


def write(folder: Path, name: str, content: bytes) -> Path:
    """`content` as the file `folder/name`; returns its path."""
    path = folder / name
    path.write_bytes(content)
    return path


def rewrite_zip(src: Path, dst: Path, edit: Callable[[str, bytes], bytes | str | None]) -> Path:
    """A copy of the zip `src` as `dst`, each entry's data passed through `edit(name, data)` (None drops it)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            out = edit(info.filename, data)
            if out is not None:
                zout.writestr(info.filename, out)
    return dst
