"""Rebuild examples/pairs/foldoc.tsv: a "pairs" dev set of computing terms and their definitions, from FOLDOC.

Each row is one entry of the Free On-line Dictionary of Computing (FOLDOC, 19 January 2023, editor Denis Howe;
GFDL 1.1 or later: see examples/pairs/FOLDOC_LICENSE.txt): `id<TAB>half<TAB>group<TAB>term<TAB>text`.

- term: the entry's headword as FOLDOC writes it (its first one, where an entry has several): the string a user
  uploads;
- text: the definition, plain prose: the first sense of the entry that has MIN_WORDS words or more, cut to
  MAX_WORDS words (at the last sentence end within them when there is one past word 40); the domain tags
  (`<language>`), cross-reference braces, URLs, e-mail addresses, pronunciations (`/kash/`), bibliographic
  references, "See also" lines and update dates are dropped. A text that opens with the term itself says "It"
  instead ("Glish is an interpretive language" -> "It is an interpretive language"), or loses the term when a
  colon, comma or full stop follows it; the few that go on with more of a name ("HAL 9000, ...") are left out;
- group: the term's first letter (a-z; `#` for a digit or symbol): what the halves are split by, so that a family
  of names (Ada, Ada 83, Ada 95) and, nearly always, an acronym with its expansion (MTA, Mail Transfer Agent) stay
  in one half;
- half: dev (what chooses defaults) or check (reported once): the 27 groups, shuffled with SPLIT_SEED (which breaks
  ties in size), each given, largest first, to the half with fewer rows so far;
- id: `f` and the entry's number in the dictionary (its offset order, all entries counted).

Left out: the entries from the Jargon File (tagged `[{Jargon File}]`, or sharing JARGON_SHARED or more 8-word runs, or
a tenth of theirs, with the Jargon File 4.4.7: the project's "Short articles" check is that File), the
Debian-only appendix `Dictionary.debian` (another licence), entries with no prose (pure cross-references), terms
that two kept entries share (both go) and texts that two terms share (both go).

Nothing is fetched at run time. To rebuild the shipped file (Debian 12 "bookworm" packages):

    apt-get download dict-foldoc=20230119-1 dict-jargon=4.4.7-3.1
    .venv/bin/python scripts/make_pairs_foldoc.py dict-foldoc_20230119-1_all.deb dict-jargon_4.4.7-3.1_all.deb

The packages are read in place (usr/share/dictd/foldoc.dict.dz and foldoc.index; `dpkg-deb -x` shows the same files).
The same packages give the same bytes; the script prints the file's sha256.
"""

from __future__ import annotations

import gzip
import re
from collections import Counter
from pathlib import Path

from make_jargon_docs import deb_members, jargon_entries  # the shipped check's reader (scripts/ is on sys.path)
from pairs_halves import build_and_write, halves

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "examples" / "pairs" / "foldoc.tsv"
MIN_WORDS, MAX_WORDS, MIN_CUT_WORDS = 8, 120, 40
JARGON_SHINGLE, JARGON_SHARED = 8, 4
SPLIT_SEED = 7
_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

_URL = r"(?:https?|ftp|news|mailto|telnet|gopher|file|wais):[^\s)}>]*"
_DOMAIN = re.compile(r"(?:\d+\.\s*)?(?:<[a-z][^<>@]*>\s*)*")  # "2. <language, humour> " opening a paragraph
_DATE = re.compile(r"\(\d[\d-]*\)\.?")  # "(1994-11-08)", the entry's last update
_NOISE = re.compile(
    r"(?:see also|see:|see |compare |e-?mail|usenet|mailing list|home page|ftp|latest version|\w+ faq|"
    r"\w+ newsgroup|newsgroup|(?:ports|requires|conformance|portability|restriction|bugs|parts|reference|version|"
    r"author|how to get):)",
    re.I,
)
# a pronunciation: at the text's start (after any parenthesised alias) any /.../; elsewhere only one with an
# apostrophe or an asterisk (the Jargon File's schwa), so that paths (/etc/) and "and/or" stay
_PRON_START = re.compile(r"^((?:\([^()]*\)\s*)*)(?:/[^/]{1,40}/(?:\s*(?:,|;|or|or rarely|and)?\s*/[^/]{1,40}/)*\s*)")
_PRON = re.compile(r"\s*(?:\(\s*)?/(?=[^/]*['*])[A-Za-z][A-Za-z*' .-]{0,38}/(?:\s*\))?")
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*$")
_NOT_AN_END = re.compile(
    r"[A-Z]\.|e\.g\.|i\.e\.|cf\.|vs\.|Dr\.|Mr\.|Mrs\.|Prof\.|St\.|Inc\.|Ltd\.|Corp\.|Co\.|[Nn]o\."
)  # initials


def _number(s: str) -> int:
    """A dictd index's base-64 number."""
    value = 0
    for c in s:
        value = value * 64 + _DIGITS.index(c)
    return value


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _shingles(text: str) -> list[tuple[str, ...]]:
    w = _words(text)
    return [tuple(w[i : i + JARGON_SHINGLE]) for i in range(len(w) - JARGON_SHINGLE + 1)]


