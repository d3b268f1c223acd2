"""The Hugging Face Hub, both ways: push a tuned model (with its card) to a user's repository, and read one column of
a dataset's data files as strings to tune on. Through huggingface_hub's HfApi and its HTTP session, at the endpoint
HF_ENDPOINT names (read at each call, so tests can point it at a fake); the caller checks MIRROR_ALLOW_HUB.

Every failure is a MirrorError a user can act on: a bad repository or dataset id, an empty or refused token, a
folder or file over this server's limits, the Hub unreachable. Messages never carry the token or a server path.
Datasets are read anonymously (never with a token the server may hold), only public ones.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from explorer.resources.accounts import disk_usage
from explorer.share.card import CARD_FILE, write_card
from mirror.config import MIRROR_CONFIG_FILE
from mirror.data import fmt_size, read_file
from mirror.errors import MirrorError
from mirror.names import HUB_ID

log = logging.getLogger("mirror.app")
DEFAULT_ENDPOINT = "https://huggingface.co"
DATA_SUFFIXES = (".parquet", ".csv", ".tsv", ".jsonl", ".json", ".txt")
TIMEOUT_S = 30.0
MAX_INFLATE = 5  # a Parquet column's text may be this many times the download limit (text compresses ~2-5x)
USAGE_PLACEHOLDER = 'SentenceTransformer("path/to/this/folder")'


def endpoint() -> str:
    """The Hub's address: HF_ENDPOINT when set (a mirror, a test's fake), else huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _api():
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint())


def check_repo_id(repo_id: Any, what: str = "repository") -> str:
    """`name` or `owner/name` as the Hub spells them, or a MirrorError saying so."""
    repo = str(repo_id or "").strip()
    if not repo:
        raise MirrorError(f"name the {what}, e.g. your-name/my-mirror-model")
    if len(repo) > 96 * 2 + 1 or not HUB_ID.match(repo) or ".." in repo or repo.endswith((".", "-")):
        shown = repo if len(repo) <= 80 else repo[:80] + "…"
        raise MirrorError(f"`{shown}` is not a valid Hub {what} id (letters, digits, `-`, `_`, `.`, as owner/name)")
    return repo


def check_token(token: Any) -> str:
    token = str(token or "").strip()
    if not token:
        raise MirrorError("paste a Hugging Face access token with write access (huggingface.co/settings/tokens)")
    if len(token) > 500 or re.search(r"\s", token) or not token.isprintable():
        raise MirrorError("that does not look like a Hugging Face access token (hf_...)")
    return token


@contextlib.contextmanager
def hub_errors(what: str, token: str = "") -> Iterator[None]:
    """Translate what huggingface_hub raises into a MirrorError: unreachable, refused token, not found, ..."""
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    def clean(text: str) -> str:
        text = text.replace(token, "***") if token else text
        return re.sub(r"(?<![\w.:/~-])/[^\s'\"`,;()\[\]]+", "…", text)[:300]  # no server paths

    try:
        yield
    except MirrorError:
        raise
    except OfflineModeIsEnabled:
        raise MirrorError("could not reach the Hugging Face Hub: this server has no internet access") from None
    except httpx2.TimeoutException:
        raise MirrorError("could not reach the Hugging Face Hub: the connection timed out") from None
    except (httpx2.TransportError, ConnectionError) as exc:
        reason = "the connection was refused" if isinstance(exc, httpx2.ConnectError) else "a network error"
        log.warning("hub %s: %s", what, clean(repr(exc)))
        raise MirrorError(f"could not reach the Hugging Face Hub: {reason} ({endpoint()})") from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else 0
        server = clean(str(exc.server_message or "").strip())
        if status == 401:
            raise MirrorError(
                f"the Hugging Face Hub refused the token ({status}): check it, and that it has write access"
            ) from None
        if status == 403:
            raise MirrorError(
                f"the Hugging Face Hub refused {what} ({status}): the token may be read-only or not allowed here"
            ) from None
        if status == 404:
            raise MirrorError(
                f"{what} was not found on the Hugging Face Hub (404), or it is private or gated"
            ) from None
        raise MirrorError(
            f"the Hugging Face Hub answered {status} to {what}" + (f": {server}" if server else "")
        ) from None
    except RuntimeError as exc:  # huggingface_hub wraps a failed LFS/Xet transfer: "Error while uploading 'x'"
        log.warning("hub %s: %s (%s)", what, clean(str(exc)), clean(repr(exc.__cause__)))
        raise MirrorError(f"the upload to the Hugging Face Hub failed: {clean(str(exc))}") from None
    except ValueError as exc:  # e.g. the Hub's validate-yaml refused the card
        raise MirrorError(f"the Hugging Face Hub refused {what}: {clean(str(exc))}") from None


