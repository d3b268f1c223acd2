"""The saved index folder: its files and format version, the metadata (meta.json) describing the index and its
encoder, an atomic write and a checked read."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import faiss
import numpy as np

from index.calibrate import TARGET_RECALL
from index.options import IndexOptions
from index.rows import Rows
from mirror.config import BUNDLED_MODEL
from mirror.errors import MirrorError
from mirror.folders import check_out_dir
from mirror.names import looks_local

if TYPE_CHECKING:
    from mirror.encoder import Encoder

FORMAT = 1
INDEX_FILE, TEXTS_FILE, META_FILE = "index.faiss", "texts.json", "meta.json"
VECTORS_FILE = "vectors.f16.npy"  # ivfpq: the float16 rows re-ranking reads, memory-mapped after save/load


def check_target(folder: str | Path, flag: str | None = None) -> Path:
    """The absolute save path; an existing folder is only replaced if it is an index (or empty). `flag`: the command
    line's option that named it (its messages say it)."""
    return check_out_dir(folder, (META_FILE,), "an index folder", flag).resolve()


def new_meta(dim: int, encoder: Encoder | None, options: IndexOptions) -> dict[str, Any]:
    """meta.json of a new, still empty index of `dim`-d rows built with `options`."""
    created = now()
    return {
        "format": FORMAT,
        "created": created,
        "updated": created,
        "count": 0,
        "dim": int(dim),
        "metric": "inner product of L2-normalised vectors (cosine similarity)",
        "encoder": _encoder_meta(encoder) if encoder is not None else None,
        # "requested": the caller's nlist/nprobe, reused if an auto index later grows from flat to IVF
        "index": {
            "auto": options.kind == "auto",
            "exact_max": int(options.exact_max),
            "target_recall": TARGET_RECALL,
            "requested": options.requested(),
        },
        "versions": _versions(encoder is not None),
    }


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_folder(
    folder: str | Path, cpu: faiss.Index, texts: list[str], meta: dict[str, Any], rows: Rows | None
) -> Path:
    """Write index.faiss, texts.json, meta.json (and an ivfpq index's float16 rows) to `folder` atomically."""
    from mirror.folders import replace_dir

    out = check_target(folder)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        tmp.chmod(0o777 & ~_umask())  # mkdtemp makes it private; the saved folder should not be
        faiss.write_index(cpu, str(tmp / INDEX_FILE))
        if rows is not None:
            rows.write(tmp / VECTORS_FILE)
        (tmp / TEXTS_FILE).write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
        (tmp / META_FILE).write_text(json.dumps(located(meta, out), indent=2), encoding="utf-8")
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def read_folder(folder: Path) -> tuple[faiss.Index, list[str], dict[str, Any], Rows | None]:
    """The CPU index, texts, metadata and (ivfpq) memory-mapped float16 rows of a saved folder, checked."""
    meta_path = folder / META_FILE
    if not meta_path.is_file():
        raise MirrorError(f"{folder}: not an index folder (no {META_FILE}); build one with `python -m index build`")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        texts = json.loads((folder / TEXTS_FILE).read_text(encoding="utf-8"))
        cpu = faiss.read_index(str(folder / INDEX_FILE))
    except (OSError, ValueError, RuntimeError) as exc:
        raise MirrorError(f"{folder}: the index folder is damaged ({type(exc).__name__}: {exc}); rebuild it") from None
    if meta.get("format") != FORMAT:
        raise MirrorError(
            f"{folder}: index format {meta.get('format')!r} is not supported (expected {FORMAT}); rebuild it"
        )
    if not (cpu.ntotal == len(texts) == meta.get("count")) or cpu.d != meta.get("dim"):
        raise MirrorError(
            f"{folder}: the index folder is inconsistent ({cpu.ntotal} vectors of dim {cpu.d}, {len(texts)} texts, "
            f"metadata says {meta.get('count')} of dim {meta.get('dim')}); rebuild it"
        )
    rows = None
    if (meta.get("index") or {}).get("type") == "ivfpq":
        rows = read_float16_rows(folder, cpu)
    return cpu, texts, meta, rows


def stored_encoder(meta: dict[str, Any], folder: Path, encoder: Encoder | None, device: str) -> Encoder | None:
    """The encoder to search a saved index with: `encoder`, or the one its metadata names, loaded; either must be
    the encoder it was built with (same fingerprint)."""
    stored = meta.get("encoder")
    if stored is None:
        if encoder is not None and encoder.dim != meta["dim"]:
            raise MirrorError(
                f"{folder}: the index holds {meta['dim']}-d vectors but the encoder makes {encoder.dim}-d ones"
            )
        return encoder
    if encoder is None:
        encoder = _load_stored_encoder(stored, folder, device)
    fingerprint = encoder.fingerprint()
    if fingerprint != stored["fingerprint"] or encoder.dim != meta["dim"]:
        raise MirrorError(
            f"{folder}: this index was built with the encoder {stored['source']!r} (fingerprint "
            f"{stored['fingerprint']}, {meta['dim']}-d) but the encoder given is {encoder.source!r} (fingerprint "
            f"{fingerprint}, {encoder.dim}-d). Their embeddings are not comparable: load it with the encoder it "
            "was built with, or rebuild the index with this one."
        )
    return encoder


