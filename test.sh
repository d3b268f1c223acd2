#!/usr/bin/env bash
# Install what the tests need (once) and run the whole suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh requirements-dev.txt
scripts/ensure_chromium.sh || echo "[setup] chromium unavailable: the browser test will skip (it is required on CI)"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# One test process per core (pytest-xdist, at most 4), each file on one process (its servers start once), in the
# order tests/conftest.py gives (the longest files first; xdist would sort them by their number of tests); extra
# arguments come after, so `./test.sh -n 0 tests/test_index.py` runs in this process alone.
workers=$(nproc 2>/dev/null || echo 1)
workers=$((workers > 4 ? 4 : workers))
exec .venv/bin/python -m pytest -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
