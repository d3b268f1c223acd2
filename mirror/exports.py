"""Exports of a run's strings under both encoders, for tools outside the app: Embedding Projector TSV, Parquet
(pandas, pyarrow, embedding-atlas), a neighbours CSV, or all three in one zip with a README saying how to load them.

Plain values in (the strings, both embedding matrices, per-string metadata, map coordinates), a file out.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import os
import re
import shutil
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mirror.card import hub_base_model
from mirror.errors import MirrorError
from mirror.moved import nearest

FORMATS = ("projector", "parquet", "neighbours", "all")
NEIGHBOURS_K = 10
LINE_BREAKS = re.compile(r"[\t\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")
COORDS = ("base_x", "base_y", "tuned_x", "tuned_y")

ATLAS_WITH_MAP = """\
  embedding-atlas {prefix}.parquet --text text --x x --y y    # the tuned map as drawn in the app
  embedding-atlas {prefix}.parquet --text text --vector tuned_embedding    # its own projection instead
  x, y are the tuned map's coordinates (also in tuned_x, tuned_y; the base map's in base_x, base_y).
"""
# without a map (the command line, or no map of every string drawn) there are no x, y columns: --x x --y y would
# open an empty map without an error, so only --vector is offered
ATLAS_WITHOUT_MAP = """\
  embedding-atlas {prefix}.parquet --text text --vector tuned_embedding    # projects the tuned vectors itself
  (or --vector base_embedding). This export has no map coordinates (no x, y columns): the app adds them when
  you export after drawing a map of every string.
"""

README = """\
Mirror Explorer export: your strings under the base and the tuned encoder.

