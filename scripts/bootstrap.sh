#!/usr/bin/env bash
# Create .venv in the repo (once) and install a requirements file into it when it changed.
# Usage: scripts/bootstrap.sh requirements.txt|requirements-dev.txt
set -euo pipefail
cd "$(dirname "$0")/.."
req=${1:-requirements.txt}
py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($py --version)"
  "$py" -m venv .venv
fi
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')  # its site-packages
stamp=.venv/.installed-$(basename "$req" .txt)
want=$(cat requirements*.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[setup] installing $req into .venv (first run takes a few minutes)"
  # A first install puts ~3.7 GB in .venv on Linux x86_64 (torch, and faiss-gpu's CUDA runtime wheels), ~1.5 GB
  # elsewhere; pip's own "No space left on device" comes minutes in, after a half-made .venv. Said first instead.
  if [ ! -d "$site/torch" ]; then
    need_mb=1800
    [ "$(uname -sm)" = "Linux x86_64" ] && need_mb=4500
    free_mb=$(df -Pk .venv | awk 'NR == 2 { print int($4 / 1024) }')
    if [ -n "$free_mb" ] && [ "$free_mb" -lt "$need_mb" ]; then
      echo "[setup] the first install needs about $need_mb MB free on the disk of $PWD/.venv; $free_mb MB are free." >&2
      echo "[setup] free some space (or clone elsewhere) and run this command again." >&2
      exit 1
    fi
  fi
  pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-compile)
  # numpy and umap-learn first (as requirements.txt pins them): the maps' numba kernels then compile and are cached
  # (scripts/warm_maps.py, ~35 s of one core) while pip installs the rest, which keeps to one core; not in the
  # server's first map, or in every test process that lays one out.
  "${pip[@]}" $(grep -E '^(numpy|scipy|umap-learn)[=<>!~ ]' requirements.txt | cut -d'#' -f1)
  .venv/bin/python scripts/warm_maps.py &
  warm=$!
  "${pip[@]}" -r "$req"
  # Byte-compiled here on every core (pip compiles its ~15,000 modules on one: ~65 s of a ~2 min install on 2
  # cores, 46 s this way). Not left to the first import: where PYTHONDONTWRITEBYTECODE is set (these machines) no
  # import writes its .pyc, and every process would compile torch, transformers and gradio again. A file that does
  # not compile (a test written for another Python) is skipped, as pip skips it (compileall then exits 1).
  .venv/bin/python -m compileall -q -j 0 "$site" >/dev/null 2>&1 || true
  compgen -G "$site/torch/__pycache__/__init__.*.pyc" >/dev/null ||
    echo "[setup] byte-compiling failed: the app runs, but every process compiles its modules again" >&2
  wait "$warm" || true  # a failure is said there: the first map compiles the kernels
  echo "$want" > "$stamp"
fi
# The project's packages (mirror, index, explorer) importable by .venv/bin/python from any folder: `python -m index
# query mirror-index "cat"` beside an unzipped download works, not only from here.
[ "$(cat "$site/mirror-explorer.pth" 2>/dev/null)" = "$PWD" ] || echo "$PWD" > "$site/mirror-explorer.pth"