# ---------------------------------------------------------------- push a tuned model


def push_model(
    model_folder: str | Path, repo_id: str, token: str, *, private: bool = True, max_bytes: int | None = None
) -> str:
    """Push the tuned model folder to the Hub repository `repo_id` (made, `private` or not, when it does not exist;
    an existing one keeps its visibility and gets the files over its own) in one commit, with its model card as
    README.md. Returns the repository's URL."""
    from huggingface_hub import CommitOperationAdd

    folder = Path(model_folder)
    repo_id, token = check_repo_id(repo_id), check_token(token)
    if not (folder / "modules.json").is_file() or not (folder / MIRROR_CONFIG_FILE).is_file():
        raise MirrorError("there is no tuned model to push: tune one in tab ① (or open one of your runs) first")
    size = disk_usage(folder)
    if max_bytes is not None and size > max_bytes:
        raise MirrorError(f"the model is {fmt_size(size)}; this server pushes models up to {fmt_size(max_bytes)}")
    card = folder / CARD_FILE
    if not card.is_file():
        write_card(folder)
    text = card.read_text(encoding="utf-8")
    operations = [
        CommitOperationAdd(CARD_FILE, text.replace(USAGE_PLACEHOLDER, f'SentenceTransformer("{repo_id}")').encode())
    ]
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if (
            p.is_file()
            and not p.is_symlink()
            and rel != CARD_FILE
            and not any(s.startswith(".") for s in p.parts[len(folder.parts) :])
        ):
            operations.append(CommitOperationAdd(rel, str(p)))
    api = _api()
    with hub_errors(f"the repository {repo_id}", token):
        url = api.create_repo(repo_id, token=token, private=bool(private), exist_ok=True)
        api.create_commit(
            url.repo_id,
            operations,
            commit_message="Upload a mirror-tuned model (Mirror Explorer)",
            token=token,
        )
    return f"{endpoint()}/{url.repo_id}"


# ---------------------------------------------------------------- read a dataset column


