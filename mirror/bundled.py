"""Where the data that comes with Mirror Explorer is: the general checks' sets (`gold/`), the general text a run may
mix into its batches (`general/`), and the examples the app offers. One place names that folder, for the engine and
the app alike: MIRROR_DATA_DIR when set (the engine installed apart from this repository), else the repository's
`examples/` beside the mirror package.
"""

from __future__ import annotations

import os
from pathlib import Path


def data_dir(env: dict[str, str] | None = None) -> Path:
    """The bundled data's folder: MIRROR_DATA_DIR, or the repository's examples/."""
    raw = (os.environ if env is None else env).get("MIRROR_DATA_DIR", "").strip()
    return Path(raw).expanduser() if raw else Path(__file__).resolve().parent.parent / "examples"


DATA_DIR = data_dir()


def bundled(*parts: str) -> Path:
    """A file or folder of the bundled data (`bundled("gold")`, `bundled("general", "wiki-words.txt")`)."""
    return DATA_DIR.joinpath(*parts)
