#!/usr/bin/env bash
# Make sure Debian's chromium is present for the browser test (Playwright cannot download a browser here).
# On CI (CI=true) it installs the package when missing; elsewhere it only reports.
set -u
for exe in /usr/bin/chromium /usr/bin/chromium-browser; do
  [ -x "$exe" ] && exit 0
done
if [ "${CI:-}" = "true" ] && command -v apt-get >/dev/null 2>&1; then
  echo "[setup] installing Debian chromium for the browser test"
  sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq && $sudo_cmd apt-get install -y -qq chromium >/dev/null && exit 0
fi
exit 1
