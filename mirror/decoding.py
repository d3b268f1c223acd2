"""Bytes to text: the encoding read from a byte-order mark, or guessed (UTF-16 without one, a Western legacy code
page) and said so in a note; a binary file (an image, a PDF, a zip) named as what it is and refused.
"""

from __future__ import annotations

import unicodedata

from mirror.errors import MirrorError

BINARY_MAGIC = {
    b"\x89PNG": "a PNG image",
    b"\xff\xd8\xff": "a JPEG image",
    b"GIF8": "a GIF image",
    b"%PDF": "a PDF",
    b"PK\x03\x04": "a zip archive (or .docx/.xlsx)",
    b"\x7fELF": "a program",
}
SNIFF_CHARS = 65536  # encoding guesses look at this much of a file


# ---------------------------------------------------------------- bytes to text


def decode(data: bytes, name: str, notes: list[str] | None = None) -> str:
    """Decode a text file's bytes, or raise a MirrorError naming the file (`name`) and the problem.

    UTF-8 (BOM or not) and UTF-16/UTF-32 with a BOM are read as they are. Guesses, each added to `notes`:
    UTF-16 without a BOM when it decodes cleanly to text (NULs in every other byte for mostly-ASCII text; the
    spaces and line breaks of real text otherwise); then, for bytes that are not UTF-8 but clearly text (no NUL,
    few control characters, mostly ASCII letters), Windows-1252, the usual Western European legacy encoding
    (Latin-1 where it has no character). Images, binary files and other legacy encodings are refused.
    """
    text = _decode_with_bom(data, name)
    if text is not None:
        return text
    for magic, what in BINARY_MAGIC.items():
        if data.startswith(magic):
            raise MirrorError(f"{name}: is {what}, not a text file; upload UTF-8 text")
    head = data[:SNIFF_CHARS]
    if head and head.count(b"\x00") > 0.01 * len(head):
        text = _utf16_without_bom(data, name, notes)
        if text is None:
            raise MirrorError(f"{name}: looks like a binary file (many NUL bytes), not text; upload UTF-8 text")
        return text
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        error = exc
    for guess in (_utf16_without_bom, _western_legacy):
        text = guess(data, name, notes)
        if text is not None:
            return text
    raise MirrorError(
        f"{name}: is not UTF-8 (byte 0x{data[error.start]:02x} at offset {error.start}); "
        "re-save it as UTF-8 (e.g. `iconv -f ENCODING -t UTF-8`)"
    )


def _decode_with_bom(data: bytes, name: str) -> str | None:
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
    return None


def _utf16_without_bom(data: bytes, name: str, notes: list[str] | None) -> str | None:
    """UTF-16 without a BOM: NULs in (nearly) every odd or even byte (mostly-ASCII text), or else a clean decode
    to text holding spaces or line breaks (their NUL byte is what marks UTF-16; other scripts have few NULs)."""
    codec = _nul_pattern(data[:SNIFF_CHARS])
    if codec is not None:
        try:
            text = data.decode(codec)
        except UnicodeDecodeError:
            raise MirrorError(
                f"{name}: looks like UTF-16 without a byte-order mark but does not decode as {codec}; re-save it as UTF-8"
            ) from None
    else:
        text, codec = _clean_utf16(data)
        if text is None:
            return None
    note(notes, f"{name}: read as {codec.upper()} (it has no byte-order mark)")
    return text


def _nul_pattern(head: bytes) -> str | None:
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


def _clean_utf16(data: bytes) -> tuple[str | None, str]:
    best: tuple[int, str, str] | None = None
    for codec in ("utf-16-le", "utf-16-be") if len(data) % 2 == 0 else ():
        try:
            text = data.decode(codec)
        except UnicodeDecodeError:
            continue
        breaks = text.count(" ") + text.count("\n")
        if breaks and _looks_like_text(text) and (best is None or breaks > best[0]):
            best = (breaks, text, codec)
    return (best[1], best[2]) if best else (None, "")


def _western_legacy(data: bytes, name: str, notes: list[str] | None) -> str | None:
    """Windows-1252 (Latin-1 for the five bytes it leaves undefined) when the result is clearly Western text: no
    NUL, few control characters, and mostly ASCII letters (Shift-JIS or Cyrillic read this way is all accents)."""
    if b"\x00" in data:
        return None
    try:
        text, codec = data.decode("cp1252"), "Windows-1252"
    except UnicodeDecodeError:
        text, codec = data.decode("latin-1"), "Latin-1"
    sample = text[:SNIFF_CHARS]
    letters = sum(ch.isalpha() for ch in sample)
    accented = sum(ord(ch) > 127 for ch in sample)
    if not _looks_like_text(text) or accented > 0.4 * letters:
        return None
    note(notes, f"{name}: is not UTF-8; read as {codec} (Western European): if accents look wrong, re-save it as UTF-8")
    return text


def _looks_like_text(text: str) -> bool:
    """At most 1% control, unassigned or private-use characters (tabs and line breaks aside) in the first 64K."""
    sample = text[:SNIFF_CHARS]
    odd = sum(unicodedata.category(ch) in ("Cc", "Cn", "Co", "Cs") and ch not in "\t\n\r\f" for ch in sample)
    return odd <= 0.01 * len(sample)


def note(notes: list[str] | None, text: str) -> None:
    """Add `text` to the caller's `notes` (None: nobody asked for them)."""
    if notes is not None:
        notes.append(text)