def load_hub_dataset(
    dataset: str,
    column: str,
    split: str | None = None,
    *,
    max_rows: int,
    max_bytes: int,
    revision: str | None = None,
) -> tuple[list[str], list[str]]:
    """The strings of `column` in a public Hub dataset's data files (Parquet, CSV/TSV, JSON lines, text) of `split`
    (default: train, else all of them), up to `max_rows`; each file's size is checked before it is downloaded
    (together at most `max_bytes`). Returns (strings, notes for the user)."""
    dataset = check_repo_id(dataset, "dataset")
    column = str(column or "").strip()
    if not column:
        raise MirrorError("name the dataset's text column (e.g. text or sentence)")
    split = str(split or "").strip() or None
    api = _api()
    with hub_errors(f"the dataset {dataset}"):
        info = api.dataset_info(dataset, revision=revision, files_metadata=True, token=False, timeout=TIMEOUT_S)
    if info.private or info.gated:
        raise MirrorError(f"the dataset {dataset} is private or gated; this server reads public datasets only")
    files = [(s.rfilename, s.size) for s in info.siblings or [] if s.rfilename.lower().endswith(DATA_SUFFIXES)]
    files = [f for f in files if PurePosixPath(f[0]).name.lower() not in ("readme.md", "requirements.txt")]
    picked = pick_split(files, split, dataset)
    notes: list[str] = []
    first_size = picked[0][1]
    if first_size is not None and first_size > max_bytes:
        raise MirrorError(
            f"{dataset}: its first data file ({PurePosixPath(picked[0][0]).name}) is {fmt_size(first_size)}; this "
            f"server reads up to {fmt_size(max_bytes)} (MIRROR_MAX_UPLOAD_MB)"
        )
    raw: list[str] = []
    budget = max_bytes
    tmp = Path(tempfile.mkdtemp(prefix="mirror-hub-"))
    try:
        for n, (name, size) in enumerate(picked):
            if len(raw) >= max_rows:
                notes.append(f"read {n} of {len(picked)} data files: {max_rows:,} rows are enough")
                break
            if size is not None and size > budget:
                notes.append(f"read {n} of {len(picked)} data files (this server reads up to {fmt_size(max_bytes)})")
                break
            local = download(dataset, name, info.sha or revision or "main", tmp / f"{n}{_suffix(name)}", budget)
            budget -= local.stat().st_size
            raw += read_column(
                local, column, name, max_bytes, max_rows - len(raw), MAX_INFLATE * max_bytes - sum(map(len, raw))
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if len(raw) > max_rows:
        notes.append(f"kept the first {max_rows:,} rows of {dataset}")
        raw = raw[:max_rows]
    return raw, notes


def pick_split(files: list[tuple[str, int | None]], split: str | None, dataset: str) -> list[tuple[str, int | None]]:
    """The data files of `split`: those with the split's name as a part of their path (train-00000-of-00001.parquet,
    data/train.csv, train/0.jsonl); without a split, the train files, else all."""
    if not files:
        raise MirrorError(f"{dataset} has no data files this app reads ({', '.join(DATA_SUFFIXES)})")

    def parts(path: str) -> set[str]:
        return set(re.split(r"[/_.\-]", path.lower()))

    want = (split or "train").lower()
    found = sorted(f for f in files if want in parts(f[0]))
    if found:
        return found
    if split is None:
        return sorted(files)
    known = sorted({p for f in files for p in parts(f[0])} & {"train", "test", "validation", "valid", "dev", "eval"})
    raise MirrorError(
        f"{dataset} has no data files for the split {split!r}" + (f"; its splits: {', '.join(known)}" if known else "")
    )


def _suffix(name: str) -> str:
    suffix = PurePosixPath(name).suffix.lower()
    return ".jsonl" if suffix == ".json" else suffix  # the Hub's .json data files are JSON lines, most often


def download(dataset: str, name: str, revision: str, dest: Path, max_bytes: int) -> Path:
    """One file of the dataset into `dest`, anonymously, stopping past `max_bytes` (whatever its listing said)."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session

    url = hf_hub_url(dataset, name, repo_type="dataset", revision=revision, endpoint=endpoint())
    with hub_errors(f"the file {name} of {dataset}"):
        with get_session().stream(
            "GET", url, headers=build_hf_headers(token=False), follow_redirects=True, timeout=TIMEOUT_S
        ) as r:
            from huggingface_hub.utils import hf_raise_for_status

            hf_raise_for_status(r)
            got = 0
            with open(dest, "wb") as f:
                for chunk in r.iter_bytes():
                    got += len(chunk)
                    if got > max_bytes:
                        raise MirrorError(
                            f"{dataset}: {PurePosixPath(name).name} is over {fmt_size(max_bytes)}, this server's limit"
                        )
                    f.write(chunk)
    return dest


def read_column(
    path: Path, column: str, name: str, max_bytes: int, max_rows: int, max_text: int | None = None
) -> list[str]:
    """The strings of `column` in one downloaded data file (named `name` in messages); a Parquet file is read a
    few rows at a time up to about `max_rows`, and refused when its text passes `max_text` characters (default
    MAX_INFLATE x max_bytes: a file that compresses like a bomb)."""
    shown = PurePosixPath(name).name
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(path)
        except Exception:  # pyarrow raises several kinds for a broken file
            raise MirrorError(f"{shown} is not a readable Parquet file") from None
        names = pf.schema_arrow.names
        if column not in names:
            raise MirrorError(f"{shown} has no column {column!r}; its columns: {', '.join(names[:30])}")
        out: list[str] = []
        budget = MAX_INFLATE * max_bytes if max_text is None else max_text
        for batch in pf.iter_batches(batch_size=256, columns=[column]):  # decoded a little at a time
            values = [v for v in batch.column(0).to_pylist() if isinstance(v, str)]
            budget -= sum(len(v) for v in values)
            if budget < 0:
                raise MirrorError(
                    f"{shown}: its column {column!r} holds over {fmt_size(MAX_INFLATE * max_bytes)} of text (with "
                    "the files before it); "
                    f"this server reads up to {fmt_size(max_bytes)} files"
                )
            out += values
            if len(out) >= max_rows:
                break
        return out
    raw = read_file(path, None if path.suffix == ".txt" else column, max_bytes, name=shown).strings
    return raw
