#!/usr/bin/env bash
# The README's UI screenshots, from the demo's own Dagster instance: starts dagster-webserver on .dagster-home (the
# runs `make demo` made; the demo runs first when there are none) with the demo's project, on a free loopback port,
# has headless Chromium shoot the stream -> table lineage, the sink's plotted metadata and the backfill's partitions
# (examples/demo/screenshots.py), and stops the server. Usage: examples/demo/screenshot.sh [OUT_DIR]
# Loading the demo contacts no broker, so the clusters need not run.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:-docs}"
VENV=.venv/bin

export DAGSTER_HOME="$PWD/.dagster-home"
export DYNAMIC_KAFKA_CONFIG="$PWD/.demo/dynamic_kafka.yaml"
if ! [ -f "$DYNAMIC_KAFKA_CONFIG" ] || ! compgen -G "$DAGSTER_HOME/history/runs/*.db" >/dev/null; then
  echo "screenshot: no demo runs in $DAGSTER_HOME yet; running the demo first"
  $VENV/python examples/demo/demo.py
fi

WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then
    # The webserver's code server (its child) outlives a stopped webserver, so it is stopped first.
    pkill -TERM -P "$SERVER_PID" 2>/dev/null || true
    kill "$SERVER_PID" 2>/dev/null || true
    # A webserver still loading its code location can outlast SIGTERM: 10 s, then SIGKILL.
    for _ in $(seq 20); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$OUT"
# Mark the UI's first-visit "join the community" dialog as seen, so it covers none of the pages.
mkdir -p "$DAGSTER_HOME/.nux" && echo "seen: 1" >"$DAGSTER_HOME/.nux/nux.yaml"
PORT="$($VENV/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

$VENV/dagster-webserver -w workspace.yaml -h 127.0.0.1 -p "$PORT" >"$WORK/webserver.log" 2>&1 &
SERVER_PID=$!

# Wait (at most 300 s: a loaded machine took over 120 s) until the code location is loaded and lists its assets.
if ! $VENV/python - "$PORT" <<'PY'
import json, sys, time, urllib.request

url = f"http://127.0.0.1:{sys.argv[1]}/graphql"
query = '{ assetNodes { id } workspaceOrError { ... on Workspace { locationEntries { locationOrLoadError { __typename } } } } }'
deadline = time.monotonic() + 300
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
sys.exit("screenshot: the webserver did not list the assets within 300 s")
PY
then
  cat "$WORK/webserver.log" >&2
  exit 1
fi

$VENV/python examples/demo/screenshots.py "$PORT" "$OUT" || {
  cat "$WORK/webserver.log" >&2
  exit 1
}
