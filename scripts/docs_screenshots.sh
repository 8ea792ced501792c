#!/usr/bin/env bash
# Screenshots of the built documentation site in headless Chromium (Debian: `apt-get install -y chromium`):
# the landing page, the env page, one API page and the tutorials index, as PNGs under build/screenshots/ (not committed).
# Usage: make docs && scripts/docs_screenshots.sh [OUT_DIR]; then look at the PNGs.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/screenshots}
PORT=${PORT:-8765}
PYTHON=${PYTHON:-.venv/bin/python}
BROWSER=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
[ -n "$BROWSER" ] || { echo "docs_screenshots: no chromium on PATH (apt-get install -y chromium)" >&2; exit 2; }
[ -f site/index.html ] || { echo "docs_screenshots: no site/ yet: run 'make docs' first" >&2; exit 2; }
mkdir -p "$OUT"
"$PYTHON" -m http.server "$PORT" --bind 127.0.0.1 --directory site >/dev/null 2>&1 &
SERVER=$!
PROFILE=$(mktemp -d)
trap 'kill "$SERVER" 2>/dev/null || true; rm -rf "$PROFILE"' EXIT
for _ in $(seq 50); do
  "$PYTHON" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/')" 2>/dev/null && break
  sleep 0.1
done
shot() {  # shot NAME PATH [HEIGHT]
  "$BROWSER" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --hide-scrollbars --user-data-dir="$PROFILE" \
    --virtual-time-budget=3000 --window-size=1280,"${3:-900}" --screenshot="$OUT/$1.png" \
    "http://127.0.0.1:$PORT/$2" 2>/dev/null
  echo "docs_screenshots: $OUT/$1.png  <- /$2"
}
# (a URL with a #fragment screenshots blank in headless Chromium: pages are shot from their top)
shot landing ""
shot env "env/"
shot api "api/mara_agents/" 1400
shot tutorials "tutorials/" 1400
