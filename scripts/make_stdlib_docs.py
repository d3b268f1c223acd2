"""Rebuild examples/domain/stdlib-docstrings.tsv: a domain dev set from the Python 3.11.7 standard library's docstrings.

Each row is one public function, class or method of a public class, read with `ast` (nothing is imported):
`id<TAB>half<TAB>package<TAB>summary<TAB>query`. The summary (the docstring's first paragraph, or its first line when that
paragraph is over MAX_SUMMARY_WORDS words) is the string a user
uploads; the query (the rest of the docstring, up to QUERY_WORDS words) is what should find it, never trained on.
The relation between the two is the author's, not in either string. `package` (the top-level module or package:
`email`, `asyncio`, `json`) gives the label-free structure figure; the halves are split by package (seeded), so dev
and check share no package.

    .venv/bin/python scripts/make_stdlib_docs.py [/root/.pyenv/versions/3.11.7/lib/python3.11]

The source is CPython 3.11.7's `Lib/` (the pyenv install here; the same files are in the python.org source tarball
Python-3.11.7.tgz): the output is the same bytes from either, since only the .py files below it are read, in sorted
order. Licence: the PSF licence, examples/domain/PYTHON_LICENSE.txt (a copy of Lib's LICENSE.txt).
"""

from __future__ import annotations

import ast
import hashlib
import random
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "examples" / "domain" / "stdlib-docstrings.tsv"
LIB = Path("/root/.pyenv/versions/3.11.7/lib/python3.11")
# tests, demos, bundled third-party code and build helpers: not the library's documented API
SKIP = {
    "test",
    "tests",
    "idle_test",
    "site-packages",
    "__pycache__",
    "turtledemo",
    "ensurepip",
    "config-3.11-x86_64-linux-gnu",
    "__phello__",
    "pydoc_data",
    "idlelib",
}
QUERY_WORDS = 60  # the query: at most this many words of the docstring after its first line
MIN_SUMMARY_WORDS, MAX_SUMMARY_WORDS, MIN_QUERY_WORDS = 3, 40, 8
SPLIT_SEED = 7


def clean(text: str) -> str:
    return " ".join(text.split())


def entries(path: Path, package: str):
    """(qualified name, summary, query) of each public documented function/class/method in one file."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    module = ".".join(path.relative_to(LIB_ROOT).with_suffix("").parts).removesuffix(".__init__")

    def visit(body, prefix):
        for node in body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node, clean=True)
            if doc:
                # the summary: the first paragraph (PEP 257's summary line, wrapped or not), the query the rest
                first, _, rest = doc.strip().partition("\n\n")
                if len(first.split()) > MAX_SUMMARY_WORDS:
                    first, _, more = doc.strip().partition("\n")
                    rest = more
                rest = "\n".join(line for line in rest.splitlines() if not line.lstrip().startswith(">>>"))
                summary, query = clean(first), clean(rest)
                words = query.split()
                if len(summary.split()) >= MIN_SUMMARY_WORDS and len(words) >= MIN_QUERY_WORDS:
                    yield f"{module}.{prefix}{node.name}", summary, " ".join(words[:QUERY_WORDS])
            if isinstance(node, ast.ClassDef):
                yield from visit(node.body, f"{prefix}{node.name}.")

    yield from visit(tree.body, "")


def main() -> None:
    global LIB_ROOT
    LIB_ROOT = Path(sys.argv[1]) if len(sys.argv) > 1 else LIB
    rows = []
    for path in sorted(LIB_ROOT.rglob("*.py")):
        parts = path.relative_to(LIB_ROOT).parts
        if any(p in SKIP for p in parts) or any(p.startswith("_") and p != "__init__.py" for p in parts):
            continue
        if parts[0].startswith("_sysconfigdata"):
            continue
        package = parts[0].removesuffix(".py")
        rows += [(name, package, s, q) for name, s, q in entries(path, package)]
    # a summary that several entries share ("Return self==value.") finds no one entry: drop them all
    counts = Counter(s.lower() for _, _, s, _ in rows)
    rows = [r for r in rows if counts[r[2].lower()] == 1 and "\t" not in r[2] + r[3]]
    rows = [r for r in rows if not re.fullmatch(r"[\W\d_]*", r[2])]
    packages = sorted({r[1] for r in rows})
    random.Random(SPLIT_SEED).shuffle(packages)
    # alternate packages, largest first after the shuffle's tie-break, so the halves hold about the same rows
    sizes = Counter(r[1] for r in rows)
    packages.sort(key=lambda p: -sizes[p])
    half = {p: ("dev", "check")[i % 2] for i, p in enumerate(packages)}
    lines = ["id\thalf\tpackage\tsummary\tquery"]
    lines += [f"{name}\t{half[pkg]}\t{pkg}\t{s}\t{q}" for name, pkg, s, q in rows]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    data = ("\n".join(lines) + "\n").encode()
    OUT.write_bytes(data)
    n = Counter(half[r[1]] for r in rows)
    print(
        f"{OUT.relative_to(ROOT)}: {len(rows):,} rows ({n['dev']:,} dev, {n['check']:,} check) from "
        f"{len(packages)} packages; sha256 {hashlib.sha256(data).hexdigest()}"
    )


if __name__ == "__main__":
    main()
