#!/usr/bin/env bash
# Install what the tests need (once) and run the whole suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh requirements-dev.txt
scripts/ensure_chromium.sh || echo "[setup] chromium unavailable: the browser test will skip (it is required on CI)"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m pytest "$@"