{files}
Embedding Projector (https://projector.tensorflow.org): "Load", then choose
  {prefix}-tuned-vectors.tsv (or -base-vectors.tsv) as the vectors and {prefix}-metadata.tsv as the metadata.
  One row per string in the same order; the metadata's first row is its header.

embedding-atlas (pip install embedding-atlas):
{atlas}
pandas / pyarrow:
  import pandas as pd, numpy as np
  df = pd.read_parquet("{prefix}.parquet")
  tuned = np.stack(df["tuned_embedding"].to_numpy())   # (strings, dim) float32, unit rows: cosine = dot product
  nb = pd.read_csv("{prefix}-neighbours.csv")          # row, string, rank, base/tuned neighbour and score

Columns: row (the string's number in the run), text, moved (1 - overlap of its 10 nearest neighbours before and
after tuning: 0 = same neighbourhood, 1 = all new), base_embedding, tuned_embedding{coord_note}.
"""


def export_bundle(
    texts: Sequence[str],
    base: np.ndarray,
    tuned: np.ndarray,
    out_dir: str | Path,
    *,
    fmt: str,
    rows: Sequence[int] | None = None,
    metadata: Mapping[str, Sequence[Any]] | None = None,
    coords: Mapping[str, Sequence[float]] | None = None,
    prefix: str = "mirror",
    about: str = "",
) -> Path:
    """Write one export of `texts` (all, or the `rows` picked) into `out_dir`; returns the file to hand out.
    `about`: a paragraph on how the tuned model was trained, for the README (a pairs run: its columns and gain).

    `fmt`: "projector" (a zip of the base and tuned vector TSVs and the metadata TSV), "parquet" (one file),
    "neighbours" (one CSV: each string's top 10 under both encoders, searched among all the strings), "all" (a zip
    of the three and a README.txt). `metadata`: per-string columns (e.g. moved), `coords`: base_x/base_y/tuned_x/
    tuned_y per string (Parquet columns; x, y repeat the tuned map's)."""
    if fmt not in FORMATS:
        raise MirrorError(f"unknown export {fmt!r}; choose one of {', '.join(FORMATS)}")
    texts = list(texts)
    base, tuned = _matrix(base, len(texts), "base"), _matrix(tuned, len(texts), "tuned")
    picked = list(range(len(texts))) if rows is None or len(rows) == 0 else [int(r) for r in rows]
    if any(r < 0 or r >= len(texts) for r in picked):
        raise MirrorError(f"a selection names rows outside 0..{len(texts) - 1}")
    meta = {k: list(v) for k, v in (metadata or {}).items()}
    for name, values in [*meta.items(), *(coords or {}).items()]:
        if len(values) != len(texts):
            raise MirrorError(f"the column {name!r} has {len(values)} values for {len(texts)} strings")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        return write_parquet(out / f"{prefix}.parquet", texts, base, tuned, picked, meta, coords)
    if fmt == "neighbours":
        return write_neighbours(out / f"{prefix}-neighbours.csv", texts, base, tuned, picked)
    files = write_projector(out, prefix, texts, base, tuned, picked, meta)
    if fmt == "all":
        files += [
            write_parquet(out / f"{prefix}.parquet", texts, base, tuned, picked, meta, coords),
            write_neighbours(out / f"{prefix}-neighbours.csv", texts, base, tuned, picked),
        ]
    readme = README.format(
        prefix=prefix,
        atlas=(ATLAS_WITH_MAP if coords else ATLAS_WITHOUT_MAP).format(prefix=prefix),
        files="".join(f"  {p.name}\n" for p in files),
        coord_note=", base_x, base_y, tuned_x, tuned_y, x, y" if coords else "",
    ) + (f"\n{about.strip()}\n" if about.strip() else "")
    path = zip_files(export_path(out, fmt, prefix), prefix, files, {"README.txt": readme})
    for loose in files:  # they are in the zip: the folder holds one copy, not two
        loose.unlink(missing_ok=True)
    return path


def export_path(out_dir: str | Path, fmt: str, prefix: str = "mirror") -> Path:
    """The file `export_bundle(..., fmt=fmt, prefix=prefix)` hands out from `out_dir`."""
    name = {"parquet": f"{prefix}.parquet", "neighbours": f"{prefix}-neighbours.csv"}.get(fmt, f"{prefix}-{fmt}.zip")
    return Path(out_dir) / name


def export_prefix(run_prefix: str, rows: Sequence[int] | None, key: str) -> str:
    """The file-name stem of an export: the run's (`mirror-<run id>`) for every string, `...-selection-<n>-<key>`
    for a selection of n rows, so a selection's download is never named like the whole run's (nor like another
    selection's of the same size)."""
    return run_prefix if not rows else f"{run_prefix}-selection-{len(rows)}-{key[:6]}"


def moved_csv_name(run_prefix: str, text_filter: str = "") -> str:
    """The What moved CSV's file name: `<run prefix>-moved-all.csv`, or `...-moved-matching-<filter>.csv`."""
    needle = " ".join(str(text_filter or "").split())
    if not needle:
        return f"{run_prefix}-moved-all.csv"
    slug = re.sub(r"[^A-Za-z0-9]+", "-", needle.casefold()).strip("-")[:40].strip("-")
    return f"{run_prefix}-moved-matching-{slug or 'filter'}.csv"


def content_folder(exports_dir: Path, kind: str, data: bytes) -> Path:
    """`<exports_dir>/<kind>-<hash of data>`: the folder a download of these exact bytes lives in. A file handed out
    is never rewritten: a request for other contents gets another folder, so another link."""
    return exports_dir / f"{kind}-{hashlib.sha256(data).hexdigest()[:16]}"


def write_once(path: Path, data: bytes) -> Path:
    """Write `data` to `path` unless it is there already (then it holds these bytes: its folder is named by their
    hash); atomically, so a reader never sees half a file."""
    if path.is_file():
        os.utime(path.parent)  # recently used: the last of the run's exports to go
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def export_key(fmt: str, rows: Sequence[int] | None, coords: Mapping[str, Sequence[float]] | None) -> str:
    """What makes two exports of one run the same file: the format, the rows picked and the map coordinates."""
    h = hashlib.sha256(fmt.encode())
    h.update(b"all" if not rows else np.asarray(rows, dtype=np.int64).tobytes())
    for name in COORDS if coords else ():
        h.update(name.encode() + np.asarray(coords[name], dtype=np.float32).tobytes())
    return h.hexdigest()[:16]


def prune_exports(runs: Iterable[Path], held: int, budget: int, keep: Path | None = None) -> int:
    """Remove the exports (entries of `<run>/exports/`) of `runs`, least recently written first, while `held` bytes
    are over `budget`; `keep` stays (and the entry holding it). Returns the bytes freed."""
    entries = []
    for run in runs:
        for entry in (run / "exports").iterdir() if (run / "exports").is_dir() else ():
            with contextlib.suppress(OSError):
                entries.append((entry.stat().st_mtime, entry))
    freed = 0
    for _, entry in sorted(entries):
        if held - freed <= budget:
            break
        if keep is not None and (entry == keep or keep.is_relative_to(entry)):
            continue
        size = (
            sum(f.stat().st_size for f in entry.rglob("*") if f.is_file()) if entry.is_dir() else entry.stat().st_size
        )
        shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        freed += size
    return freed


def _matrix(x: np.ndarray, n: int, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[0] != n:
        raise MirrorError(f"the {name} embeddings have shape {x.shape}, not one row per string ({n})")
    return x


def safe_cell(text: str) -> str:
    """A string on one TSV line: tabs and every kind of line break become spaces."""
    return LINE_BREAKS.sub(" ", str(text))


def write_projector(
    out: Path,
    prefix: str,
    texts: Sequence[str],
    base: np.ndarray,
    tuned: np.ndarray,
    picked: Sequence[int],
    meta: Mapping[str, Sequence[Any]],
) -> list[Path]:
    """The Embedding Projector's files: base and tuned vectors (tab-separated floats, no header, a row per string)
    and the metadata (a header row when it has more than one column, as the Projector expects)."""
    paths = []
    for name, x in (("base", base), ("tuned", tuned)):
        path = out / f"{prefix}-{name}-vectors.tsv"
        buf = io.StringIO()
        np.savetxt(buf, x[picked], fmt="%.7g", delimiter="\t")
        _write_text(path, buf.getvalue())
        paths.append(path)
    columns = ["text", *meta]
    lines = ["\t".join(columns)] if len(columns) > 1 else []
    for i in picked:
        lines.append("\t".join([safe_cell(texts[i]), *(safe_cell(_cell(meta[c][i])) for c in meta)]))
    path = out / f"{prefix}-metadata.tsv"
    _write_text(path, "\n".join(lines) + "\n")
    return [*paths, path]


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def write_parquet(
    path: Path,
    texts: Sequence[str],
    base: np.ndarray,
    tuned: np.ndarray,
    picked: Sequence[int],
    meta: Mapping[str, Sequence[Any]],
    coords: Mapping[str, Sequence[float]] | None,
) -> Path:
    """One Parquet file: row, text, the metadata columns, base_embedding and tuned_embedding (list<float32>), and
    with `coords` base_x/base_y/tuned_x/tuned_y plus x, y (the tuned map's, the names embedding-atlas looks for)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def vectors(x: np.ndarray) -> pa.Array:
        flat = pa.array(x[picked].reshape(-1), type=pa.float32())
        return pa.FixedSizeListArray.from_arrays(flat, x.shape[1]).cast(pa.list_(pa.float32()))

    cols: dict[str, Any] = {
        "row": pa.array(picked, type=pa.int32()),
        "text": pa.array([texts[i] for i in picked], type=pa.string()),
    }
    for name, values in meta.items():
        cols[name] = pa.array([values[i] for i in picked])
    cols["base_embedding"] = vectors(base)
    cols["tuned_embedding"] = vectors(tuned)
    if coords:
        for name in COORDS:
            cols[name] = pa.array([float(coords[name][i]) for i in picked], type=pa.float32())
        cols["x"], cols["y"] = cols["tuned_x"], cols["tuned_y"]
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.table(cols), tmp)
    os.replace(tmp, path)
    return path


def write_neighbours(
    path: Path, texts: Sequence[str], base: np.ndarray, tuned: np.ndarray, picked: Sequence[int]
) -> Path:
    """A CSV row per string and rank: row, string, rank, base_neighbour, base_score, tuned_neighbour, tuned_score
    (the top 10 among all the run's strings, the string itself left out)."""
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["row", "string", "rank", "base_neighbour", "base_score", "tuned_neighbour", "tuned_score"])
    if len(texts) >= 2:
        bi, bs = nearest(base, NEIGHBOURS_K, picked)
        ti, ts = nearest(tuned, NEIGHBOURS_K, picked)
        for j, i in enumerate(picked):
            for rank in range(bi.shape[1]):
                w.writerow(
                    [
                        i,
                        texts[i],
                        rank + 1,
                        texts[bi[j, rank]],
                        f"{bs[j, rank]:.4f}",
                        texts[ti[j, rank]],
                        f"{ts[j, rank]:.4f}",
                    ]
                )
    _write_text(path, out.getvalue())
    return path


def zip_files(path: Path, folder: str, files: Sequence[Path], extra: Mapping[str, str]) -> Path:
    """`files` (and `extra` texts) in a zip under `folder/`."""
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in files:
            zf.write(p, f"{folder}/{p.name}")
        for name, text in extra.items():
            zf.writestr(f"{folder}/{name}", text)
    os.replace(tmp, path)
    return path


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8", newline="")
    os.replace(tmp, path)


def download_name(base_model: str, run_id: str, what: str) -> str:
    """A download's file name: `mirror-<base model's short name>-<run id's first 12>-<what>.zip` (what: model or
    index), so a user's downloads of several runs never collide; never a server path."""
    base = hub_base_model(base_model) or str(base_model or "model")
    short = re.sub(r"[^A-Za-z0-9._-]+", "-", re.split(r"[\\/]", base.rstrip("/\\"))[-1]).strip("-._")[:40]
    run = re.sub(r"[^A-Za-z0-9._-]+", "-", str(run_id))[:12].strip("-._")
    return f"mirror-{short or 'model'}-{run or 'run'}-{what}.zip"