def inline(text: str) -> str:
    """One paragraph's markup to plain text: links, URLs, e-mail addresses, emphasis, pronunciations, citations."""
    t = re.sub(r"\{\s*\(\s*" + _URL + r"\s*\)\s*\}", "", text)  # {(url)}
    t = re.sub(r"\{([^{}]*?)\s*\(\s*" + _URL + r"\s*\)\s*\}", r"\1", t)  # {text (url)}
    t = re.sub(r"\{([^{}()]*?)\s*\([^{}()]*\)\s*\}", r"\1", t)  # {text (the entry it points to)}
    t = re.sub(r"\{([^{}]*)\}", r"\1", t)
    t = re.sub(r"[{}]", "", t)
    t = re.sub(_URL, "", t)
    t = re.sub(r"<[^<>\s]+@[^<>\s]+>", "", t)  # <someone@host>
    t = re.sub(r"\[[^\[\]]*\b(?:1[89]|20)\d\d\b[^\[\]]*\]", "", t)  # [Sammet 1969, p. 640], ["Title", ..., 1988]
    t = re.sub(r"\bSammet 19[67]\d\b(?:,? (?:pp?\.? ?)?[\d-]+)?\.?", "", t)
    t = re.sub(r"\s*(?:\[[^\[\]]*\?\]|\(\?\))", "", t)  # the editor's [?], [first release?], (?)
    t = re.sub(r"(?:^|(?<=[.!?] ))See(?: also)?:? [^.]*(?:\.|$)", "", t)  # a trailing "See also {x}, {y}."
    t = re.sub(  # "Mailing list: someone@host." and the like inside a paragraph
        r"(?:^|(?<=[.!?] ))(?:Mailing lists?|E-?mail(?: address)?|Usenet(?: id| newsgroups?)?|FTP|Home page|"
        r"Newsgroups?|Address|Telephone|Tel|Fax):.*?(?:\.(?= [A-Z])|$)",
        "",
        t,
    )
    t = re.sub(r"(?:^|(?<=[.!?] ))(?:reference|author|how to get|ports|parts|requires): [^.]*(?:\.|$)", "", t)
    t = re.sub(r"__([^_]+)__", r"\1", t)  # __emphasis__
    t = re.sub(r"(?<![\w*])\*(\w[^*]*?\w|\w)\*(?![\w*])", r"\1", t)  # *emphasis*
    t = _PRON_START.sub(r"\1", t)
    t = _PRON.sub("", t)
    t = re.sub(r"\(\s*[,;]?\s*\)", "", t)  # parentheses a removal emptied
    t = " ".join(t.split())
    t = re.sub(r"([.!?]) \.(?= |$)", r"\1", t)  # ". ." where a removal left its full stop
    return re.sub(r" +([.,;:)])", r"\1", t).strip()


def _is_code(block: str) -> bool:
    """A paragraph indented past the body's 3 spaces: code, a table, a diagram or a quotation, not the definition.
    A list item's continuation lines (under "- " or "1. ") do not count."""
    lines = [line for line in block.split("\n") if line.strip()]
    indents = [len(line) - len(line.lstrip()) for line in lines]
    if not lines or indents[0] >= 4:
        return bool(lines)
    return any(i >= 4 for i in indents[1:]) and not re.match(r"\s*(?:[-*+o]|\d+[.)]|[a-z][.)])\s", lines[0])


def _to_sentence_end(text: str) -> str:
    """The text up to its last full stop, "!" or "?" before a space (all of it when it ends with one)."""
    if _SENTENCE_END.search(text):
        return text
    ends = [m.end() for m in re.finditer(r"[.!?][\"')\]]*(?= )", text)]
    return text[: ends[-1]] if ends else ""