def read_float16_rows(folder: Path, cpu: faiss.Index) -> Rows:
    """An ivfpq folder's float16 re-ranking rows, memory-mapped, checked against its index `cpu`."""
    try:
        rows = np.load(folder / VECTORS_FILE, mmap_mode="r")
    except (OSError, ValueError) as exc:
        raise MirrorError(
            f"{folder}: the index folder is damaged ({VECTORS_FILE}: {type(exc).__name__}: {exc}); rebuild it"
        ) from None
    if rows.shape != (cpu.ntotal, cpu.d) or rows.dtype != np.float16:
        raise MirrorError(
            f"{folder}: the index folder is inconsistent ({VECTORS_FILE} holds {rows.dtype} rows of shape "
            f"{rows.shape}, the index {cpu.ntotal} of dim {cpu.d}); rebuild it"
        )
    return Rows([rows])


def _encoder_meta(encoder: Encoder) -> dict[str, Any]:
    """The encoder's name, where to reload it from and what it must hash to.

    `source` is its real name ("bundled", a hub id, a folder); `absolute` a local folder's absolute path, which
    `located` turns into `path` relative to the index folder when the index is saved. An encoder whose weights
    changed since it was loaded (tuned or blended, not saved) has no name to reload it from: `path` is None.
    """
    name = encoder.name
    out: dict[str, Any] = {"source": str(name if name is not None else f"{encoder.source} (changed, not saved)")}
    if name is None:
        out["path"] = None
    else:
        path = Path(name).expanduser()
        if name != BUNDLED_MODEL and looks_local(name) and path.is_dir():
            out["absolute"] = str(path.resolve())
        out["path"] = name
    return out | {
        "fingerprint": encoder.fingerprint(),
        "pooling": encoder.pooling,
        "dim": encoder.dim,
        "max_seq_length": encoder.max_seq_length,
    }


def located(meta: dict[str, Any], folder: Path) -> dict[str, Any]:
    """`meta` as saved in the index `folder`: a local encoder's `path` relative to it (`../model`), so the two
    folders can move together; `absolute` stays as the fallback on this machine."""
    stored = meta.get("encoder")
    if not stored or not stored.get("absolute"):
        return meta
    return {**meta, "encoder": {**stored, "path": relative_path(Path(stored["absolute"]), folder)}}


def with_encoder_at(folder: Path, path: str) -> str:
    """The meta.json text of the index `folder` with its encoder to be loaded from `path`, relative to the index
    folder (for a copy shipped beside the model, as in the app's zips: `../mirror-model`); no path of this machine."""
    meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    if not _is_relative(path):
        raise MirrorError(f"{path!r}: give the encoder's path relative to the index folder (./… or ../…)")
    stored = meta.get("encoder") or {}
    if not stored:
        raise MirrorError(f"{folder}: this index has no encoder to point at {path!r}")
    encoder = {k: v for k, v in stored.items() if k != "absolute"}
    if stored.get("absolute"):  # a local folder: named by where the copy finds it, not by this machine's path
        encoder["source"] = path
    meta["encoder"] = {**encoder, "path": path}
    return json.dumps(meta, indent=2)


def relative_path(target: Path, folder: Path) -> str:
    """`target` relative to `folder`, starting with ./ or ../ so it never reads as a hub id."""
    rel = Path(os.path.relpath(target.resolve(), folder.resolve())).as_posix()
    return rel if rel.startswith("..") else f"./{rel}"


def anchored(meta: dict[str, Any], folder: Path) -> dict[str, Any]:
    """`meta` read from the index `folder` with a relative encoder path that resolves there also recorded as
    `absolute`, so saving the index elsewhere still finds the encoder."""
    stored = meta.get("encoder")
    path = stored.get("path") if stored else None
    if not isinstance(path, str) or not _is_relative(path) or not Path(_against(folder, path)).is_dir():
        return meta
    return {**meta, "encoder": {**stored, "absolute": _against(folder, path)}}


def _against(folder: Path, path: str) -> str:
    """The absolute form of `path`, relative to `folder`."""
    return os.path.normpath(folder.absolute() / path)


def _is_relative(path: str) -> bool:
    return path in (".", "..") or path.startswith(("./", "../"))


def _load_stored_encoder(stored: dict[str, Any], folder: Path, device: str) -> Encoder:
    """The encoder the metadata names: `path` (relative to the index folder when it starts with ./ or ../, else
    a name or an absolute folder), then `absolute` where the relative one is not there."""
    from mirror.encoder import load_encoder

    path = stored.get("path")
    if not path:
        raise MirrorError(
            f"{folder}: this index was built with an encoder that was never saved ({stored.get('source')!r}); "
            "pass that encoder explicitly (--encoder on the command line)"
        )
    candidates = [_against(folder, path)] if _is_relative(path) else [path]
    if stored.get("absolute") and stored["absolute"] not in candidates:
        candidates.append(stored["absolute"])
    found = next((c for c in candidates if Path(c).is_dir()), candidates[0])
    try:
        return load_encoder(found, pooling=stored.get("pooling", "auto"), device=device)
    except MirrorError as exc:
        tried = " or ".join(repr(c) for c in dict.fromkeys([path, *candidates[1:]]))
        raise MirrorError(
            f"{folder}: could not load the encoder this index was built with ({tried}): {exc}. "
            "Pass the encoder explicitly (--encoder on the command line)."
        ) from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _versions(with_encoder: bool) -> dict[str, str]:
    from importlib import metadata

    import mirror

    out = {
        "python": sys.version.split()[0],
        "faiss": faiss.__version__,
        "numpy": np.__version__,
        "mirror": mirror.__version__,
    }
    for package in ("torch", "transformers") if with_encoder else ():
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:  # pragma: no cover
            pass
    return out
