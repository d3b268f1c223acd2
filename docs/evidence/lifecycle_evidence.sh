#!/usr/bin/env bash
# The figures of docs/evidence/lifecycle-evidence.md (issue 51), from the repository root.
set -uo pipefail
shopt -s globstar
echo "## self.app. reach-ins (grep -c 'self\.app\.' explorer/**/*.py)"
grep -c "self\.app\." explorer/**/*.py | grep -v ":0$" || true
echo "total lines: $(cat explorer/**/*.py | grep -c 'self\.app\.'); components taking app: $(grep -c 'def __init__(self, app' explorer/**/*.py | awk -F: '{s+=$2} END {print s}')"
echo
echo "## homes of live-run state (occurrences in explorer/, ui/, app.py)"
for pat in 'in_progress' '\.checking\b' 'checks_pending' 'sessions\.running|self\.running\b' '\.active\b' '\.served\b' '\.started\b' '\.finished\b' 'last_seen' 'request_stop|stop\.set\(|stop\.is_set\(' 'STOP_FILE|write_stop|read_stop' 'place\.running|place\.gone|\.gone\b' 'deadline|last_pull' '\.closed\b' '"active"'; do
  n=$(grep -rhoE "$pat" explorer ui app.py --include=*.py | wc -l)
  files=$(grep -rlE "$pat" explorer ui app.py --include=*.py | tr '\n' ' ')
  printf '%-45s %4d  %s\n' "$pat" "$n" "$files"
done
echo
echo "## file sizes (wc -l mirror/*.py index/*.py explorer/**/*.py | sort -n | tail -12)"
wc -l mirror/*.py index/*.py explorer/**/*.py | sort -n | tail -12
echo
echo "## duplicates --most 40"
duplicates --most 40