def senses(body: str) -> list[str]:
    """The entry's senses ("1. ...", "2. ..."; one when unnumbered), each as plain text with its noise dropped.

    A display (code, a formula, a table, a diagram) is dropped, and a sentence that it interrupts or that introduces
    it with a colon goes too, except that a short one (3 lines, 15 words) inside a sentence that goes on after it
    ("the sequence beginning / 1, 1, 2, 3, 5, ... / in which each term ...") is kept inline."""
    blocks = [b for b in re.split(r"\n[ \t]*\n", body) if b.strip()]
    is_display = [_is_code(b) or sum(c.isalpha() for c in b) < 0.6 * len("".join(b.split())) for b in blocks]
    out: list[list[str]] = [[]]
    broken = [False]  # a sense whose opening sentence a display cut: it goes
    fragment = False  # the next paragraph opens with the end of a sentence a display interrupted: drop that part
    for i, block in enumerate(blocks):
        para = " ".join(block.split())
        if _DATE.fullmatch(para) or (para.startswith("[") and para.rstrip(".").endswith("]")):
            continue
        if re.match(r"[2-9]\d*\. |1\d+\. ", para) and out[-1]:
            out.append([])
            broken.append(False)
            fragment = False
        goes_on = i + 1 < len(blocks) and bool(re.match(r"\s*[a-z]", blocks[i + 1]))
        if is_display[i]:
            if out[-1] and not _SENTENCE_END.search(out[-1][-1]):  # inside a sentence or after its colon
                short = block.strip().count("\n") < 3 and len(para.split()) <= 15
                if short and goes_on and not out[-1][-1].endswith(":"):
                    out[-1][-1] += " " + para
                else:
                    out[-1][-1] = _to_sentence_end(out[-1][-1])
                    broken[-1] |= not out[-1][0]
                    fragment = goes_on
            continue
        core = para[_DOMAIN.match(para).end() :]
        if re.fullmatch(r"\{[^{}]*\}[.,;]?", core) or _NOISE.match(core):  # a bare cross-reference; links, mail
            continue
        # a domain tag that lost its "<" ("language> A ...") or is in braces ("{storage} Video Home System")
        core = inline(re.sub(r"^(?:[a-z][a-z ,]*> |\{[a-z][a-z ]*\} (?=[A-Z]))", "", core))
        if fragment:  # "provided x is free in f. Left to right is ..." -> "Left to right is ..."
            end = re.search(r"[.!?][\"')\]]*(?: |$)", core)
            core, fragment = (core[end.end() :] if end else ""), False
        words = len(core.split())
        into_display = i + 1 < len(blocks) and is_display[i + 1]
        # not a heading ("compiler and interpreter"): a sentence, or a start that a display goes on with
        if words >= 8 or (words >= 2 and (_SENTENCE_END.search(core) or into_display or goes_on)):
            out[-1].append(core)
    return [t for t, bad in zip((" ".join(" ".join(s).split()) for s in out), broken, strict=True) if t and not bad]


def cut(text: str) -> str:
    """At most MAX_WORDS words, ending at the last sentence end past MIN_CUT_WORDS when there is one."""
    words = text.split()
    if len(words) <= MAX_WORDS:
        return text
    words = words[:MAX_WORDS]
    ends = [
        i
        for i, w in enumerate(words)
        if i + 1 >= MIN_CUT_WORDS and _SENTENCE_END.search(w) and not _NOT_AN_END.fullmatch(w.lstrip("(\"'"))
    ]
    return " ".join(words[: ends[-1] + 1] if ends else words)


def unrestate(term: str, text: str) -> str | None:
    """The text without a restatement of the term at its start (None: the row goes)."""
    m = re.match(re.escape(term) + r"(?![\w+#])", text, re.I)
    if not m:
        return text
    rest = text[m.end() :]
    if re.match(r" (?:is|was|are|were|has|had|can|will|does|provides|supports|allows|extends) ", rest):
        # "Glish is an interpretive language" -> "It is an interpretive language"
        return "It" + rest
    if re.match(r"\s*[.:,;-]+\s", rest):  # "TERM: a thing", "TERM - a thing" (not "mcvax.cwi.nl")
        rest = re.sub(r"^\s*[.:,;-]+\s*", "", rest)
        return rest[:1].upper() + rest[1:]
    return None


def group_of(term: str) -> str:
    first = term[:1].lower()
    return first if "a" <= first <= "z" else "#"


def build(foldoc_deb: Path, jargon_deb: Path) -> list[tuple[str, str, str, str, str]]:
    packed, index = deb_members(foldoc_deb, "foldoc.dict.dz", "foldoc.index")
    data = gzip.decompress(packed)
    appendix = data.index(b"\nDictionary.debian")  # the Debian maintainers' own entries, under another licence
    spans = set()
    for line in index.decode("utf-8").splitlines():
        head, offset, length = line.split("\t")[:3]
        if not head.startswith("00-database"):
            spans.add((_number(offset), _number(length)))
    jargon = {s for e in jargon_entries(jargon_deb) for s in _shingles(e["text"])}
    rows = []
    for n, (offset, length) in enumerate(sorted(spans)):
        if offset + length > appendix:
            continue
        entry = data[offset : offset + length].decode("utf-8")
        head, _, body = entry.partition("\n\n")
        term = " ".join(re.split(r"\n|%%%", head.strip())[0].split())
        if not term or "Jargon File}]" in body or "[Jargon File]" in body:
            continue
        shingles = _shingles(body)
        shared = sum(s in jargon for s in shingles)
        if shared >= JARGON_SHARED or (shared and 10 * shared >= len(shingles)):
            continue
        text = next((s for s in senses(body) if len(s.split()) >= MIN_WORDS), None)
        text = text and unrestate(term, cut(text))
        if text and len(text.split()) >= MIN_WORDS and "\t" not in term + text:
            rows.append((f"f{n}", group_of(term), term, text))
    terms = Counter(r[2].lower() for r in rows)
    texts = Counter(r[3] for r in rows)
    rows = [r for r in rows if terms[r[2].lower()] == 1 and texts[r[3]] == 1]
    half = halves(Counter(r[1] for r in rows), SPLIT_SEED)
    return [(i, half[g], g, term, text) for i, g, term, text in rows]


def main() -> None:
    build_and_write(__doc__, OUT, build, inputs=2)


if __name__ == "__main__":
    main()
