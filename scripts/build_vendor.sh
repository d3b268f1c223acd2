#!/usr/bin/env bash
# Rebuild ui/vendor/regl-scatterplot.min.js and its licences from the npm registry's packages, byte for byte:
# the versions (regl-scatterplot 1.16.0, its dependencies, esbuild) are pinned by scripts/vendor/package-lock.json.
#   scripts/build_vendor.sh           rebuild in place (needs node and npm)
#   scripts/build_vendor.sh --check   rebuild into a temporary folder and compare with the committed files
set -euo pipefail
cd "$(dirname "$0")/vendor"
npm ci --no-audit --no-fund --loglevel=error
if [ "${1:-}" = "--check" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  node build.mjs "$tmp"
  for f in regl-scatterplot.min.js regl-scatterplot.LICENSES.txt; do
    cmp "$tmp/$f" "../../ui/vendor/$f" && echo "same bytes: ui/vendor/$f"
  done
else
  node build.mjs
fi
