"""Candidate sources for the "Long documents" check that were measured and not shipped (issue 25).

**Wikipedia** (a gensim wheel): articles cut into section openings of 150-256 tokens, from the shortened English
Wikipedia dump in gensim's test data (CC BY-SA; 90 articles). Scores saved tuned model folders against the bundled
base, as a fresh load of each folder computes it, with relations between documents taken from the articles'
structure:

- top-10 rankings (nDCG@10, gains 2^grade - 1): same article 2, an article this one links to (or from) 1;
  and "cross": other sections of the same article left out, linked articles 1 (related-but-different documents);
- all pairs (Spearman of cosine against the grade over every pair of documents): same article 2, linked 1.

    pip download --no-deps gensim==4.4.0 -d /tmp/gensim && \
    .venv/bin/python bench/bench_longdoc_sources.py /tmp/gensim/gensim-4.4.0-*.whl /work/models/sentences-default \
        /work/models/words-default /work/models/sentences-newdefault

**The Jargon File** (Debian's `dict-jargon` package, version 4.4.7, public domain): its entries as documents, in
two length bands (40-110 words, the length of short news articles, and 110-450 words), each scored whole, on two
seeded random halves (each ranked within itself), and as two halves of queries (each entry ranked among all); relations from the entries' own cross-references ({term}): 2 one entry refers to the other,
1 they share an entry they refer to or are referred from (two steps), 0 otherwise; nDCG@10 of the top 10.

    apt-get download dict-jargon && \
    .venv/bin/python bench/bench_longdoc_sources.py dict-jargon_*.deb /work/models/sentences-default ...

Wheel and package are read in place (nothing is unpacked or shipped). Output: a table, and
bench/out/longdoc-sources.json (bench/out/longdoc-sources-jargon.json for the Jargon File).
"""

from __future__ import annotations

import argparse
import bz2
import html
import random
import re
import sys
import zipfile
from pathlib import Path

import numpy as np
from common import ROOT, print_table, write_json
from scipy.stats import spearmanr

from mirror.checks import bootstrap_mean_difference, graded_ndcg
from mirror.encoder import load_encoder

sys.path.insert(0, str(ROOT / "scripts"))
from make_jargon_docs import jargon_entries, jargon_links  # noqa: E402  (the shipped check's parser)

DUMP = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
SKIP = {"see also", "references", "external links", "further reading", "notes", "bibliography", "sources",
        "footnotes", "citations", "works cited", "notes and references", "gallery", "works", "selected works",
        "publications", "filmography", "discography", "list", "awards"}  # fmt: skip
LOW, HIGH = 150, 256


def strip_nested(text: str, opening: str, closing: str) -> str:
    out, depth, i = [], 0, 0
    while i < len(text):
        if text.startswith(opening, i):
            depth, i = depth + 1, i + len(opening)
        elif depth and text.startswith(closing, i):
            depth, i = depth - 1, i + len(closing)
        else:
            if not depth:
                out.append(text[i])
            i += 1
    return "".join(out)


def links_of(wikitext: str) -> set[str]:
    titles = (m.group(1).strip() for m in re.finditer(r"\[\[([^\]|#]+)", wikitext))
    return {t[:1].upper() + t[1:].replace("_", " ") for t in titles if ":" not in t}


def plain(wikitext: str) -> str:
    """Wikitext to prose: templates, tables, references, files, headings and markup dropped, links kept as text."""
    t = html.unescape(html.unescape(wikitext))
    t = re.sub(r"<!--.*?-->", "", t, flags=re.S)
    t = re.sub(r"<ref[^>/]*/>", "", t)
    t = re.sub(r"<ref[^>]*>.*?</ref>", "", t, flags=re.S)
    t = strip_nested(strip_nested(t, "{{", "}}"), "{|", "|}")
    t = re.sub(r"\[\[(?:File|Image|Category|[a-z\-]{2,12}):[^\[\]]*(?:\[\[[^\]]*\]\][^\[\]]*)*\]\]", "", t)
    t = re.sub(r"\[\[([^\]|]*)\|([^\]]*)\]\]", r"\2", t)
    t = re.sub(r"\[\[([^\]]*)\]\]", r"\1", t)
    t = re.sub(r"\[https?://\S+ ([^\]]*)\]", r"\1", t)
    t = re.sub(r"\[https?://\S+\]|<[^>]+>|'{2,}", "", t)
    t = re.sub(r"={2,}[^=\n]+={2,}", "\n", t)
    lines = [s.strip() for s in t.split("\n")]
    t = " ".join(s for s in lines if s and s[0] not in "*#:;|!{}" and not s.startswith("__"))
    return re.sub(r"\s+", " ", re.sub(r"\(\s*[,;]?\s*\)", "", t)).strip()


