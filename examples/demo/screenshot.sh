#!/usr/bin/env bash
# Starts dagster-webserver on the demo workspace (a throwaway DAGSTER_HOME, a free loopback port), takes a headless
# Chromium screenshot of the asset graph, and stops the server. Usage: examples/demo/screenshot.sh [OUT.png]
# Loading the demo contacts no broker, so the clusters need not run.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:-docs/asset-graph.png}"
VENV=.venv/bin

if ! command -v chromium >/dev/null 2>&1; then
  echo "screenshot: installing chromium from Debian's packages"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

export DAGSTER_HOME="$WORK/dagster-home"
export DYNAMIC_KAFKA_CONFIG="${DYNAMIC_KAFKA_CONFIG:-examples/demo/dynamic_kafka.yaml}"
mkdir -p "$DAGSTER_HOME" "$(dirname "$OUT")"
cp examples/demo/dagster.yaml "$DAGSTER_HOME/dagster.yaml"
# Mark the UI's first-visit "join the community" dialog as seen, so it does not cover the graph.
mkdir -p "$DAGSTER_HOME/.nux" && echo "seen: 1" >"$DAGSTER_HOME/.nux/nux.yaml"
PORT="$($VENV/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

$VENV/dagster-webserver -w workspace.yaml -h 127.0.0.1 -p "$PORT" >"$WORK/webserver.log" 2>&1 &
SERVER_PID=$!

# Wait (at most 120 s) until the code location is loaded and lists its assets.
if ! $VENV/python - "$PORT" <<'PY'
import json, sys, time, urllib.request

url = f"http://127.0.0.1:{sys.argv[1]}/graphql"
query = '{ assetNodes { id } workspaceOrError { ... on Workspace { locationEntries { locationOrLoadError { __typename } } } } }'
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    try:
        request = urllib.request.Request(url, json.dumps({"query": query}).encode(), {"Content-Type": "application/json"})
        data = json.load(urllib.request.urlopen(request, timeout=5))["data"]
        entries = data["workspaceOrError"]["locationEntries"]
        if any((e["locationOrLoadError"] or {}).get("__typename") == "PythonError" for e in entries):
            sys.exit("screenshot: the code location failed to load; see the webserver log")
        if data["assetNodes"]:
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.5)
sys.exit("screenshot: the webserver did not list the assets within 120 s")
PY
then
  cat "$WORK/webserver.log" >&2
  exit 1
fi

chromium --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
  --disable-sync --no-first-run --hide-scrollbars --user-data-dir="$WORK/chromium" \
  --window-size=1600,900 --virtual-time-budget=20000 \
  --screenshot="$OUT" "http://127.0.0.1:$PORT/asset-groups" 2>"$WORK/chromium.log" || {
  cat "$WORK/chromium.log" >&2
  exit 1
}
echo "screenshot: wrote $OUT"
