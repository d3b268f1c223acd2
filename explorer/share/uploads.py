"""Files in and out: model zips handed out and taken back.

Reading text uploads is mirror.data's job (`read_file`); this module never parses their content. The quotas on
Gradio's upload route are the web server's (ui.web.quota), in front of the app.
"""

from __future__ import annotations

import logging
import os
import shutil
import zipfile
import zlib
from pathlib import Path

from mirror.data import fmt_size
from mirror.errors import MirrorError

log = logging.getLogger("mirror.app")
MAX_ZIP_RATIO = 20  # weights barely compress (~1.1x); a zip that inflates more holds padding, not a model
MAX_ZIP_ENTRIES = 500
SPOOL_CHUNK = 64 * 1024


def display_name(path: str | Path) -> str:
    """The name a user gave a file (its last part): shown in messages, never used in a path."""
    return Path(str(path)).name or "upload"


def zip_folder(folder: Path, out: Path, arcroot: str, extra_files: dict[str, str] | None = None) -> Path:
    """Zip `folder` under `arcroot/`; weights are stored, not deflated (they barely compress). `extra_files`
    (name: text) are added, in place of the folder's file of that name if it has one."""
    tmp = out.with_name(out.name + ".tmp")
    with zipfile.ZipFile(tmp, "w") as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file() and p.relative_to(folder).as_posix() not in (extra_files or {}):
                stored = p.suffix in (".safetensors", ".bin", ".faiss", ".pt")
                zf.write(
                    p,
                    f"{arcroot}/{p.relative_to(folder).as_posix()}",
                    zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED,
                )
        for name, text in (extra_files or {}).items():
            zf.writestr(f"{arcroot}/{name}", text)
    os.replace(tmp, out)
    return out


def model_folder_in_zip(zip_path: Path) -> str:
    """The folder a model zip unpacks its model to, relative to where it is unpacked ("." for a zip of the
    model's files themselves): where its config.json or modules.json lies."""
    with zipfile.ZipFile(zip_path) as zf:
        tops = [Path(n).parent for n in zf.namelist() if Path(n).name in ("config.json", "modules.json")]
    return min(tops, key=lambda p: len(p.parts)).as_posix() if tops else "."


def model_zip_bytes(zip_path: Path, max_bytes: int) -> int:
    """What an uploaded model zip unpacks to, from its directory (nothing unpacked), or MirrorError for a zip that
    is not one this app takes: too big packed or unpacked, too many files, inflating like a bomb, unsafe paths."""
    name = display_name(zip_path)
    if zip_path.suffix.lower() != ".zip":
        raise MirrorError(f"`{name}`: upload the .zip this app gave you (a zipped sentence-transformers folder)")
    if zip_path.stat().st_size > max_bytes:
        raise MirrorError(
            f"`{name}` is {fmt_size(zip_path.stat().st_size)}; models up to {fmt_size(max_bytes)} are accepted"
        )
    try:
        zf = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError):
        raise MirrorError(f"`{name}` is not a valid zip file") from None
    with zf:
        infos = zf.infolist()
    if len(infos) > MAX_ZIP_ENTRIES:
        raise MirrorError(f"`{name}` holds {len(infos)} files; a model folder has a handful")
    unpacked = sum(i.file_size for i in infos)
    if unpacked > max_bytes:
        raise MirrorError(f"`{name}` unpacks to {fmt_size(unpacked)}; models up to {fmt_size(max_bytes)} are accepted")
    packed = sum(i.compress_size for i in infos)
    if unpacked > MAX_ZIP_RATIO * max(packed, 1) and unpacked > 2**20:
        raise MirrorError(f"`{name}` inflates {unpacked / max(packed, 1):.0f}x; a model zip does not: refusing it")
    for info in infos:
        parts = Path(info.filename).parts
        is_link = (info.external_attr >> 16) & 0o170000 == 0o120000
        if info.filename.startswith(("/", "\\")) or ".." in parts or ":" in info.filename or is_link:
            raise MirrorError(f"`{name}` contains an unsafe path ({info.filename!r}); refusing to unpack it")
    return unpacked


def extract_model_zip(zip_path: Path, dest: Path, max_bytes: int, room: int | None = None) -> Path:
    """Safely unpack an uploaded model zip (no absolute paths, '..', links or zip bombs: `model_zip_bytes`) into
    `dest`, counting the bytes written as they are: a member that writes more than its header said, or the whole
    past `max_bytes` (or the `room` the disk accounts gave it), stops it and leaves nothing. Returns the model
    folder."""
    name = display_name(zip_path)
    model_zip_bytes(zip_path, max_bytes)
    max_bytes = min(max_bytes, max_bytes if room is None else room)
    dest.mkdir(parents=True, exist_ok=True)
    written = 0
    try:
        with zipfile.ZipFile(zip_path) as zf:
            for info in zf.infolist():
                target = dest / info.filename
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as out:
                    member = 0
                    while chunk := src.read(SPOOL_CHUNK):
                        member += len(chunk)
                        written += len(chunk)
                        if member > info.file_size or written > max_bytes:
                            raise MirrorError(
                                f"`{name}` unpacks to more than its directory says; refusing it"
                                if member > info.file_size
                                else f"`{name}` unpacks to more than {fmt_size(max_bytes)}; refusing it"
                            )
                        out.write(chunk)
    except MirrorError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    except (zipfile.BadZipFile, OSError, RuntimeError, EOFError, zlib.error) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        log.warning("model zip %s could not be unpacked: %s", name, exc)  # the server's paths stay in the log
        raise MirrorError(f"`{name}` could not be unpacked (a damaged zip, or the server's disk is full)") from None
    for candidate in [dest, *sorted(p for p in dest.iterdir() if p.is_dir())]:
        if (candidate / "config.json").is_file() or (candidate / "modules.json").is_file():
            return candidate
    raise MirrorError(f"`{name}` does not contain a model folder (no config.json or modules.json at its top)")