def article_pages(wheel: Path) -> list[tuple[str, str]]:
    """(title, wikitext) of every article of the dump, in its order: no redirects, lists or disambiguation pages
    (scripts/make_general_text.py reads the same articles)."""
    with zipfile.ZipFile(wheel) as z:
        xml = bz2.decompress(z.read(DUMP)).decode()
    out = []
    for page in re.findall(r"<page>(.*?)</page>", xml, re.S):
        title = re.search(r"<title>(.*?)</title>", page).group(1)
        text = re.search(r"<text[^>]*>(.*?)</text>", page, re.S)
        if "<ns>0</ns>" not in page or "<redirect" in page or not text or "disambiguation" in title.lower():
            continue
        if not title.startswith("List of"):
            out.append((title, text.group(1)))
    return out


def documents(wheel: Path, tokenizer) -> list[dict]:
    """Section openings of every article (whole sentences, LOW-HIGH tokens), each with its article's links."""
    docs = []
    for title, wikitext in article_pages(wheel):
        parts = re.split(r"\n==([^=].*?)==\s*\n", "\n" + wikitext)
        links = links_of(wikitext)
        for name, body in [("Lead", parts[0]), *zip(parts[1::2], parts[2::2], strict=False)]:
            if name.strip().lower() in SKIP:
                continue
            kept, n = [], 0
            for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", plain(body)):
                k = len(tokenizer.tokenize(sentence))
                if n + k > HIGH - 2:
                    break
                kept.append(sentence)
                n += k
            if n >= LOW:
                docs.append({"article": title, "section": name.strip(), "text": " ".join(kept), "links": links})
    return docs


