#!/usr/bin/env bash
# Install what the app needs (once) and start it on http://127.0.0.1:7860 with the bundled offline model.
# Extra arguments go to app.py (e.g. ./run.sh --port 8080 --host 0.0.0.0).
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh requirements.txt
exec .venv/bin/python app.py "$@"