def grades(docs: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(same article, linked articles) as n x n boolean matrices."""
    art = np.array([d["article"] for d in docs])
    same = art[:, None] == art[None, :]
    linked = np.array([[b["article"] in a["links"] for b in docs] for a in docs])
    return same, (linked | linked.T) & ~same


def pairs_spearman(vectors: list[np.ndarray], grade: np.ndarray, resamples: int = 200) -> tuple[list, list]:
    """Spearman x100 of each model's cosines against the grade over all pairs, and the 95% interval of each
    model's change over the first (resampling documents, a pair weighted by its two documents' counts)."""
    n = len(grade)
    i, j = np.triu_indices(n, 1)
    g = grade[i, j]
    cos = [(v @ v.T)[i, j] for v in vectors]
    scores = [100 * spearmanr(c, g)[0] for c in cos]
    rng, diffs = np.random.default_rng(0), []
    for _ in range(resamples):
        w = np.bincount(rng.integers(0, n, n), minlength=n)
        pick = np.repeat(np.arange(len(g)), w[i] * w[j])
        base = spearmanr(cos[0][pick], g[pick])[0]
        diffs.append([100 * (spearmanr(c[pick], g[pick])[0] - base) for c in cos[1:]])
    d = np.array(diffs)
    return scores, [
        (float(np.percentile(d[:, m], 2.5)), float(np.percentile(d[:, m], 97.5))) for m in range(d.shape[1])
    ]


def jargon_grades(entries: list[dict]) -> np.ndarray:
    """n x n over all entries: 2 one refers to the other, 1 two steps apart, 0 otherwise (diagonal -1)."""
    link = np.zeros((len(entries), len(entries)), np.float32)
    for i, linked in enumerate(jargon_links(entries)):
        link[i, sorted(linked)] = 1
    grade = np.where(link > 0, 2, np.where(link @ link > 0, 1, 0))
    np.fill_diagonal(grade, -1)
    return grade


def jargon(deb: Path, models: list[str], encoders: list) -> int:
    entries = jargon_entries(deb)
    grade = jargon_grades(entries)
    names = ["base", *(Path(m).name for m in models)]
    rows = []
    for low, high in ((40, 110), (110, 450)):
        band = [i for i, e in enumerate(entries) if low <= len(e["text"].split()) <= high]
        side = random.Random(13)
        halves = {i: "dev" if side.random() < 0.5 else "check" for i in band}
        texts = [entries[i]["text"] for i in band]
        vectors = [e.encode(texts, normalize=True).astype(np.float64) for e in encoders]
        whole = [100 * graded_ndcg(v, grade[np.ix_(band, band)]) for v in vectors]
        splits = {"all": None, "dev": "dev", "check": "check", "queries dev": "dev", "queries check": "check"}
        for label, half in splits.items():
            keep = [k for k, i in enumerate(band) if half is None or halves[i] == half]
            if label.startswith("queries"):  # these entries' rankings among all the band's entries
                per_doc = [s[keep] for s in whole]
            else:  # ranked within the half
                pick = np.array([band[k] for k in keep])
                per_doc = [100 * graded_ndcg(v[keep], grade[np.ix_(pick, pick)]) for v in vectors]
            row = {
                "entries": f"{low}-{high} words, {label} ({len(keep)})",
                "base": round(float(np.nanmean(per_doc[0])), 1),
            }
            for name, s in zip(names[1:], per_doc[1:], strict=True):
                lo, hi = bootstrap_mean_difference(per_doc[0], s)
                row[name] = f"{np.nanmean(s) - np.nanmean(per_doc[0]):+.1f} [{lo:+.1f}, {hi:+.1f}]"
            rows.append(row)
            print(row, flush=True)
    print_table(rows, ["entries", *names])
    write_json("longdoc-sources-jargon.json", {"entries": len(entries), "rows": rows})
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a gensim wheel (pip download --no-deps gensim==4.4.0), "
                        "or Debian's dict-jargon package (apt-get download dict-jargon)")  # fmt: skip
    parser.add_argument("models", nargs="+", help="tuned model folders")
    parser.add_argument("--base", default="bundled")
    args = parser.parse_args()
    encoders = [load_encoder(args.base), *(load_encoder(m) for m in args.models)]
    if args.source.suffix == ".deb":
        return jargon(args.source, args.models, encoders)
    docs = documents(args.source, encoders[0].tokenizer)
    print(f"{len(docs)} section openings of {len({d['article'] for d in docs})} articles")
    vectors = [e.encode([d["text"] for d in docs], normalize=True).astype(np.float64) for e in encoders]
    same, linked = grades(docs)
    rankings = {
        "top 10: same article 2, linked 1": np.where(same, 2, linked.astype(int)),
        "top 10, cross: linked 1, same article left out": np.where(same, -1, linked.astype(int)),
    }
    names = ["base", *(Path(m).name for m in args.models)]
    rows = []
    for label, grade in rankings.items():
        grade = grade.copy()
        np.fill_diagonal(grade, -1)
        per_doc = [100 * graded_ndcg(v, grade) for v in vectors]
        row = {"score": f"nDCG@10 ({label})", "base": round(float(np.nanmean(per_doc[0])), 1)}
        for name, s in zip(names[1:], per_doc[1:], strict=True):
            lo, hi = bootstrap_mean_difference(per_doc[0], s)
            row[name] = f"{np.nanmean(s) - np.nanmean(per_doc[0]):+.1f} [{lo:+.1f}, {hi:+.1f}]"
        rows.append(row)
    scores, cis = pairs_spearman(vectors, np.where(same, 2, linked.astype(int)))
    row = {"score": "Spearman, all pairs (same article 2, linked 1)", "base": round(scores[0], 1)}
    for name, s, (lo, hi) in zip(names[1:], scores[1:], cis, strict=True):
        row[name] = f"{s - scores[0]:+.1f} [{lo:+.1f}, {hi:+.1f}]"
    rows.append(row)
    print_table(rows, ["score", *names])
    write_json("longdoc-sources.json", {"documents": len(docs), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
